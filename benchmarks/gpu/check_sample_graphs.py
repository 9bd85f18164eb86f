"""GPU check: decode steps sampled by the sampling graphs give the eager sampler's tokens.

Two engines on one GPU (Qwen3-0.6B shape, dummy bf16 weights): one samples decode steps
in the sampling graphs (worker/sample_graphs.py), the other with those graphs removed, so
every step samples eagerly. Same requests: greedy rows, seeded temperatures, mixed in one
batch, at batch sizes that pad (200 rows: the LM head's 96-256-row configs too). Every
token must agree.

python benchmarks/gpu/check_sample_graphs.py   (exits 1 on a mismatch)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402

MODEL = os.path.join(
    os.path.dirname(__file__), "..", "..", "strixlm", "benchmarks", "configs", "qwen3-0.6b"
)


def requests(n: int) -> tuple[list[list[int]], list[SamplingParams]]:
    prompts, params = [], []
    for i in range(n):
        prompts.append([(17 * i + 31 * j) % 50_000 + 1 for j in range(20 + 13 * (i % 64))])
        temp = (0.0, 0.7, 1.0)[i % 3]
        # Output lengths differ, so the batch shrinks through padded sizes.
        params.append(
            SamplingParams(temperature=temp, seed=1000 + i, max_tokens=24 + i, ignore_eos=True)
        )
    return prompts, params


def main() -> None:
    kw = dict(
        load_format="dummy",
        device="cuda",
        dtype="bfloat16",
        skip_tokenizer_init=True,
        max_num_seqs=256,
        gpu_memory_utilization=0.3,
        max_model_len=2048,
    )
    graph_llm = LLM(MODEL, **kw)
    # Its memory budget counts the first engine's allocations as its own peak.
    eager_llm = LLM(MODEL, **{**kw, "gpu_memory_utilization": 0.7})
    eager_llm.engine.core.runner.sample_graphs = None
    sg = graph_llm.engine.core.runner.sample_graphs
    assert sg is not None, "no sampling graphs (STRIXLM_DISABLE_SAMPLE_GRAPHS set?)"
    ok = True
    for n, greedy_only in ((200, False), (37, False), (8, True), (1, False)):
        prompts, params = requests(n)
        if greedy_only:
            params = [SamplingParams(temperature=0, max_tokens=p.max_tokens, ignore_eos=True)
                      for p in params]  # fmt: skip
        before = sg.num_replays
        ours = graph_llm.generate(prompts, params, use_tqdm=False)
        ref = eager_llm.generate(prompts, params, use_tqdm=False)
        total = same = 0
        for o, r in zip(ours, ref, strict=True):
            a, b = o.outputs[0].token_ids, r.outputs[0].token_ids
            total += len(b)
            same += sum(x == y for x, y in zip(a, b, strict=False))
            ok &= a == b
        print(
            f"batch {n:3d} {'greedy' if greedy_only else 'mixed '}: {same}/{total} tokens "
            f"equal, {sg.num_replays - before} sampling-graph replays"
        )
        ok &= sg.num_replays > before
    print("ALL OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
