"""Where a decode step's time goes: host (cProfile) and device (torch.profiler) views.

python benchmarks/gpu/profile_step.py [--batch 1] [--eager]
Qwen3-0.6B shape, dummy bf16 weights, 512-token prompts, decode steps only.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    model = os.path.join(
        os.path.dirname(__file__), "..", "..", "strixlm", "benchmarks", "configs", "qwen3-0.6b"
    )
    llm = LLM(
        model,
        load_format="dummy",
        device="cuda",
        dtype="bfloat16",
        skip_tokenizer_init=True,
        enforce_eager=args.eager,
        max_num_seqs=max(args.batch),
        gpu_memory_utilization=0.5,
    )
    engine = llm.engine
    for b in args.batch:
        params = SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True)
        for i in range(b):
            engine.add_request(list(range(1000 + i, 1512 + i)), params, kind="delta")
        # Prefill (chunked under the token budget) and warm-up, so timing is pure decode.
        for _ in range(b * 512 // engine.config.scheduler.max_num_batched_tokens + 5):
            engine.step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            engine.step()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / args.steps
        print(f"\n##### batch {b}: {dt * 1e3:.2f} ms/step ({b / dt:.0f} tok/s)")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            engine.step()
        torch.cuda.synchronize()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue()[:6000])
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as p:
            for _ in range(10):
                engine.step()
            torch.cuda.synchronize()
        avg = p.key_averages()
        print(avg.table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))
        print(avg.table(sort_by="cpu_time_total", row_limit=15, max_name_column_width=60))
        for rid in list(engine.outputs.parents):
            engine.abort_request(rid)


if __name__ == "__main__":
    main()
