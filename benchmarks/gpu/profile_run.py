"""Where the standard workload's time goes on the GPU, over the whole run (not one shape).

python benchmarks/gpu/profile_run.py [--model qwen3-0.6b] [--json PATH]

Runs the standard throughput workload (256 requests, lengths uniform in [100, 1024], greedy,
ignore EOS) once unprofiled (the figure, and it warms Triton's cache), then again under
torch.profiler (CUDA activity only), with prefix caching off so that the profiled run
prefills its prompts again like the first. From the second run's kernel records it prints the
GPU-busy time (union of kernel intervals) against the wall time, the kernel time per
category, and paged attention's achieved bandwidth over the run: the KV bytes the memory
floor says must be read, over the attention kernels' summed time. The profiler's own
per-kernel cost makes the second run's wall a little longer; the kernel durations are the
device's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lane_account import union_length  # noqa: E402

from strixlm.benchmarks.memory_floor import (  # noqa: E402
    measure_copy_bandwidth,
    model_shape,
    schedule_loads,
    step_bytes,
    workload_floor,
)
from strixlm.benchmarks.roofline import (  # noqa: E402
    measure_matmul_flops,
    step_bound_s,
    step_phases,
)
from strixlm.benchmarks.throughput import resolve_model  # noqa: E402
from strixlm.benchmarks.workload import make_workload, special_token_ids, warmup_workload  # noqa: E402
from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402

# Kernel-name fragments -> category (first match wins).
CATEGORIES = [
    ("attention", ("paged_attn", "paged_decode", "merge_segments")),
    ("gemm", ("gemm", "gemv", "nvjet", "sm90_xmma", "cutlass", "cublas", "_mm_")),
    ("qk_norm_rope_kv", ("qk_norm_rope", "rotary", "kv_write")),
    ("rmsnorm", ("rmsnorm", "rms_norm")),
    ("activation", ("silu", "act_and_mul", "gelu")),
    ("sampler", ("sampl", "gumbel", "argmax", "topk", "top_k")),
    ("input_prep", ("input_prep", "prepare", "gather_block", "slot_mapping")),
    ("copy/fill", ("memcpy", "memset", "copy", "fill", "elementwise", "index")),
]


def category(name: str) -> str:
    low = name.lower()
    for cat, frags in CATEGORIES:
        if any(f in low for f in frags):
            return cat
    return "other"


def idle_gaps(intervals: list[tuple[float, float]]) -> list[float]:
    """Idle stretches (us) between kernels: short ones are launch gaps inside a graph,
    long ones the GPU waiting for the host."""
    gaps, end = [], None
    for s, e in sorted(intervals):
        if end is not None and s > end:
            gaps.append(s - end)
        end = e if end is None else max(end, e)
    return gaps


STEP_END = ("sample_kernel", "lm_head_argmax")  # one of them ends every step


Record = tuple[float, float, str]  # a profiled kernel's (start, end, name), in us


def kernel_records(kernels: list) -> list[Record]:
    """(start, end, name) of every profiled kernel, in start order."""
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in kernels)


def where_gaps_go(
    recs: list[Record],
    steps: list[tuple[int, int, int]],
    kv_bytes_per_token: int,
    step_floor_us: list[float] | None = None,
    step_bound_us: list[float] | None = None,
) -> None:
    """Where the idle time sits: gaps over 20 us by the kernel pair around them, and the
    run cut into steps at its sampling kernel (one per step) in buckets of 50 steps (prefill
    steps first, the small-batch tail last): each bucket's span, busy and idle time, its mean
    decode batch, and attention's time and read rate over the decode rows' KV (steps[i] is
    step i's (decode rows, their summed context, prompt tokens), recorded at scheduling;
    the admission steps' prompt rows are not counted in the rate). With step_floor_us and
    step_bound_us (each step's share of the memory floor, from the floor's own schedule, and
    its compute-aware bound, roofline.step_phases) each bucket also gets both and the
    fraction of each it ran at, and the run's time above them is summed by region
    (excess_by_region)."""
    pairs: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    end, prev = None, ""
    for s, e, name in recs:
        if end is not None and s - end > 20:
            pr = pairs[(prev[:40], name[:40])]
            pr[0] += 1
            pr[1] += s - end
        if end is None or e > end:
            end, prev = e, name
    print("idle gaps > 20 us by the kernels around them (count, ms):")
    for (a, b), (n, us) in sorted(pairs.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {n:5d} {us / 1e3:8.1f}  {a} -> {b}")
    cuts = [e for s, e, name in recs if any(f in name for f in STEP_END)]
    if len(cuts) < 2:
        return
    if len(cuts) != len(steps):
        print(f"({len(cuts)} sampling launches for {len(steps)} scheduled steps: no batch column)")
        steps = []
    if step_floor_us is None or step_bound_us is None:
        step_floor_us = step_bound_us = None  # the columns come as a pair
    elif len(step_floor_us) != len(cuts) or len(step_bound_us) != len(cuts):
        print(f"(the floor's schedule has {len(step_floor_us)} steps, the run {len(cuts)}: "
              "no floor column)")  # fmt: skip
        step_floor_us = step_bound_us = None
    print(
        "steps (cut at the sampling kernel), per 50: span ms, GPU busy ms, idle ms, mean span"
        " ms, mean decode rows, attention ms, attention TB/s over the decode KV"
        + (", floor ms, fraction of it, bound ms, fraction of it" if step_floor_us else "")
    )
    t0 = recs[0][0]
    bounds = [t0] + cuts
    spans_us = [b - a for a, b in zip(bounds, cuts, strict=False)]
    i = 0
    for lo in range(0, len(cuts), 50):
        hi = min(lo + 50, len(cuts))
        a, b = bounds[lo], bounds[hi]
        ivs, attn_us = [], 0.0
        while i < len(recs) and recs[i][0] < b:
            if recs[i][0] >= a:
                ivs.append((recs[i][0], min(recs[i][1], b)))
                if category(recs[i][2]) == "attention":
                    attn_us += recs[i][1] - recs[i][0]
            i += 1
        busy = union_length(ivs)
        span = b - a
        line = (f"  steps {lo:4d}-{hi - 1:4d}: {span / 1e3:8.1f} {busy / 1e3:8.1f}"
                f" {(span - busy) / 1e3:7.1f} {span / 1e3 / (hi - lo):7.2f}")  # fmt: skip
        if steps:
            rows = sum(s[0] for s in steps[lo:hi]) / (hi - lo)
            kv = sum(s[1] for s in steps[lo:hi]) * kv_bytes_per_token
            rate = kv / attn_us / 1e6 if attn_us else 0.0
            line += f" {rows:6.1f} {attn_us / 1e3:8.1f} {rate:5.2f}"
        if step_floor_us and step_bound_us:
            fl, bd = sum(step_floor_us[lo:hi]), sum(step_bound_us[lo:hi])
            line += f" {fl / 1e3:8.1f} {fl / span:6.1%} {bd / 1e3:8.1f} {bd / span:6.1%}"
        print(line)
    if step_floor_us and step_bound_us and steps:
        print(
            "time above the floor and the bound by region (steps; ms measured, floor, above"
            " it, bound, above it):"
        )
        for name, n, meas, fl, bd in excess_by_region(
            spans_us, step_floor_us, step_bound_us, steps
        ):
            print(f"  {name:22s} {n:5d} {meas / 1e3:8.1f} {fl / 1e3:8.1f} {(meas - fl) / 1e3:7.1f}"
                  f" {bd / 1e3:8.1f} {(meas - bd) / 1e3:7.1f}")  # fmt: skip


# Regions of a run by its steps' decode rows; admission steps (any prompt rows) come first.
REGIONS = [("decode, 129-256 rows", 129), ("decode, 65-128 rows", 65), ("decode, 1-64 rows", 1)]


def excess_by_region(
    spans_us: list[float],
    floor_us: list[float],
    bound_us: list[float],
    steps: list[tuple[int, int, int]],
) -> list[tuple[str, int, float, float, float]]:
    """(region, steps, measured us, floor us, bound us) for the admission steps (any prompt
    tokens) and for the other steps by their decode rows (REGIONS), then the whole run.
    Spans, floors, bounds and steps ((decode rows, context, prompt tokens), as record_steps
    keeps them) are one entry a step, in step order."""
    buckets: dict[str, list[int]] = {"admission steps": [], **{r: [] for r, _ in REGIONS}}
    for i, (rows, _, prompt) in enumerate(steps):
        if prompt:
            buckets["admission steps"].append(i)
        else:
            buckets[next(r for r, lo in REGIONS if rows >= lo or lo == 1)].append(i)
    idx_all = list(range(len(steps)))
    return [
        (name, len(idx), *(sum(v[i] for i in idx) for v in (spans_us, floor_us, bound_us)))
        for name, idx in [*buckets.items(), ("whole run", idx_all)]
    ]


def show_step_gaps(recs: list[Record], step: int, min_gap_us: float = 1.0) -> None:
    """One step's idle stretches of at least min_gap_us, each with the ops around it (the
    step runs from the sampling kernel that ends the step before to its own): with PDL the
    launch gaps inside the graph vanish, so what is left sits at graph and copy boundaries."""
    cuts = [i for i, (_, _, name) in enumerate(recs) if any(f in name for f in STEP_END)]
    if step + 1 >= len(cuts):
        return
    lo, hi = cuts[step] + 1, cuts[step + 1] + 1
    t0 = end = recs[cuts[step]][1]
    total, n = 0.0, 0
    print(
        f"step {step}: {hi - lo} ops over {(recs[hi - 1][1] - t0):.1f} us; gaps >= {min_gap_us} us:"
    )
    prev = recs[cuts[step]][2]
    for s, e, name in recs[lo:hi]:
        if s - end >= min_gap_us:
            total += s - end
            n += 1
            print(f"  at {s - t0:8.1f} us  gap {s - end:6.1f}  {prev[:45]} -> {name[:45]}")
        if e > end:
            end, prev = e, name
    print(f"  {n} gaps, {total:.1f} us")


def record_steps(llm: LLM) -> list[tuple[int, int, int]]:
    """Wrap the scheduler so every step appends (decode rows, their summed context after the
    step, prompt tokens): what that step's decode attention reads, in tokens per layer, and
    the prompt tokens it computes (chunks of more than one token: a one-token chunk, which
    the budget can leave, counts as a decode row)."""
    sched = llm.engine.core.scheduler
    schedule = sched.schedule
    steps: list[tuple[int, int, int]] = []

    def recorded():
        out = schedule()
        if not out.is_empty:
            n_new = out.num_scheduled_tokens
            ctx = [r.num_computed_tokens for r in sched.running if n_new.get(r.request_id) == 1]
            prompt = sum(n for n in n_new.values() if n > 1)
            steps.append((len(ctx), sum(ctx), prompt))
        return out

    sched.schedule = recorded
    return steps


# The engine's batch limits for this run; the floor and the bound walk the same schedule.
MAX_NUM_SEQS, TOKEN_BUDGET = 256, 8192


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--json", default=None)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument(
        "--show-steps", default="", help="comma-separated step indices: print their idle gaps"
    )
    args = ap.parse_args()
    folder, load_format = resolve_model(args.model, "dummy")
    hf = AutoConfig.from_pretrained(folder)
    avoid = special_token_ids(folder, hf)
    w = make_workload(args.num_prompts, (100, 1024), (100, 1024), hf.vocab_size, 0, avoid)
    warm = warmup_workload(hf.vocab_size, avoid, 0, n=8, input_len_range=(100, 1024))
    llm = LLM(
        folder, load_format=load_format, dtype="bfloat16", device="cuda", seed=0,
        max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=TOKEN_BUDGET, skip_tokenizer_init=True,
        enable_prefix_caching=False,
    )  # fmt: skip

    def params(wl):
        return [
            SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in wl.output_lens
        ]

    llm.generate(warm.prompts, params(warm), use_tqdm=False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(w.prompts, params(w), use_tqdm=False)
    torch.cuda.synchronize()
    plain_s = time.perf_counter() - t0
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    print(f"unprofiled run: {plain_s:.3f} s, {n_out / plain_s:,.0f} output tok/s")

    steps = record_steps(llm)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        llm.generate(w.prompts, params(w), use_tqdm=False)
        torch.cuda.synchronize()
        prof_s = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    intervals = []
    for e in kernels:
        dur = e.time_range.end - e.time_range.start
        intervals.append((e.time_range.start, e.time_range.end))
        by_cat[category(e.name)] += dur
        by_name[e.name][0] += dur
        by_name[e.name][1] += 1
    busy = union_length(intervals) / 1e6
    gaps = idle_gaps(intervals)
    ksum = sum(by_cat.values()) / 1e6
    print(f"profiled run: wall {prof_s:.3f} s, GPU busy {busy:.3f} s ({busy / prof_s:.1%}),"
          f" kernel time {ksum:.3f} s over {len(kernels)} kernels")  # fmt: skip
    for label, lo, hi in (("<= 2 us", 0, 2), ("2-20 us", 2, 20), ("20-200 us", 20, 200),
                          ("> 200 us", 200, float("inf"))):  # fmt: skip
        sel = [g for g in gaps if lo < g <= hi]
        print(f"  idle gaps {label:10s}: {len(sel):7d}, {sum(sel) / 1e6:.3f} s")

    pairs = [(len(p), o) for p, o in zip(w.prompts, w.output_lens, strict=True)]
    bw = measure_copy_bandwidth("cuda")
    floor = workload_floor(hf, 2, 2, pairs, MAX_NUM_SEQS, bw, TOKEN_BUDGET)
    attn_s = by_cat["attention"] / 1e6
    attn_bw = floor["kv_read_bytes"] / attn_s / 1e12 if attn_s else 0.0
    print(
        f"copy bandwidth {bw / 1e12:.2f} TB/s; floor {floor['floor_s']:.3f} s;"
        f" KV read {floor['kv_read_bytes'] / 1e12:.2f} TB -> attention {attn_bw:.2f} TB/s"
    )
    print(f"{'category':18s} {'seconds':>8s} {'share':>6s}")
    for cat, us in sorted(by_cat.items(), key=lambda kv: -kv[1]):
        print(f"{cat:18s} {us / 1e6:8.3f} {us / 1e6 / prof_s:6.1%}")
    recs = kernel_records(kernels)
    loads = schedule_loads(pairs, MAX_NUM_SEQS, TOKEN_BUDGET)
    step_floor_us = (step_bytes(model_shape(hf), 2, 2, loads) / bw * 1e6).tolist()
    rate = measure_matmul_flops("cuda")
    print(f"matmul {rate / 1e12:.0f} TFLOP/s (the compute-aware bound's rate)")
    step_bound_us = [1e6 * step_bound_s(p) for p in step_phases(hf, 2, 2, loads, bw, rate)]
    where_gaps_go(recs, steps, floor["kv_bytes_per_token"], step_floor_us, step_bound_us)
    for idx in filter(None, args.show_steps.split(",")):
        show_step_gaps(recs, int(idx))
    print("top kernels (total ms, launches, mean us):")
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:25]
    for name, (us, n) in top:
        print(f"  {us / 1e3:9.1f} {n:7d} {us / n:8.1f}  {name[:90]}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            unprofiled_s=plain_s, output_tokens=n_out, profiled_s=prof_s, gpu_busy_s=busy,
            kernel_s=ksum, idle_gaps_s=sum(gaps) / 1e6,
            categories_s={k: v / 1e6 for k, v in by_cat.items()},
            attention_tb_s=attn_bw, copy_bw_tb_s=bw / 1e12, floor_s=floor["floor_s"],
            top_kernels=[dict(name=n, total_ms=us / 1e3, count=c) for n, (us, c) in top],
        ), indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
