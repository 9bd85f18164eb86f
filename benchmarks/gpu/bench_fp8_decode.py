"""Decode attention over an fp8 KV cache against the same batch over a bf16 cache.

python benchmarks/gpu/bench_fp8_decode.py [--json PATH]
    [--variants a,b,... | --occupancy | --grids | --split-mixed | --fresh]

An fp8 cache holds half the bytes of a bf16 one, so memory-bound decode attention over it
should take about half the time. This times the engine's decode attention (the heuristic's
config, the persistent grid, longest-first order) at the standard workload's mid-run shapes
over both caches, then fp8 variants (with and without the byte-pair loads, other tiles /
warps / stages),
each checked against the fp32 reference over the dequantized cache first and timed as a
CUDA-graph replay. Bandwidth is the cache bytes a launch must read over its time.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from check_attention import (  # noqa: E402
    ADMISSION_ROWS,
    BS,
    DTYPE,
    HKV,
    HQ,
    MIXED_ROWS,
    REL_TOL,
    SCALE,
    D,
    attn_call,
    batch_reference,
    cache_scale,
    make_batch,
    rel_err,
)
from graph_timing import graph_time_us  # noqa: E402
from sweep_decode_attn import SHAPES, SPLIT_SHAPES, _spread  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402
from strixlm.kernels import paged_decode_fp8 as pdf8  # noqa: E402

# (name, byte pairs, tile, warps, stages); None keeps the heuristic's value. "default"
# is the engine's own choice; "nopairs" reads the fp8 tiles through Triton's conversion.
VARIANTS = {
    "nopairs": (False, None, None, None),
    "pairs": (True, None, None, None),
    "t64": (False, 64, None, None),
    "t64_w4": (False, 64, 4, None),
    "pairs_s4": (True, None, None, 4),
}
# The workload's mid-run decode batches (the probes time these too).
MID_SHAPES = [s for s in SHAPES if s[0] != "b256 ctx520"]
BENCH_SHAPES = MID_SHAPES + [
    s for s in SPLIT_SHAPES if s[0] in ("b16 spread900-2000", "b48 spread700-2000")
]


def decode_shape(ctxs: list[int], fp8: bool = True):
    """(rows, longest-first order, SMs, the heuristic's config over an fp8 cache, or a
    bf16 one, fp8 bytes a launch reads) for a decode batch with these contexts."""
    b = len(ctxs)
    order = torch.tensor(sorted(range(b), key=lambda i: -ctxs[i]), dtype=torch.int32).cuda()
    sms = pa.num_sms(torch.device("cuda"))
    heur = pa.select_config(HQ, HKV, D, b, 1, max(ctxs), sms, fp8=fp8)
    return [(c - 1, 1) for c in ctxs], order, sms, heur, sum(ctxs) * HKV * D * 2


def run_shape(name: str, ctxs: list[int], variants: list[str]) -> dict:
    rows, order, _, heur, tokens = decode_shape(ctxs)
    res: dict = {"shape": name, "config": str(heur)}
    q, _, _, cache16, md = make_batch(rows, DTYPE)
    t16 = graph_time_us(attn_call(q, cache16, md, False, seq_order=order))
    del cache16
    q8, _, _, cache8, md8 = make_batch(rows, kvw.FP8_DTYPE)
    ref = batch_reference(q8, cache8, md8)
    res["bf16_us"] = t16
    line = f"{name}: bf16 {t16:7.1f} us ({tokens * 2 / t16 / 1e6:.2f} TB/s)"
    default_pairs = pa.FP8_PAIRS_ENABLED
    for vname in ["default", *variants]:
        pairs, tile, warps, stages = VARIANTS.get(vname, (default_pairs, None, None, None))
        cfg = None
        if tile or warps or stages:
            cfg = dataclasses.replace(
                heur,
                tile=tile or heur.tile,
                num_warps=warps or heur.num_warps,
                num_stages=stages or heur.num_stages,
            )
        pa.FP8_PAIRS_ENABLED = pairs
        fn = attn_call(q8, cache8, md8, True, cfg, seq_order=order)
        try:
            err = rel_err(fn()[: md8.num_tokens], ref)[0]
            t8 = graph_time_us(fn)
        except Exception as e:  # out of shared memory or registers, etc.
            print(f"  {vname}: {type(e).__name__}: {str(e)[:120]}")
            continue
        finally:
            pa.FP8_PAIRS_ENABLED = default_pairs
        ok = err < REL_TOL
        res[vname] = dict(us=t8, rel_err=err, ok=ok, x_bf16=t16 / t8)
        line += (
            f"\n  fp8 {vname:>13}: {t8:7.1f} us ({tokens / t8 / 1e6:.2f} TB/s of fp8,"
            f" x{t16 / t8:.3f} vs bf16) rel err {err:.1e} {'ok' if ok else 'FAIL'}"
        )
    print(line, flush=True)
    del cache8
    torch.cuda.empty_cache()
    return res


# (programs per SM, register cap (0: none), stages) for --occupancy. At 4 two-warp programs
# an SM (register limited) the fp8 kernel was latency bound, with ~0.5 eligible warps per
# scheduler (ncu_fp8_decode.py); fp8 caches now default to 6 with a cap of 168.
OCCUPANCY = [(4, 0, 3), (5, 192, 3), (6, 168, 3), (6, 160, 2), (8, 128, 2), (6, 128, 3)]


def persistent_call(q, cache, md, heur, sms, s, order, n_prog, maxnreg, stages):
    """The engine's persistent decode kernel at a given grid, register cap and stages."""
    return pdk.paged_decode_persistent(
        q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, torch.empty_like(q),
        block_m=heur.block_m, tile=heur.tile, num_warps=heur.num_warps, num_stages=stages,
        k_rows=heur.k_rows, sms=sms, k_scale=s, v_scale=s, seq_order=order,
        num_programs=n_prog, maxnreg=maxnreg,
    )  # fmt: skip


