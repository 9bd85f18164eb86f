"""Decode attention configs at the standard workload's shapes: which tile/warps/stages/split win.

python benchmarks/gpu/sweep_decode_attn.py [--json PATH] [--budget-s 240]

Qwen3-0.6B heads (16 q, 8 kv, dim 128), bf16 cache, blocks shuffled over the pool. For each
shape every config is checked against the fp32 reference once, captured in a CUDA graph and
timed by replaying it (so Python launch overhead does not count, as in the engine's decode
graphs); prints the heuristic's time, the best five and the achieved KV-read bandwidth.
The config space is kept small (each new constexpr combination is a JIT compile of ~1 s),
and the sweep stops cleanly when --budget-s runs out, printing what it has.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from block_layouts import contiguous_order, engine_order, prompt_lengths, relayout  # noqa: E402
from check_attention import (  # noqa: E402
    DTYPE,
    HKV,
    HQ,
    SCALE,
    D,
    attn_call,
    make_batch,
    rel_err,
)
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import paged_attention as pa  # noqa: E402


def _spread(b: int, lo: int, hi: int, seed: int = 0) -> list[int]:
    """Contexts spread like the standard workload's mid-run decode batches (prompt in
    [100, 1024] plus what each request has generated so far)."""
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(b)]


# (name, contexts)
SHAPES = [
    ("b256 spread100-2000", _spread(256, 100, 2000)),
    ("b256 ctx520", [520] * 256),
    ("b128 spread300-2000", _spread(128, 300, 2000, 1)),
    ("b64 spread600-2000", _spread(64, 600, 2000, 2)),
    ("b200 spread400-1500", _spread(200, 400, 1500, 3)),
]


def persistent_ab(name, q, cache, md, ctxs, order, kv_bytes) -> dict:
    """The unified kernel (one program per sequence and kv head) against the persistent
    decode grid at a few programs-per-SM and tile configs (bit-equal is reported, not
    required: the compiled loops may contract differently)."""
    from strixlm.kernels import paged_decode as pdk

    sms = pa.num_sms(q.device)
    heur = pa.select_config(HQ, HKV, D, len(ctxs), 1, max(ctxs), sms)
    unified = dataclasses.replace(heur, persistent=False)
    base_fn = attn_call(q, cache, md, False, unified, seq_order=order)
    base = base_fn()
    t_base = graph_time_us(base_fn)
    print(f"{name}: unified {unified} {t_base:.1f} us ({kv_bytes / t_base / 1e6:.2f} TB/s)")
    row = {"shape": name, "unified_us": t_base, "persistent": []}
    for tile, warps, stages in ((64, 2, 5), (32, 2, 5), (32, 2, 6)):  # K/V double-buffered
        cfg = dataclasses.replace(unified, tile=tile, num_warps=warps, num_stages=stages)
        t = graph_time_us(attn_call(q, cache, md, False, cfg, seq_order=order))
        print(f"    unified tile {tile} w{warps} s{stages}: {t:7.1f} us"
              f" ({kv_bytes / t / 1e6:.2f} TB/s, x{t_base / t:.3f})")  # fmt: skip
        row.setdefault("unified_variants", []).append(dict(tile=tile, stages=stages, us=t))
    # (programs per SM, tile, warps, stages); at tile 64 one CTA takes 39 KB of shared
    # memory with K/V single-buffered (stages <= 4), 72 KB double-buffered (stages 5).
    variants = [(4, 64, 2, 2), (5, 64, 2, 2), (6, 64, 2, 2), (3, 64, 2, 5), (8, 32, 2, 3),
                (10, 32, 2, 3), (5, 32, 2, 5)]  # fmt: skip
    for ctas, tile, warps, stages in variants:
        n_prog = max(1, min(len(ctxs), sms * ctas // HKV))

        def fn(tile=tile, warps=warps, stages=stages, n_prog=n_prog):
            out = torch.empty_like(q)
            return pdk.paged_decode_persistent(
                q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, out,
                block_m=16, tile=tile, num_warps=warps, num_stages=stages, k_rows=False,
                sms=sms, seq_order=order, num_programs=n_prog,
            )  # fmt: skip

        try:
            got = fn()
            same = torch.equal(got, base) if tile == unified.tile else None
            err = rel_err(got, base)[0]
            t = graph_time_us(fn)
        except Exception as e:  # out of shared memory, etc.
            print(f"    ctas {ctas} tile {tile} w{warps} s{stages}: {type(e).__name__}")
            continue
        print(f"    persistent {ctas}/SM tile {tile} w{warps} s{stages}: {t:7.1f} us"
              f" ({kv_bytes / t / 1e6:.2f} TB/s, x{t_base / t:.3f}) bit-equal {same}"
              f" rel {err:.1e}")  # fmt: skip
        row["persistent"].append(dict(ctas=ctas, tile=tile, warps=warps, stages=stages,
                                      us=t, bit_equal=same, rel_err=err))  # fmt: skip
    return row


# Small and mid batches late in the run: few sequences, long contexts.
SPLIT_SHAPES = [
    ("b1 ctx1500", [1500]),
    ("b4 spread1000-2000", _spread(4, 1000, 2000, 4)),
    ("b8 spread1000-2000", _spread(8, 1000, 2000, 5)),
    ("b16 spread900-2000", _spread(16, 900, 2000, 6)),
    ("b32 spread800-2000", _spread(32, 800, 2000, 7)),
    ("b48 spread700-2000", _spread(48, 700, 2000, 8)),
    ("b64 spread600-2000", _spread(64, 600, 2000, 2)),
    ("b96 spread500-2000", _spread(96, 500, 2000, 9)),
    ("b115 spread400-2000", _spread(115, 400, 2000, 10)),
    ("b160 spread300-2000", _spread(160, 300, 2000, 11)),
]


def split_persistent_ab(name, q, cache, md, ctxs, order, kv_bytes) -> dict:
    """Small batches: the old choice (unified kernel, split when SMs would idle) against
    the persistent grid with each sequence in `segs` segments, and the new heuristic."""
    from strixlm.kernels import paged_decode as pdk

    sms = pa.num_sms(q.device)
    b, mx = len(ctxs), max(ctxs)
    saved = pdk.PERSISTENT_SPLIT_MIN_ITEMS, pdk.PERSISTENT_MIN_ITEMS
    pdk.PERSISTENT_SPLIT_MIN_ITEMS, pdk.PERSISTENT_MIN_ITEMS = 0, 1.75  # session 5's choice
    old = pa.select_config(HQ, HKV, D, b, 1, mx, sms)
    pdk.PERSISTENT_SPLIT_MIN_ITEMS, pdk.PERSISTENT_MIN_ITEMS = saved
    new = pa.select_config(HQ, HKV, D, b, 1, mx, sms)
    base_fn = attn_call(q, cache, md, False, old, seq_order=order)
    base = base_fn()
    t_old = graph_time_us(base_fn)
    t_new = graph_time_us(attn_call(q, cache, md, False, new, seq_order=order))
    tb_old, tb_new = kv_bytes / t_old / 1e6, kv_bytes / t_new / 1e6
    print(f"{name}: old {old} {t_old:.1f} us ({tb_old:.2f} TB/s);"
          f" new {new} {t_new:.1f} us ({tb_new:.2f} TB/s, x{t_old / t_new:.3f})")  # fmt: skip
    row = {"shape": name, "old": str(old), "old_us": t_old, "new": str(new), "new_us": t_new,
           "persistent": []}  # fmt: skip
    for segs in (1, 2, 4):
        if segs > 1 and mx < segs * 2 * 64:
            continue
        cfg = pa.AttnConfig(16, 64, 2, pdk.PERSISTENT_STAGES, segs, False, True)
        fn = attn_call(q, cache, md, False, cfg, seq_order=order)
        err = rel_err(fn(), base)[0]
        t = graph_time_us(fn)
        print(f"    persistent segs {segs:2d}: {t:7.1f} us ({kv_bytes / t / 1e6:.2f} TB/s,"
              f" x{t_old / t:.3f}) rel {err:.1e}")  # fmt: skip
        row["persistent"].append(dict(segs=segs, us=t, rel_err=err))
    return row


# The run's small-batch tail (docs/benchmarks.md, session 18: attention below ~90 sequences
# read 1.9-3.9 TB/s): a request still decoding at step s has its prompt ([100, 1024]) plus
# ~s - 18 tokens in context. (batch, step) pairs from the profile's per-50-step means.
TAIL_SHAPES = [
    (f"b{b} step{s} ctx prompt+{s - 18}", [c + s - 18 for c in _spread(b, 100, 1024, b)])
    for b, s in ((93, 725), (79, 775), (64, 825), (56, 850), (46, 875), (39, 900),
                 (33, 925), (26, 950), (20, 975), (12, 1000), (6, 1020))
]  # fmt: skip
# (split CTAs per SM, persistent split from this many sequences per program): the
# heuristic's knobs (paged_attention.SPLIT_TARGET_CTAS_PER_SM, paged_decode.
# PERSISTENT_SPLIT_MIN_ITEMS); the first pair is the default.
TAIL_KNOBS = [(2, 0.6), (2.9, 0.6), (3, 0.6), (4, 0.6), (6, 0.6), (4, 0.9), (4, 1.25)]


def tail_knobs(name, q, cache, md, ctxs, order, kv_bytes) -> dict:
    """The heuristic's choice at each TAIL_KNOBS setting (each distinct config timed once)."""
    from strixlm.kernels import paged_decode as pdk

    sms = pa.num_sms(q.device)
    saved = pa.SPLIT_TARGET_CTAS_PER_SM, pdk.PERSISTENT_SPLIT_MIN_ITEMS
    timed: dict[str, float] = {}
    row = {"shape": name, "knobs": []}
    base_out, base_us = None, None
    try:
        for ctas, split_min in TAIL_KNOBS:
            pa.SPLIT_TARGET_CTAS_PER_SM, pdk.PERSISTENT_SPLIT_MIN_ITEMS = ctas, split_min
            # The padded upper bound a captured graph plans with (choose_num_splits).
            cfg = pa.select_config(HQ, HKV, D, len(ctxs), 1, 40960, sms)
            key = str(cfg)
            if key not in timed:
                fn = attn_call(q, cache, md, False, cfg, seq_order=order)
                out = fn()
                base_out = out if base_out is None else base_out
                err = rel_err(out, base_out)[0]
                timed[key] = graph_time_us(fn)
                base_us = timed[key] if base_us is None else base_us
            t = timed[key]
            print(f"  {name}: ctas {ctas} split_min {split_min}: {cfg.num_splits} segs"
                  f" persistent {cfg.persistent}: {t:7.1f} us ({kv_bytes / t / 1e6:.2f} TB/s,"
                  f" x{base_us / t:.3f} vs default) rel {err:.1e}", flush=True)  # fmt: skip
            row["knobs"].append(dict(ctas=ctas, split_min=split_min, config=key, us=t))
    finally:
        pa.SPLIT_TARGET_CTAS_PER_SM, pdk.PERSISTENT_SPLIT_MIN_ITEMS = saved
    # Segment counts no knob setting reaches (fewer than the heuristic picks below 40
    # sequences; the unified kernel where the persistent grid runs), for a per-batch table:
    # select_config's unified decode config (a split count > 1 keeps it off the persistent
    # grid) at each count.
    split = pa.select_config(HQ, HKV, D, len(ctxs), 1, 40960, sms, num_splits=2)
    for segs in (1, 2, 4, 8):
        cfg = dataclasses.replace(split, num_splits=segs)
        if str(cfg) in timed:
            continue
        fn = attn_call(q, cache, md, False, cfg, seq_order=order)
        err = rel_err(fn(), base_out)[0]
        t = timed[str(cfg)] = graph_time_us(fn)
        print(f"  {name}: unified {segs} segs: {t:7.1f} us ({kv_bytes / t / 1e6:.2f} TB/s,"
              f" x{base_us / t:.3f} vs default) rel {err:.1e}", flush=True)  # fmt: skip
        row.setdefault("unified_segs", []).append(dict(segs=segs, us=t))
    return row


