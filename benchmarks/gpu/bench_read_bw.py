"""How fast can this GPU read HBM? The ceiling for paged decode attention, which only reads.

python benchmarks/gpu/bench_read_bw.py [--json PATH]

The memory floor divides by the copy bandwidth (read + write bytes of a device-to-device
copy); decode attention reads KV and writes almost nothing, so its ceiling is the read
bandwidth. Prints the copy bandwidth at a few sizes and a Triton streaming-read kernel
(each program sums its contiguous chunk into one float) over a few configs, on 4 GiB (TB/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _read_kernel(x_ptr, out_ptr, n_per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = x_ptr + pid.to(tl.int64) * n_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n_per_prog, BLOCK):
        acc += tl.load(base + i + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def timed(fn, iters: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for size in (256 << 20, 1 << 30, 2 << 30):
        src = torch.ones(size, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t = timed(lambda src=src, dst=dst: dst.copy_(src))
        print(f"copy {size >> 20:5d} MiB: {2 * size / t / 1e12:.2f} TB/s (read + write)")
        rows.append(dict(kind="copy", bytes=size, tb_s=2 * size / t / 1e12))
        del src, dst
    n = 2 << 30  # bf16 elements: 4 GiB
    x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for progs_per_sm in (2, 4, 8, 32):
        for block, warps in ((2048, 4), (4096, 4), (8192, 8)):
            progs = sms * progs_per_sm
            per = n // progs // block * block
            out = torch.empty(progs, device="cuda")

            def run(per=per, block=block, warps=warps, progs=progs, out=out):
                _read_kernel[(progs,)](x, out, per, BLOCK=block, num_warps=warps)

            t = timed(run)
            bw = progs * per * 2 / t / 1e12
            print(
                f"triton read {progs_per_sm:2d} progs/SM block {block} warps {warps}: {bw:.2f} TB/s"
            )
            rows.append(dict(kind="read", progs_per_sm=progs_per_sm, block=block, tb_s=bw))
    t = timed(lambda: x.sum(dtype=torch.float32))
    print(f"torch sum: {n * 2 / t / 1e12:.2f} TB/s")
    rows.append(dict(kind="torch_sum", tb_s=n * 2 / t / 1e12))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