def occupancy_sweep(name: str, ctxs: list[int]) -> dict:
    """The persistent grid at more programs an SM, with registers capped so that they fit,
    over a bf16 and an fp8 cache (the engine's tile and warps, longest-first order)."""
    rows, order, sms, heur, fp8_bytes = decode_shape(ctxs)
    res: dict = {"shape": name, "config": str(heur)}
    line = f"{name} ({heur.tile}-token tiles, {heur.num_warps} warps):"
    for label, dt in (("bf16", DTYPE), ("fp8", kvw.FP8_DTYPE)):
        q, _, _, cache, md = make_batch(rows, dt)
        s = cache_scale(cache)
        ref = batch_reference(q, cache, md)
        nbytes = fp8_bytes * cache.element_size()
        for ctas, maxnreg, stages in OCCUPANCY:
            n_prog = pdk.persistent_programs(len(ctxs), HKV, sms, ctas)
            fn = functools.partial(
                persistent_call, q, cache, md, heur, sms, s, order, n_prog, maxnreg, stages
            )
            try:
                err = rel_err(fn()[: md.num_tokens], ref)[0]
                t = graph_time_us(fn)
            except Exception as e:  # out of resources
                line += f"\n  {label} {ctas}/SM regs {maxnreg} s{stages}: {type(e).__name__}"
                continue
            ok = err < REL_TOL
            res[f"{label} {ctas}/SM regs {maxnreg} s{stages}"] = dict(us=t, rel_err=err, ok=ok)
            flag = "" if ok else " FAIL"
            line += (f"\n  {label:>4} {ctas}/SM regs {str(maxnreg):>4} s{stages}: {t:7.1f} us"
                     f" ({nbytes / t / 1e6:.2f} TB/s) rel err {err:.1e}{flag}")  # fmt: skip
        del cache
        torch.cuda.empty_cache()
    print(line, flush=True)
    return res


# --grids: the engine's decode path over an fp8 cache, split as over a bf16 cache (and in two
# where that is unsplit), at each (programs per SM, register cap) fp8 grid, from the
# two-segment split range (batch 40-82 with 8 kv heads on 132 SMs) into the unsplit one;
# then the engine's own choice. Session 37: the six-program grid cost b48's split launch
# 74.2 -> 82.3 us.
FP8_GRIDS = [(6, 168), (5, 168), (4, 168), (4, 0)]
GRID_SHAPES = [(f"b{b} spread{lo}-2000", _spread(b, lo, 2000, 20 + b)) for b, lo in
               ((40, 800), (48, 700), (56, 700), (64, 600), (72, 600), (80, 500),
                (96, 500), (128, 300), (160, 300), (192, 200))]  # fmt: skip


