"""Where a decode step's time goes: host (cProfile) and device (torch.profiler) views.

python benchmarks/gpu/profile_step.py [--batch 1] [--eager] [--prefill] [--prompt-len 512]
Qwen3-0.6B shape, dummy bf16 weights, 512-token prompts (--prompt-len), decode steps only.
--prefill: instead, the host side (cProfile) and the device time (CUDA events) of steps that
prefill a full token budget of 600-token prompts while 64 requests decode, as in the
standard workload's admission steps.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dummy_engine import dummy_llm, start_decoding  # noqa: E402
from lane_account import report  # noqa: E402

from strixlm.engine.request import SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prefill", action="store_true")
    ap.add_argument("--model", default="qwen3-0.6b", help="a config under benchmarks/configs")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--prompt-len", type=int, default=512, help="decode contexts start here")
    args = ap.parse_args()
    llm = dummy_llm(
        256 if args.prefill else max(args.batch),
        eager=args.eager,
        mem_frac=0.5 if args.model == "qwen3-0.6b" else 0.9,
        model=args.model,
        max_model_len=args.max_model_len,
    )
    engine = llm.engine
    if args.prefill:
        profile_prefill(engine, args.steps)
        return
    for b in args.batch:
        # Prefill (chunked under the token budget) and warm-up, so timing is pure decode.
        start_decoding(engine, b, args.prompt_len)
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
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(40)
        print(s.getvalue()[:9000])
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as p:
            for _ in range(10):
                engine.step()
            torch.cuda.synchronize()
        avg = p.key_averages()
        print(avg.table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))
        print(avg.table(sort_by="cpu_time_total", row_limit=15, max_name_column_width=60))
        print("\n".join(lanes_of(p, steps=10, label=f" batch {b}")))
        for rid in list(engine.outputs.parents):
            engine.abort_request(rid)


def lanes_of(prof, steps: int, label: str) -> list[str]:
    """The profiled steps' GPU time by kernel kind and stream (lane_account.py): attention,
    the other kernels, and the time both ran at once."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return report(json.load(f), steps, label)


def profile_prefill(engine, steps: int) -> None:
    """Mixed steps: a budget of fresh 600-token prompts on top of 64 decoding requests."""
    params = SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True)
    budget = engine.config.scheduler.max_num_batched_tokens
    for i in range(64):
        engine.add_request(list(range(1000 + i, 1512 + i)), params, kind="delta")
    for _ in range(64 * 512 // budget + 5):
        engine.step()
    core = engine.core
    prof = cProfile.Profile()
    host, wall = [], []
    for k in range(steps + 2):
        for i in range(budget // 600):
            engine.add_request(
                list(range(5000 + 700 * k + i, 5600 + 700 * k + i)),
                SamplingParams(temperature=0, max_tokens=1, ignore_eos=True),
                kind="delta",
            )
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if k >= 2:
            prof.enable()
        core.step()  # plans and launches the mixed step, takes in the previous one
        t1 = time.perf_counter()
        if k >= 2:
            prof.disable()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if k >= 2:
            host.append(t1 - t0)
            wall.append(t2 - t0)
    stats = torch.cuda.memory_stats()
    print(
        "allocator: "
        + ", ".join(f"{k} {stats.get(k)}" for k in ("num_alloc_retries", "num_device_alloc"))
    )
    host_ms, wall_ms = 1e3 * sum(host) / len(host), 1e3 * sum(wall) / len(wall)
    print(
        f"\n##### mixed steps ({budget} token budget, 64 decoding): host {host_ms:.1f} ms/step,"
        f" launch-to-idle {wall_ms:.1f} ms/step"
    )
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue()[:7000])
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(30)
    print(s.getvalue()[:7000])
    # The device view of the same kind of step: which kernels fill it.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for k in range(3):
            for i in range(budget // 600):
                engine.add_request(
                    list(range(90000 + 700 * k + i, 90600 + 700 * k + i)),
                    SamplingParams(temperature=0, max_tokens=1, ignore_eos=True),
                    kind="delta",
                )
            core.step()
        torch.cuda.synchronize()
    print("##### kernels over 3 mixed steps")
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    main()
