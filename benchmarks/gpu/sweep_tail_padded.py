"""Decode attention in the standard workload's small-batch tail as the engine runs it: each
batch padded to its CUDA graph's size, the config picked for that size.

python benchmarks/gpu/sweep_tail_padded.py [--json PATH] [--budget-s 200]

The engine captures decode graphs at 1, 2, 4, 8, 16, 24, 32, 40, ... rows
(cuda_graphs.capture_sizes) and plans each graph's attention for its padded size, so
batches 33-40 all run the 40-row graph's config; the extra rows are one-token sequences.
For each real batch size below, the contexts are the workload's at the first step with
that many requests alive (bench_decode_timeline.workload_shapes). Per batch it times, in
28-launch CUDA graphs (one per layer, as in a step): the default pick (32-token tiles, split
to SPLIT_TARGET_CTAS_PER_SM), the tail rule's (decode_tail.tail_config, opt-in: TAIL_TILE
64 unless STRIXLM_ATTN_TAIL_TILE sets another, TAIL_CTAS_PER_SM), and the unified kernel at
32- and 64-token tiles over segment counts, each checked against the first config's output.
It ends with the steps-weighted sum of each pick's time over the run.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from bench_decode_timeline import workload_shapes  # noqa: E402
from check_attention import DTYPE, HKV, HQ, D, attn_call, make_batch, rel_err  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import decode_tail  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.worker.cuda_graphs import capture_sizes  # noqa: E402

# Real batch sizes across the tail's graph sizes (40, 32, 24, 16, 8, 4, 2, 1).
BATCHES = [40, 37, 33, 32, 29, 26, 24, 21, 18, 16, 13, 10, 8, 5, 4, 3, 2, 1]
UPPER = 40960  # the padded max_seq_len a captured graph plans with
LAYERS = 28


def decode_steps(first: int = 30, last: int = 1037) -> dict[int, list[int]]:
    """The workload's decode contexts by step (built once; the helpers below read it)."""
    steps = list(range(first, last))
    return {step: ctxs for step, (_, ctxs) in zip(steps, workload_shapes(steps), strict=True)}


def step_of_batch(b: int, steps: dict[int, list[int]], first: int = 700) -> int | None:
    """The first step from `first` at which the workload has b requests decoding."""
    return next((s for s, ctxs in steps.items() if s >= first and len(ctxs) == b), None)


def steps_per_graph(steps: dict[int, list[int]]) -> dict[int, int]:
    """How many of the workload's decode steps run each padded graph size."""
    sizes = capture_sizes(256)
    counts: dict[int, int] = {}
    for ctxs in steps.values():
        if ctxs:
            s = sizes[bisect.bisect_left(sizes, len(ctxs))]
            counts[s] = counts.get(s, 0) + 1
    return counts


def pick(padded: int, sms: int, tail_tile: int) -> pa.AttnConfig:
    """select_config for a padded one-query graph with TAIL_TILE = tail_tile (0: the old
    pick, the DECODE_TILE rule)."""
    saved = decode_tail.TAIL_TILE
    decode_tail.TAIL_TILE = tail_tile
    try:
        return pa.select_config(HQ, HKV, D, padded, 1, UPPER, sms)
    finally:
        decode_tail.TAIL_TILE = saved


def time_batch(b: int, padded: int, ctxs: list[int]) -> dict:
    rows = [(c - 1, 1) for c in ctxs] + [(0, 1)] * (padded - b)  # padding: one-token rows
    q, _, _, cache, md = make_batch(rows, DTYPE, max_seq_len=UPPER)
    order = sorted(range(b), key=lambda i: -ctxs[i]) + list(range(b, padded))
    order_t = torch.tensor(order, dtype=torch.int32, device=q.device)
    sms = pa.num_sms(q.device)
    kv_bytes = sum(ctxs) * HKV * D * 2 * cache.element_size()
    new = pick(padded, sms, decode_tail.TAIL_TILE or 64)  # the tail rule (opt-in), on
    picks = {"old": pick(padded, sms, 0), "new": new}
    unified = dataclasses.replace(picks["new"], persistent=False, ctas_per_sm=0)
    for tile in (32, 64):
        for segs in (1, 2, 4, 8, 16, 32):
            if segs * HKV * b <= 8 * sms:  # past ~8 programs an SM nothing gains
                picks[f"t{tile}s{segs}"] = dataclasses.replace(unified, tile=tile, num_splits=segs)
    row: dict = {"batch": b, "padded": padded, "mean_ctx": sum(ctxs) / b, "configs": {}}
    timed: dict[str, float] = {}
    base = None
    for name, cfg in picks.items():
        fn = attn_call(q, cache, md, False, cfg, seq_order=order_t)
        out = fn()[:b]
        base = out if base is None else base
        err = rel_err(out, base)[0]
        key = str(cfg)
        if key not in timed:
            timed[key] = graph_time_us(fn, calls=LAYERS)
        t = timed[key]
        row["configs"][name] = {"config": key, "us": t, "rel_err": err}
        print(f"  b{b} (graph {padded}) {name:6s} {cfg.tile:3d}-token tiles, {cfg.num_splits:2d}"
              f" segs, persistent {cfg.persistent!s:5s}: {t:7.1f} us"
              f" ({kv_bytes / t / 1e6:.2f} TB/s) rel {err:.1e}", flush=True)  # fmt: skip
    del cache
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--batches", type=int, nargs="+", default=BATCHES)
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget_s
    sizes = capture_sizes(256)
    steps = decode_steps()
    weights = steps_per_graph(steps)
    print(f"decode steps per graph size: {dict(sorted(weights.items()))}")
    rows = []
    for b in args.batches:
        if time.monotonic() > deadline:
            print(f"b{b}: skipped (time budget spent)")
            continue
        step = step_of_batch(b, steps)
        if step is None:
            print(f"b{b}: no step of the workload has this batch")
            continue
        ctxs = steps[step]
        padded = sizes[bisect.bisect_left(sizes, b)]
        print(f"b{b}: step {step}, graph {padded}, mean context {sum(ctxs) / b:.0f}")
        rows.append(time_batch(b, padded, ctxs) | {"step": step})
    # Per graph size: the mean over its timed batches, weighted by the workload's steps there.
    summary: dict[str, float] = {}
    for name in ("old", "new"):
        total = 0.0
        for padded in sorted({r["padded"] for r in rows}):
            mine = [r["configs"][name]["us"] for r in rows if r["padded"] == padded]
            total += weights.get(padded, 0) * LAYERS * sum(mine) / len(mine)
        summary[name] = total / 1e3
    print(f"tail attention over the run (ms, steps-weighted): old {summary['old']:.1f},"
          f" new {summary['new']:.1f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "steps_per_graph": weights, "summary_ms": summary}, indent=1)
        )


if __name__ == "__main__":
    main()