# Does a partly filled last KV tile cost a whole tile? Uniform contexts around multiples of
# the 64-token tile, and the same tokens in fewer, longer sequences.
TILE_COST_SHAPES = [
    ("b256 ctx512 (8 full tiles)", [512] * 256),
    ("b256 ctx520 (8 + 8 tokens)", [520] * 256),
    ("b256 ctx544 (8 + 32 tokens)", [544] * 256),
    ("b256 ctx576 (9 full tiles)", [576] * 256),
    ("b128 ctx1024 (16 full tiles)", [1024] * 128),
    ("b128 ctx1032 (16 + 8 tokens)", [1032] * 128),
    ("b264 ctx512 (4 per program)", [512] * 264),
]


def tile_cost(name, q, cache, md, ctxs, order, kv_bytes) -> dict:
    """The heuristic's config (the persistent grid at these sizes), graph-timed."""
    sms = pa.num_sms(q.device)
    cfg = pa.select_config(HQ, HKV, D, len(ctxs), 1, max(ctxs), sms)
    t = graph_time_us(attn_call(q, cache, md, False, cfg, seq_order=order))
    tiles = sum(-(-c // cfg.tile) for c in ctxs)
    print(f"{name}: {t:7.1f} us ({kv_bytes / t / 1e6:.2f} TB/s), {tiles} tiles per head,"
          f" {t * 1e3 / tiles * 66:.1f} ns per tile-slot of a program")  # fmt: skip
    return {"shape": name, "us": t, "tiles_per_head": tiles, "config": str(cfg)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument(
        "--quick", action="store_true", help="the heuristic's config only (grid and order A/B)"
    )
    ap.add_argument(
        "--persistent", action="store_true", help="only the unified vs persistent decode A/B"
    )
    ap.add_argument(
        "--split-persistent",
        action="store_true",
        help="small batches: unified (split) vs the persistent grid with segments",
    )
    ap.add_argument(
        "--tile-cost", action="store_true", help="partly filled last tiles vs full ones"
    )
    ap.add_argument(
        "--tail", action="store_true", help="the run's small-batch tail: split heuristic knobs"
    )
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget_s
    results = []
    shapes = SHAPES
    if args.split_persistent:
        shapes = SPLIT_SHAPES
    elif args.tile_cost:
        shapes = TILE_COST_SHAPES
    elif args.tail:
        shapes = TAIL_SHAPES
    for name, ctxs in shapes:
        if time.monotonic() > deadline:
            print(f"{name}: skipped (time budget spent)")
            continue
        b = len(ctxs)
        rows = [(c - 1, 1) for c in ctxs]
        q, _, _, cache, md = make_batch(rows, DTYPE)
        ref = attn_call(q, cache, md, False, pa.AttnConfig(16, 32, 4, 2, 1, False))()
        kv_bytes = sum(ctxs) * HKV * D * 2 * cache.element_size()
        sms = pa.num_sms(q.device)
        heur = pa.select_config(HQ, HKV, D, b, 1, max(ctxs), sms)
        if args.persistent or args.split_persistent or args.tile_cost or args.tail:
            order = torch.tensor(sorted(range(b), key=lambda i: -ctxs[i]), dtype=torch.int32)
            ab = split_persistent_ab if args.split_persistent else persistent_ab
            ab = tile_cost if args.tile_cost else ab
            ab = tail_knobs if args.tail else ab
            results.append(ab(name, q, cache, md, ctxs, order.to(q.device), kv_bytes))
            del cache
            torch.cuda.empty_cache()
            continue
        # The query-tile search grid (before one program per sequence), same config.
        md_search = dataclasses.replace(md, max_query_len=heur.block_m // (HQ // HKV) + 1)
        t_search = graph_time_us(attn_call(q, cache, md_search, False, heur))
        # The engine's order: longest context first (gather_inputs' seq_order).
        order = torch.tensor(sorted(range(b), key=lambda i: -ctxs[i]), dtype=torch.int32)
        order = order.to(q.device)
        t_ordered = graph_time_us(attn_call(q, cache, md, False, heur, seq_order=order))
        # The same cache stored head-major within each block ([2, blocks, heads, 16, D]
        # physically, the same logical view): one program reads 4 KB runs, not 256 B rows.
        hm = torch.empty_like(cache.transpose(2, 3).contiguous()).transpose(2, 3)
        hm.copy_(cache)
        hm_fn = attn_call(q, hm, md, False, heur, seq_order=order)
        hm_err = rel_err(hm_fn(), ref)[0]
        t_hm = graph_time_us(hm_fn)
        del hm
        # The same batch with its blocks placed as the engine's pool hands them out (each
        # prompt one run, decode blocks interleaved in step order) and one run a sequence.
        t_place = {}
        prompts = prompt_lengths(ctxs)
        for place, ids in (
            ("engine", engine_order(ctxs, prompts, cache.shape[2])),
            ("contiguous", contiguous_order(ctxs, cache.shape[2])),
        ):
            c2, bt2 = relayout(cache, md.block_table, ids)
            md2 = dataclasses.replace(md, block_table=bt2)
            fn2 = attn_call(q, c2, md2, False, heur, seq_order=order)
            t_place[place] = (graph_time_us(fn2), rel_err(fn2(), ref)[0])
            del c2, fn2
            torch.cuda.empty_cache()
        splits = sorted({1, 2, 4, heur.num_splits} | ({8, 16} if b <= 32 else set()))
        cfgs = [
            pa.AttnConfig(16, tile, w, st, sp)
            for tile, w, st, sp in itertools.product((16, 32, 64), (2, 4), (2, 3, 4), splits)
        ]
        if args.quick:
            cfgs = []
        times = []
        for cfg in cfgs:
            if time.monotonic() > deadline:
                break
            try:
                fn = attn_call(q, cache, md, False, cfg)
                err = rel_err(fn(), ref)[0]
                if err > 1e-2:
                    print(f"  {name} {cfg}: WRONG rel err {err:.3g}")
                    continue
                times.append((graph_time_us(fn), cfg))
            except Exception as e:  # out of shared memory, etc.
                print(f"  {name} {cfg}: {type(e).__name__}: {str(e)[:100]}")
        times.sort(key=lambda x: x[0])
        t_heur = graph_time_us(attn_call(q, cache, md, False, heur))
        print(f"{name}: heuristic {heur} {t_heur:.1f} us ({kv_bytes / t_heur / 1e6:.2f} TB/s)")
        print(f"    same config, query-tile search grid: {t_search:.1f} us")
        print(f"    same config, longest contexts first: {t_ordered:.1f} us")
        print(f"    same, head-major blocks: {t_hm:.1f} us ({kv_bytes / t_hm / 1e6:.2f} TB/s,"
              f" rel err {hm_err:.1e})")  # fmt: skip
        for place, (t, err) in t_place.items():
            print(f"    same, blocks placed {place}: {t:.1f} us ({kv_bytes / t / 1e6:.2f} TB/s,"
                  f" rel err {err:.1e})")  # fmt: skip
        for t, c in times[:5]:
            print(f"    {t:8.1f} us {kv_bytes / t / 1e6:5.2f} TB/s  {c}")
        results.append(
            {
                "shape": name,
                "heuristic": str(heur),
                "t_heuristic_us": t_heur,
                "t_search_grid_us": t_search,
                "t_longest_first_us": t_ordered,
                "t_head_major_us": t_hm,
                "t_placed_us": {k: v[0] for k, v in t_place.items()},
                "kv_bytes": kv_bytes,
                "best": [(t, str(c)) for t, c in times[:8]],
            }
        )
        del cache
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