def grid_sweep(name: str, ctxs: list[int]) -> dict:
    """The engine's decode attention over an fp8 cache at each fp8 grid of FP8_GRIDS,
    against the same batch over a bf16 cache."""
    rows, order, sms, heur, fp8_bytes = decode_shape(ctxs, fp8=False)
    segs = heur.num_splits if heur.persistent else 0  # as over a bf16 cache
    res: dict = {"shape": name, "config": str(heur), "segments": segs}
    q, _, _, cache16, md = make_batch(rows, DTYPE)
    t16 = graph_time_us(attn_call(q, cache16, md, False, seq_order=order))
    del cache16
    res["bf16_us"] = t16
    line = f"{name} ({segs} segments; 0: unified): bf16 {t16:7.1f} us"
    q8, _, _, cache8, md8 = make_batch(rows, kvw.FP8_DTYPE)
    ref = batch_reference(q8, cache8, md8)
    saved = pdk.FP8_CTAS_PER_SM, pdk.FP8_MAXNREG, pdk.FP8_GRID_MIN_ITEMS
    # Unsplit batches also run split in two (the persistent grid, forced): more items a
    # program, at the cost of the merge launch.
    runs = [(c, r, segs) for c, r in FP8_GRIDS]
    if segs == 1:
        runs += [(c, r, 2) for c, r in FP8_GRIDS if (c, r) in ((6, 168), (4, 0))]
    runs.append((None, None, None))  # the engine's own choice over fp8
    for ctas, maxnreg, force_segs in runs:  # each grid forced, whatever the items a program
        cfg, label = None, "fp8 engine default"
        if ctas is not None:
            pdk.FP8_CTAS_PER_SM, pdk.FP8_MAXNREG, pdk.FP8_GRID_MIN_ITEMS = ctas, maxnreg, 0.0
            cfg = dataclasses.replace(heur, num_splits=force_segs) if force_segs else heur
            label = f"fp8 {ctas}/SM regs {maxnreg}" + (" 2 segs" if force_segs == 2 else "")
        fn = attn_call(q8, cache8, md8, True, cfg, seq_order=order)
        try:
            err = rel_err(fn()[: md8.num_tokens], ref)[0]
            t8 = graph_time_us(fn)
        except Exception as e:  # out of resources
            line += f"\n  {label}: {type(e).__name__}"
            continue
        finally:
            pdk.FP8_CTAS_PER_SM, pdk.FP8_MAXNREG, pdk.FP8_GRID_MIN_ITEMS = saved
        ok = err < REL_TOL
        res[label] = dict(us=t8, rel_err=err, ok=ok, x_bf16=t16 / t8)
        line += (f"\n  {label:>26}: {t8:7.1f} us (x{t16 / t8:.3f} vs bf16)"
                 f" rel err {err:.1e}{'' if ok else ' FAIL'}")  # fmt: skip
    print(line, flush=True)
    del cache8
    torch.cuda.empty_cache()
    return res


# --split-mixed: a mixed step (prompts or a chunk beside decodes) as the engine runs it, one
# unified launch, against two launches: the decodes on the decode path (the persistent grid,
# fp8_grid's programs) and the prompts on the unified kernel. Over fp8 the unified kernel's
# decode rows run 64-row blocks over 4 warps (session 38: a chunk + 63 decodes 252 us over
# fp8 against 193 over bf16); a probe of what routing them to the decode path would win.
MIXED_SHAPES = [
    ("a 512-token chunk at ctx 1024 + 63 decodes at 100-4000", MIXED_ROWS),
    ("13 x 600-token prompts + 64 decodes at 700", ADMISSION_ROWS),
    ("15 x 512-token prompts + 256 decodes at 512-640",
     [(0, 512)] * 15 + [(c, 1) for c in _spread(256, 512, 640, 40)]),
]  # fmt: skip


def split_mixed(name: str, rows: list[tuple[int, int]], caches=(DTYPE, kvw.FP8_DTYPE)) -> dict:
    """One mixed step's attention as one launch and as decodes + prompts in two, over bf16
    and fp8 caches (28 of each a graph, as in a step); outputs checked against the
    reference over each batch."""
    res: dict = {"shape": name}
    subsets = ([r for r in rows if r[1] == 1], [r for r in rows if r[1] > 1])
    rows = subsets[0] + subsets[1]  # decodes first, as the scheduler orders a step
    line = f"{name}:"
    for dt in caches:
        fp8 = dt == kvw.FP8_DTYPE
        label = "fp8" if fp8 else "bf16"
        calls, err = [], 0.0
        for sub in (rows, *subsets):
            q, _, _, cache, md = make_batch(sub, dt)
            fn = attn_call(q, cache, md, fp8)
            err = max(err, rel_err(fn()[: md.num_tokens], batch_reference(q, cache, md))[0])
            calls.append(fn)
        whole, decodes, prompts = calls
        one = graph_time_us(whole, calls=28)
        two = graph_time_us(lambda d=decodes, p=prompts: (d(), p()), calls=28)
        dec_only = graph_time_us(decodes, calls=28)
        ok = err < REL_TOL
        res[label] = dict(one_us=one, two_us=two, decodes_us=dec_only, rel_err=err, ok=ok)
        line += (f"\n  {label:>4}: one launch {one:7.1f} us, decodes + prompts {two:7.1f}"
                 f" (decodes alone {dec_only:6.1f}), x{one / two:.3f}; rel err {err:.1e}"
                 f"{'' if ok else ' FAIL'}")  # fmt: skip
        if fp8 and pdf8.supports(q, cache, BS, len(rows)):  # the last subset's q, cache
            line += in_graph_split(rows, dt, one, res[label])
        calls = whole = decodes = prompts = None
        torch.cuda.empty_cache()
    print(line, flush=True)
    return res


