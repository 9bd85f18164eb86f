"""Probe: decode attention over an fp8 cache with explicit register layouts
(fp8_mma_decode.py, Gluon) against the engine's decode path over fp8 and over bf16.

    python benchmarks/gpu/probe_fp8_mma.py [--tiles 16,32] [--json PATH]

At each shape (the workload's mid-run decode batches, contexts spread like its own, and a
few smaller ones) the probe checks the Gluon kernel against the fp32 reference over the
dequantized cache, then times, as CUDA-graph replays of 28 launches (a step's layers):
- the engine's decode attention over a bf16 cache and over an fp8 cache holding the same
  values (its heuristic config: the persistent grid, its fp8 grid and splits);
- the Gluon kernel at each tile size (one warp a sequence and kv head, no split).
The read rate is the fp8 cache bytes a launch must read over its time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from bench_fp8_decode import decode_shape  # noqa: E402
from check_attention import (  # noqa: E402
    DTYPE,
    REL_TOL,
    SCALE,
    attn_call,
    batch_reference,
    cache_scale,
    make_batch,
    rel_err,
)
from fp8_mma_decode import fp8_mma_decode  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402
from sweep_decode_attn import SHAPES, SPLIT_SHAPES  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402

PROBE_SHAPES = [s for s in SHAPES if s[0] != "b256 ctx520"] + [
    ("b256 ctx2048", [2048] * 256),
] + [s for s in SPLIT_SHAPES if s[0] in ("b48 spread700-2000", "b96 spread500-2000")]  # fmt: skip


def probe_shape(name: str, ctxs: list[int], tiles: list[int]) -> dict:
    rows, order, _, heur, fp8_bytes = decode_shape(ctxs)
    res: dict = {"shape": name, "engine_fp8_config": str(heur), "fp8_bytes": fp8_bytes}
    q, _, _, cache16, md = make_batch(rows, DTYPE)
    bf16_call = attn_call(q, cache16, md, False, seq_order=order)
    res["engine_bf16_us"] = graph_time_us(bf16_call, calls=28)
    del cache16
    q, _, _, cache8, md = make_batch(rows, kvw.FP8_DTYPE)
    res["engine_fp8_us"] = graph_time_us(attn_call(q, cache8, md, True, seq_order=order), calls=28)
    ref = batch_reference(q, cache8, md)
    s = cache_scale(cache8)
    t8 = res["engine_fp8_us"]
    line = (f"{name}: engine bf16 {res['engine_bf16_us']:7.1f} us, engine fp8 {t8:7.1f}"
            f" ({fp8_bytes / t8 / 1e6:.2f} TB/s)")  # fmt: skip
    out = torch.empty_like(q)
    for tile in tiles:

        def fn(tile=tile, cache=cache8):
            return fp8_mma_decode(q, cache, md.seq_lens, md.block_table, SCALE, s, s, tile, out)

        err = rel_err(fn(), ref)[0]
        t = graph_time_us(fn, calls=28)
        ok = err < REL_TOL
        res[f"mma{tile}"] = dict(us=t, rel_err=err, ok=ok, tb_s=fp8_bytes / t / 1e6)
        line += (f"\n  gluon mma tile {tile}: {t:7.1f} us ({fp8_bytes / t / 1e6:.2f} TB/s),"
                 f" x{t8 / t:.3f} vs engine fp8, x{res['engine_bf16_us'] / t:.3f}"
                 f" vs bf16; rel err {err:.1e}{'' if ok else ' FAIL'}")  # fmt: skip
    print(line, flush=True)
    del cache8, fn
    torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", default="16,32")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tiles = [int(t) for t in args.tiles.split(",")]
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
    results = [probe_shape(name, ctxs, tiles) for name, ctxs in PROBE_SHAPES]
    bad = [(r["shape"], k) for r in results for k, x in r.items()
           if isinstance(x, dict) and not x["ok"]]  # fmt: skip
    print("ALL OK" if not bad else f"FAILED: {bad}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
