"""Upper bound of removing launches from the decode step: times steady decode steps with
some per-layer launches replaced by nothing (wrong outputs: a timing probe, not a path).

python benchmarks/gpu/probe_skip_launches.py [--batch 256 192 160] [--skip none norm silu norm,silu]

Each --skip value runs in a fresh process (the CUDA graphs are captured after the patch):
- norm: every RMSNorm returns its input unnormalized (and the residual unchanged), so the
  two add + RMSNorm launches of each layer (and the final one) are gone. Only for batches
  where o_proj and down return tensors, not split-K partials (129-256 rows);
- silu: silu_and_mul returns the gate half as a strided view, so its launch is gone (down
  reads the view);
- none: the engine as it is.
What a fused path could win is at most the difference; what it costs to fuse comes on top.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def patch(skips: set[str]) -> None:
    if "norm" in skips:
        from strixlm.layers import norm
        from strixlm.layers.splitk_partials import SplitKPartials

        def no_norm(self, x, residual=None):
            if isinstance(x, SplitKPartials):  # <= 128 rows (warm-up, capture): untimed
                x = x.materialize()
            if residual is None:
                return x
            return x, residual

        norm.RMSNorm.forward = no_norm
    if "silu" in skips:
        from strixlm.layers import linear

        def no_silu(gu):
            return gu[:, : gu.shape[1] // 2]

        linear.silu_and_mul = no_silu


def kernel_table(engine, steps: int) -> str:
    """The decode steps' kernels by total GPU time (torch.profiler), top 16: total ms per
    step, launches per step, mean us (PDL-launched kernels include their wait)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda e: -e.device_time_total)
    lines = []
    for e in rows[:16]:
        total, mean = e.device_time_total / steps / 1e3, e.device_time_total / e.count
        lines.append(
            f"  {total:8.3f} ms/step {e.count / steps:6.1f}/step {mean:8.1f} us  {e.key[:90]}"
        )
    return "\n".join(lines)


def child(
    batches: list[int], skips: set[str], steps: int, prompt_len: int, kernels: list[int]
) -> dict:
    patch(skips)
    from dummy_engine import dummy_llm
    from graph_timing import batch_times_ms

    from strixlm.engine.request import SamplingParams

    llm = dummy_llm(max(batches))
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True)
    budget = engine.config.scheduler.max_num_batched_tokens
    out = {}
    for n, b in enumerate(batches):
        base = 1000 + n * 997
        prompts = [[base + (i + j) % 100_000 for j in range(prompt_len)] for i in range(b)]
        rids = [engine.add_request(p, params, kind="delta") for p in prompts]
        for _ in range(b * prompt_len // budget + 10):
            engine.step()
        torch.cuda.synchronize()
        out[b] = min(batch_times_ms(engine.step, steps))
        if b in kernels:
            print(f"##### kernels at batch {b} (skip {sorted(skips) or 'none'})")
            print(kernel_table(engine, 10), flush=True)
        for rid in rids:
            engine.abort_request(rid)
        while engine.has_unfinished():
            engine.step()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[256, 192, 160])
    ap.add_argument("--skip", nargs="+", default=["none", "norm", "silu", "norm,silu"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--prompt-len", type=int, default=700)
    ap.add_argument("--kernels", type=int, nargs="*", default=[], help="profile these batches")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child is not None:
        skips = set() if args.child == "none" else set(args.child.split(","))
        res = child(args.batch, skips, args.steps, args.prompt_len, args.kernels)
        print("RESULT " + json.dumps(res))
        return
    results = {}
    for s in args.skip:
        cmd = [sys.executable, __file__, "--child", s, "--steps", str(args.steps)]
        cmd += ["--prompt-len", str(args.prompt_len), "--batch", *map(str, args.batch)]
        cmd += ["--kernels", *map(str, args.kernels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        for ln in proc.stdout.splitlines():
            if not ln.startswith("RESULT "):
                print(ln)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not line:
            print(f"{s}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}")
            continue
        results.setdefault(s, json.loads(line[0][7:]))
        print(f"{s}: " + ", ".join(f"b{b} {t:.3f} ms" for b, t in results[s].items()), flush=True)
    base = results.get("none")
    if base:
        for s, r in results.items():
            if s != "none":
                print(
                    f"skip {s}: "
                    + ", ".join(
                        f"b{b} -{base[b] - t:.3f} ms ({(base[b] - t) / base[b] * 100:.1f}%)"
                        for b, t in r.items()
                    )
                )


if __name__ == "__main__":
    main()
