"""End-to-end GPU checks: strixlm on CUDA against HF transformers, and batch-1 decode latency.

1. A small random Qwen3 and Llama (built here with transformers, fp32): greedy tokens from
   strixlm on CUDA (Triton attention + CUDA graphs, and the torch backend eager) against HF
   `generate` on CUDA, over prompts of varied lengths, batched. Prints the token-match rate.
2. Batch-1 decode latency, Qwen3-0.6B shape, dummy bf16 weights, 512-token prompt: time per
   output token after the first, steps run back to back (no sync between them), for the
   eager and graph paths.

python benchmarks/gpu/check_e2e.py   (JSON to $OUT/check_e2e.json when OUT is set)
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
import traceback
import weakref

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dummy_engine import dummy_llm  # noqa: E402

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402

RESULTS: dict = {}


def tiny_model(kind: str, folder: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    common = dict(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=64, tie_word_embeddings=True, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **common))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.1)
    model.save_pretrained(folder)


def hf_greedy(folder: str, prompts: list[list[int]], n: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).cuda().eval()
    out = []
    for p in prompts:
        with torch.no_grad():
            g = model.generate(
                torch.tensor([p], device="cuda"),
                max_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                attention_mask=torch.ones(1, len(p), dtype=torch.long, device="cuda"),
            )
        out.append(g[0, len(p) :].tolist())
    del model
    torch.cuda.empty_cache()
    return out


def match_rate(a: list[list[int]], b: list[list[int]]) -> tuple[float, int]:
    same = sum(x == y for s, t in zip(a, b, strict=False) for x, y in zip(s, t, strict=False))
    total = sum(len(s) for s in a)
    exact = sum(s == t for s, t in zip(a, b, strict=False))
    return same / total, exact


def check_vs_hf() -> None:
    g = torch.Generator().manual_seed(1)
    lens = [1, 5, 17, 64, 130, 300, 700, 1500]
    prompts = [torch.randint(0, 4096, (n,), generator=g).tolist() for n in lens]
    n_out = 32
    for kind in ("qwen3", "llama"):
        with tempfile.TemporaryDirectory() as d:
            tiny_model(kind, d)
            ref = hf_greedy(d, prompts, n_out)
            for backend, eager in (("triton", False), ("triton", True), ("torch", True)):
                key = f"{kind}/{backend}/{'eager' if eager else 'graphs'}"
                try:
                    llm = LLM(
                        d,
                        device="cuda",
                        dtype="float32",
                        skip_tokenizer_init=True,
                        attention_backend=backend,
                        enforce_eager=eager,
                        max_num_batched_tokens=512,
                        # A fixed pool: an engine sized by free memory would count a previous
                        # engine's cache if that one is still alive (reported below).
                        num_gpu_blocks_override=4096,
                    )
                    params = SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True)
                    outs = llm.generate(prompts, params, use_tqdm=False)
                    got = [o.outputs[0].token_ids for o in outs]
                    rate, exact = match_rate(got, ref)
                    runner = llm.engine.core.runner
                    # Chunked prefill under the 512-token budget gives mixed steps: with
                    # graphs on, those of <= 512 tokens replay the mixed-step graphs.
                    mixed = runner.mixed_graphs.num_replays if runner.mixed_graphs else 0
                    RESULTS[key] = {
                        "token_match": rate,
                        "exact_sequences": exact,
                        "num_sequences": len(prompts),
                        "mixed_graph_replays": mixed,
                    }
                    print(
                        f"{key:28s} token match {rate:.4f}, exact {exact}/{len(prompts)}, "
                        f"mixed-step graph replays {mixed}"
                    )
                    alive = weakref.ref(runner)
                    del llm, runner
                    gc.collect()
                    RESULTS[key]["engine_freed"] = alive() is None
                    print(f"{key:28s} engine freed after del: {alive() is None}")
                    torch.cuda.empty_cache()
                except Exception:
                    traceback.print_exc()
                    RESULTS[key] = {"error": traceback.format_exc(limit=3)}


def decode_latency() -> None:
    prompt = list(range(1000, 1512))
    for eager in (True, False):
        key = f"latency/{'eager' if eager else 'graphs'}"
        try:
            llm = dummy_llm(16, eager=eager)
            engine = llm.engine
            for n_out in (8, 8):  # warm-up
                llm.generate(
                    [prompt],
                    SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True),
                    use_tqdm=False,
                )
            n = 256
            engine.add_request(
                prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), kind="delta"
            )
            # The cadence a user sees: steps back to back, as LLM.generate and the server
            # run them (async scheduling overlaps the host's step with the GPU's). Sessions
            # 10-34 synchronized after every step, which serialized the two (1.3 ms against
            # profile_step.py's 0.9 ms on the H200).
            times = []
            while engine.has_unfinished():
                engine.step()
                times.append(time.perf_counter())
            torch.cuda.synchronize()
            times[-1] = time.perf_counter()
            per_tok = (times[-1] - times[0]) / (len(times) - 1)
            RESULTS[key] = {"ms_per_token": per_tok * 1e3, "tokens": n, "prompt": len(prompt)}
            print(f"{key:28s} {per_tok * 1e3:.3f} ms/token (batch 1, 512-token prompt)")
            del llm, engine
            gc.collect()
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()
            RESULTS[key] = {"error": traceback.format_exc(limit=3)}


if __name__ == "__main__":
    check_vs_hf()
    decode_latency()
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "check_e2e.json"), "w") as f:
            json.dump(RESULTS, f, indent=1)
