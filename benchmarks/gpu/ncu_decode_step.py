"""Hardware counters for one decode step, read with Nsight Compute (ncu).

Under ncu (`run_remeasure.sh ncu` starts it so):
    python benchmarks/gpu/ncu_decode_step.py --batch 256 --prompt-len 800
builds the Qwen3-0.6B-shaped engine with dummy bf16 weights, prefills `batch` requests,
decodes a few warm-up steps, then opens ncu's capture range for exactly one decode step
(CUDA graph replays included: ncu profiles each graph node; the section caps it at the
step's first NCU_COUNT launches).

Afterwards, on the CSV that `ncu --csv --page raw` wrote:
    python benchmarks/gpu/ncu_decode_step.py --summarize raw.csv
groups the kernels by name and prints, per group, launches, time, DRAM and L2 throughput
(% of peak), bytes moved, and SM / tensor-pipe activity, so each kernel's limit can be read
off: a kernel near the DRAM peak is done; one near the L2 peak with little DRAM traffic is
held by re-reads from L2; one with neither is held by latency.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Counters read per kernel: few enough for ncu to replay each kernel only a few times.
METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__grid_size",
    "launch__block_size",
]


def run_target(batch: int, prompt_len: int, eager: bool, mem_frac: float) -> None:
    import torch
    from dummy_engine import dummy_llm, start_decoding

    engine = dummy_llm(batch, eager=eager, mem_frac=mem_frac).engine
    start_decoding(engine, batch, prompt_len)
    engine.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    engine.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    for rid in list(engine.outputs.parents):
        engine.abort_request(rid)


def _num(s: str) -> float:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return float("nan")


def short_name(name: str) -> str:
    """Group key: cuBLAS / CUTLASS names keep their tile shape, Triton names their function."""
    name = re.sub(r"\(.*$", "", name).strip()
    if name.startswith("void "):
        name = name[5:]
    name = re.sub(r"<.*$", "", name) if "cutlass" not in name and "sm90" not in name else name
    return name[:90]


def summarize(path: str) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # ncu's raw page: a header row, a units row, then one row per kernel.
    head = rows[0]
    units = rows[1]
    col = {h: i for i, h in enumerate(head)}
    kernels = rows[2:]
    name_col = col.get("Kernel Name", col.get("Function Name"))

    def get(r: list[str], m: str) -> float:
        return _num(r[col[m]]) if m in col and col[m] < len(r) else float("nan")

    # Time unit of gpu__time_duration in this export (ns / us / ms).
    t_unit = units[col["gpu__time_duration.sum"]] if "gpu__time_duration.sum" in col else "ns"
    to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    scale_t = to_us.get(t_unit, 1e-3)

    def to_mb(r: list[str], m: str) -> float:
        u = units[col[m]] if m in col else "byte"
        f = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "KB": 1e-3, "MB": 1.0}
        return get(r, m) * f.get(u, 1e-6)

    groups: dict[str, list[list[str]]] = defaultdict(list)
    for r in kernels:
        groups[short_name(r[name_col])].append(r)
    tensor = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
    print(f"{len(kernels)} kernels profiled; times in us (ncu serialises, so no PDL overlap)")
    hdr = (
        f"{'kernel':<60} {'n':>4} {'us/launch':>9} {'total us':>9} {'DRAM%':>6} {'L2%':>5} "
        f"{'SM%':>5} {'TC%':>5} {'DRAM MB':>8} {'L2 MB':>8} {'occ%':>5} grid"
    )
    print(hdr)
    order = sorted(
        groups.items(), key=lambda kv: -sum(get(r, "gpu__time_duration.sum") for r in kv[1])
    )
    for name, rs in order:
        n = len(rs)

        def avg(m: str, rs: list[list[str]] = rs) -> float:
            return sum(get(r, m) for r in rs) / len(rs)

        t = avg("gpu__time_duration.sum") * scale_t
        dram_mb = (
            sum(to_mb(r, "dram__bytes_read.sum") + to_mb(r, "dram__bytes_write.sum") for r in rs)
            / n
        )
        l2_mb = sum(to_mb(r, "lts__t_bytes.sum") for r in rs) / n
        tc = avg(tensor)
        grid = rs[0][col["launch__grid_size"]] if "launch__grid_size" in col else "?"
        print(
            f"{name:<60} {n:>4} {t:>9.2f} {t * n:>9.1f} "
            f"{avg('gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'):>6.1f} "
            f"{avg('lts__throughput.avg.pct_of_peak_sustained_elapsed'):>5.1f} "
            f"{avg('sm__throughput.avg.pct_of_peak_sustained_elapsed'):>5.1f} {tc:>5.1f} "
            f"{dram_mb:>8.2f} {l2_mb:>8.2f} "
            f"{avg('sm__warps_active.avg.pct_of_peak_sustained_active'):>5.1f} {grid}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=800)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--mem-frac", type=float, default=0.5, help="gpu_memory_utilization")
    ap.add_argument("--summarize", metavar="CSV")
    ap.add_argument("--ncu-args", action="store_true", help="print ncu's --metrics flag")
    args = ap.parse_args()
    if args.ncu_args:
        print("--metrics", ",".join(METRICS))
    elif args.summarize:
        summarize(args.summarize)
    else:
        run_target(args.batch, args.prompt_len, args.eager, args.mem_frac)


if __name__ == "__main__":
    main()
