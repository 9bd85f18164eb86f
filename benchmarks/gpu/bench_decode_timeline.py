"""Where a persistent decode-attention launch spends the time beyond streaming its bytes.

python benchmarks/gpu/bench_decode_timeline.py [--json PATH]

The whole-run profile puts ~12-16 us per launch of the persistent kernel above its bytes at
the streaming rate. Here 28 launches (one per layer, back to back in one CUDA graph, as in a
decode step) run with the kernel's TIMING records: every program's start and end
(globaltimer, ns), SM and tile count. Per shape it prints medians over the launches of:
span (first start to last end), start skew (last start - first start), end skew, the tail
(last end - the end by which 90% of programs are done), mean program busy time / span,
the gap to the next launch's first start, and a least-squares fit of program time against
its tiles (fixed ns per program + ns per tile). The graph time with and without the records
shows what they cost. Qwen3-0.6B heads, bf16 cache, blocks shuffled over the pool.
--variants: the kernels to compare, outputs checked against the first one's: "deal:F"
is paged_decode's dealt grid handing out the shortest share F of the sequences dynamically
(the only kind now: session 8 also had "sk:D:C", a stream-K grid since removed, and
session 41 "deal:F:S", S online softmaxes a tile, removed after it lost 7%).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from check_attention import DTYPE, HKV, HQ, SCALE, D, make_batch, rel_err  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402

LAYERS = 28


def _spread(b: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(b)]


SHAPES = [
    ("b256 spread100-2000", _spread(256, 100, 2000, 0)),
    ("b256 ctx512", [512] * 256),
    ("b264 ctx512 (4 per program)", [512] * 264),
    ("b192 spread200-2000", _spread(192, 200, 2000, 1)),
    ("b128 spread300-2000", _spread(128, 300, 2000, 2)),
    ("b96 spread500-2000", _spread(96, 500, 2000, 3)),
    # The dealt grid splits these in two segments per sequence.
    ("b64 spread600-2000", _spread(64, 600, 2000, 4)),
    ("b48 spread700-2000", _spread(48, 700, 2000, 5)),
]


def workload_shapes(steps: list[int], budget: int = 8192) -> list[tuple[str, list[int]]]:
    """The standard workload's decode batch at the given steps: its seed-0 lengths
    (strixlm.benchmarks.workload), each request admitted at the step its prompt's cumulative
    tokens reach under the token budget, alive while it has output left."""
    import numpy as np

    from strixlm.benchmarks import workload as wl

    w = wl.make_workload(
        wl.DEFAULT_NUM_PROMPTS, wl.DEFAULT_INPUT_LEN_RANGE, wl.DEFAULT_OUTPUT_LEN_RANGE,
        vocab_size=2,  # the lengths are drawn before the tokens, so they do not depend on it
    )  # fmt: skip
    prompts = np.array([len(t) for t in w.prompts])
    admitted = np.cumsum(prompts) // budget
    shapes = []
    for s in steps:
        made = s - admitted
        ctxs = [
            int(c)
            for c, m, o in zip(prompts + made, made, w.output_lens, strict=True)
            if 0 <= m < o
        ]
        shapes.append((f"workload step {s} (b{len(ctxs)})", ctxs))
    return shapes


def _fit(tiles: list[float], dur: list[float]) -> tuple[float, float]:
    """Least squares dur = a + b * tiles; (a, b), or (mean, 0) when tiles do not vary."""
    mt, md = statistics.fmean(tiles), statistics.fmean(dur)
    var = sum((t - mt) ** 2 for t in tiles)
    if var == 0:
        return md, 0.0
    b = sum((t - mt) * (d - md) for t, d in zip(tiles, dur, strict=True)) / var
    return md - b * mt, b


def launch_stats(rec: torch.Tensor, next_start: float | None) -> dict:
    """rec [programs, 4] int64: start, end, sm, tiles."""
    start, end = rec[:, 0].double(), rec[:, 1].double()
    tiles = rec[:, 3].double()
    live = tiles > 0
    if not live.any():  # everything handed out dynamically: no dealt tiles recorded
        live = tiles == 0
    dur = end - start
    span = float(end.max() - start.min())
    a, b = _fit(tiles[live].tolist(), dur[live].tolist())
    return dict(
        span=span,
        start_skew=float(start.max() - start.min()),
        end_skew=float(end.max() - end.min()),
        tail=float(end.max() - torch.quantile(end, 0.9)),
        busy_frac=float(dur.mean()) / span,
        gap_after=(next_start - float(end.max())) if next_start is not None else None,
        fixed_ns=a,
        per_tile_ns=b,
        tiles_max_over_mean=float(tiles.max() / tiles[live].mean().clamp(min=1)),
    )


def run_shape(name: str, ctxs: list[int], variant: str, want=None) -> dict:
    b = len(ctxs)
    rows = [(c - 1, 1) for c in ctxs]
    q, _, _, cache, md = make_batch(rows, DTYPE)
    dev = q.device
    sms = pa.num_sms(dev)
    cfg = pa.select_config(HQ, HKV, D, b, 1, max(ctxs), sms)
    assert cfg.persistent, cfg
    kind, frac = variant.split(":")
    assert kind == "deal", variant
    n_prog = pdk.persistent_programs(b * cfg.num_splits, HKV, sms, cfg.ctas_per_sm)
    order = torch.tensor(sorted(range(b), key=lambda i: -ctxs[i]), dtype=torch.int32, device=dev)
    timing = torch.zeros((LAYERS, HKV * n_prog, 4), dtype=torch.int64, device=dev)
    outs = [torch.empty_like(q) for _ in range(2)]

    def step(timed: bool) -> None:
        for i in range(LAYERS):
            args = (q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, outs[i % 2])
            kw = dict(block_m=cfg.block_m, tile=cfg.tile, num_warps=cfg.num_warps,
                      num_stages=cfg.num_stages, k_rows=cfg.k_rows, num_programs=n_prog,
                      timing=timing[i] if timed else None)  # fmt: skip
            pdk.paged_decode_persistent(
                *args, **kw, sms=sms, seq_order=order, dynamic_frac=float(frac),
                num_segs=cfg.num_splits,
            )  # fmt: skip

    step(False)
    torch.cuda.synchronize()
    got = outs[(LAYERS - 1) % 2][:b].clone()
    err = rel_err(got, want)[0] if want is not None else 0.0
    t_plain = graph_time_us(lambda: step(False)) / LAYERS
    t_timed = graph_time_us(lambda: step(True)) / LAYERS
    torch.cuda.synchronize()
    recs = timing.cpu()  # the last replay's records
    firsts = [float(recs[i, :, 0].min()) for i in range(LAYERS)]
    per = [launch_stats(recs[i], firsts[i + 1] if i + 1 < LAYERS else None)
           for i in range(LAYERS)]  # fmt: skip
    med = {k: statistics.median(p[k] for p in per if p[k] is not None) for k in per[0]}
    kv_bytes = sum(ctxs) * HKV * D * 2 * cache.element_size()
    print(
        f"{name}, {variant}: {t_plain:6.1f} us/launch in a {LAYERS}-launch graph "
        f"({kv_bytes / t_plain / 1e6:.2f} TB/s; with records {t_timed:.1f}); span "
        f"{med['span'] / 1e3:.1f} us, start skew {med['start_skew'] / 1e3:.1f}, end skew "
        f"{med['end_skew'] / 1e3:.1f}, tail (last 10%) {med['tail'] / 1e3:.1f}, busy/span "
        f"{med['busy_frac']:.3f}, gap to next {med['gap_after'] / 1e3:.1f} us; program time "
        f"~ {med['fixed_ns'] / 1e3:.1f} us + {med['per_tile_ns'] / 1e3:.2f} us/tile; tiles "
        f"max/mean {med['tiles_max_over_mean']:.3f} (walked); rel err vs the first {err:.1e}"
    )
    return dict(shape=name, variant=variant, us_per_launch=t_plain,
                us_per_launch_timed=t_timed, kv_bytes=kv_bytes, programs_per_head=n_prog,
                median=med, rel_err=err, out=got)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["deal:0", "deal:0.25"],
        help="kernels compared per shape (see the module docstring)",
    )
    ap.add_argument(
        "--workload",
        nargs="*",
        type=int,
        default=None,
        help="time the standard workload's decode batches at these steps instead of SHAPES",
    )
    args = ap.parse_args()
    shapes = SHAPES if args.workload is None else workload_shapes(args.workload)
    rows, bad = [], []
    for name, ctxs in shapes:
        base = None
        for variant in args.variants:
            row = run_shape(name, ctxs, variant, base)
            base = row["out"] if base is None else base
            if row["rel_err"] > 1e-2:
                bad.append((name, variant))
            rows.append({k: v for k, v in row.items() if k != "out"})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("outputs agree" if not bad else f"MISMATCH: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