def in_graph_split(rows: list[tuple[int, int]], dt: torch.dtype, one: float, res: dict) -> str:
    """The whole step through paged_attention with the mixed-step split on
    (STRIXLM_ATTN_FP8_MIXED_SPLIT): the decodes on the Gluon kernel, the rest on the unified
    kernel skipping them, both over the whole batch as a mixed-step graph runs them."""
    pdf8.MIXED_SPLIT = True
    try:
        q, _, _, cache, md = make_batch(rows, dt)
        fn = attn_call(q, cache, md, True)
        err = rel_err(fn()[: md.num_tokens], batch_reference(q, cache, md))[0]
        t = graph_time_us(fn, calls=28)
    finally:
        pdf8.MIXED_SPLIT = False
    ok = err < REL_TOL
    res.update(split_us=t, split_rel_err=err, ok=res["ok"] and ok)
    return (f"\n        split on the device (both over the whole batch): {t:7.1f} us,"
            f" x{one / t:.3f} vs one launch; rel err {err:.1e}{'' if ok else ' FAIL'}")  # fmt: skip


# --fresh: steps with prompts or chunks (the unified kernel) over an fp8 cache, with the
# step's own K / V read from their rows (fresh_rows) or back from the cache, and over bf16.
FRESH_SHAPES = [
    ("chunk 512 @ ctx 1536", [(1536, 512)]),
    ("4 prompts x 512", [(0, 512)] * 4),
    ("a 512-token chunk + 63 decodes", [(1024, 512)] + [(int(c), 1) for c in
                                                        torch.linspace(100, 4000, 63).tolist()]),
    ("13 x 600-token prompts + 64 decodes", [(0, 600)] * 13 + [(700, 1)] * 64),
]  # fmt: skip


def fresh_ab(name: str, rows: list[tuple[int, int]]) -> dict:
    """One step's attention (28 launches a graph, as in a step) three ways."""
    res: dict = {"shape": name}
    q, k, v, cache16, md = make_batch(rows, DTYPE)
    res["bf16_us"] = graph_time_us(attn_call(q, cache16, md, False), calls=28)
    del cache16
    q, k, v, cache8, md = make_batch(rows, kvw.FP8_DTYPE)
    res["fp8_cache_us"] = graph_time_us(attn_call(q, cache8, md, True), calls=28)
    res["fp8_fresh_us"] = graph_time_us(attn_call(q, cache8, md, True, k=k, v=v), calls=28)
    print(f"{name}: bf16 {res['bf16_us']:7.1f} us, fp8 read back {res['fp8_cache_us']:7.1f},"
          f" fp8 own rows {res['fp8_fresh_us']:7.1f}", flush=True)  # fmt: skip
    del cache8
    torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated fp8 variants")
    ap.add_argument("--occupancy", action="store_true", help="programs an SM x register caps")
    ap.add_argument("--grids", action="store_true", help="fp8 grids over split / unsplit batches")
    ap.add_argument("--split-mixed", action="store_true", help="mixed steps: one launch vs two")
    ap.add_argument("--fresh", action="store_true", help="prompt steps: own rows vs the cache")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
    if args.split_mixed:
        results = [split_mixed(name, rows) for name, rows in MIXED_SHAPES]
    elif args.fresh:
        results = [fresh_ab(name, rows) for name, rows in FRESH_SHAPES]
    elif args.grids:
        results = [grid_sweep(name, ctxs) for name, ctxs in GRID_SHAPES]
    elif args.occupancy:
        results = [occupancy_sweep(name, ctxs) for name, ctxs in BENCH_SHAPES[:4]]
    else:
        results = [run_shape(name, ctxs, variants) for name, ctxs in BENCH_SHAPES]
    bad = [(r["shape"], v) for r in results for v, x in r.items() if isinstance(x, dict)
           and not x["ok"]]  # fmt: skip
    return report(results, bad, args.json)


def report(results: list[dict], bad: list, json_path: str | None) -> int:
    """The verdict line, the JSON file if asked for, and the exit status (1: a check failed)."""
    print("ALL OK" if not bad else f"FAILED: {bad}")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
