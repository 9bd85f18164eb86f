"""Probe: fp8 decode attention with explicit register layouts (the Gluon kernel of
strixlm/kernels/paged_decode_fp8.py) against the Triton decode paths, over fp8 and bf16.

    python benchmarks/gpu/probe_fp8_mma.py [--segs 1,2,4,8,16] [--bf16] [--json PATH]

At each shape (the workload's mid-run decode batches, contexts spread like its own, and
smaller ones) the probe checks the Gluon kernel against the fp32 reference over the
dequantized cache, then times, as CUDA-graph replays of 28 launches (a step's layers):
- the Triton decode attention over a bf16 cache and over an fp8 cache holding the same
  values (the heuristic config: the persistent grid, its fp8 grid and splits);
- the Gluon kernel, longest sequences first, at each segment count and at the count
  num_segments picks (the engine's path).
The read rate is the fp8 cache bytes a launch must read over its time. --bf16 runs the
same kernel over a bf16 cache (16-token tiles) against the Triton bf16 path instead.
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
from graph_timing import graph_time_us  # noqa: E402
from sweep_decode_attn import SHAPES, SPLIT_SHAPES  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_decode_fp8 as pdf8  # noqa: E402

SMALL = ("b64 spread600-2000", "b115 spread400-2000")  # b64 is in SHAPES
PROBE_SHAPES = (
    [s for s in SHAPES if s[0] != "b256 ctx520"]
    + [
        ("b256 ctx2048", [2048] * 256),
    ]
    + [s for s in SPLIT_SHAPES if s[0] not in SMALL]
)


def sweep_segments(q, cache, md, order, segs_list, base_us: float, nbytes: int, res: dict,
                   picked: int = 0) -> str:  # fmt: skip
    """The Gluon kernel at each segment count (longest first), checked against the fp32
    reference over the (dequantized) cache, then timed; its lines for the report."""
    fp8 = cache.dtype == kvw.FP8_DTYPE
    s = cache_scale(cache)
    ref = batch_reference(q, cache, md)
    out = torch.empty_like(q)
    lines = ""
    for segs in segs_list:

        def fn(segs=segs):
            return pdf8.paged_decode_fp8(
                q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, out,
                max_seq_len=md.max_seq_len, k_scale=s, v_scale=s, seq_order=order,
                num_segs=segs, tile=pdf8.TILE if fp8 else 16,
            )  # fmt: skip

        err = rel_err(fn(), ref)[0]
        t = graph_time_us(fn, calls=28)
        ok = err < REL_TOL
        res[f"gluon_segs{segs}"] = dict(us=t, rel_err=err, ok=ok, tb_s=nbytes / t / 1e6)
        lines += (f"\n  gluon, {segs} segment(s){' (picked)' if segs == picked else ''}:"
                  f" {t:7.1f} us ({nbytes / t / 1e6:.2f} TB/s), x{base_us / t:.3f} vs triton;"
                  f" rel err {err:.1e}{'' if ok else ' FAIL'}")  # fmt: skip
    return lines


def probe_shape(name: str, ctxs: list[int], segs_list: list[int]) -> dict:
    rows, order, _, heur, fp8_bytes = decode_shape(ctxs)
    res: dict = {"shape": name, "triton_fp8_config": str(heur), "fp8_bytes": fp8_bytes}
    q, _, _, cache16, md = make_batch(rows, DTYPE)
    bf16_call = attn_call(q, cache16, md, False, seq_order=order)
    res["triton_bf16_us"] = graph_time_us(bf16_call, calls=28)
    del cache16, bf16_call
    q, _, _, cache8, md = make_batch(rows, kvw.FP8_DTYPE)
    pdf8.ENABLED = False  # the Triton kernels' fp8 path
    res["triton_fp8_us"] = t8 = graph_time_us(attn_call(q, cache8, md, True, seq_order=order), 28)
    pdf8.ENABLED = True
    picked = pdf8.num_segments(len(ctxs), cache8.shape[3], md.max_seq_len)
    line = (f"{name}: triton bf16 {res['triton_bf16_us']:7.1f} us, triton fp8 {t8:7.1f}"
            f" ({fp8_bytes / t8 / 1e6:.2f} TB/s); num_segments picks {picked}")  # fmt: skip
    segs = sorted(set(segs_list) | {picked})
    line += sweep_segments(q, cache8, md, order, segs, t8, fp8_bytes, res, picked)
    # The engine's own dispatch (paged_attention over fp8 decode) takes this kernel.
    err = rel_err(
        attn_call(q, cache8, md, True, seq_order=order)(), batch_reference(q, cache8, md)
    )[0]
    res["engine_dispatch"] = dict(rel_err=err, ok=err < REL_TOL)
    print(line, flush=True)
    del cache8
    torch.cuda.empty_cache()
    return res


def probe_bf16(name: str, ctxs: list[int], segs_list: list[int]) -> dict:
    """--bf16: the same kernel over a bf16 cache (16-token tiles, no conversion) against
    the Triton decode path over the same cache: does the register-layout kernel also beat
    Triton where nothing needs converting?"""
    rows, order, _, _, fp8_bytes = decode_shape(ctxs, fp8=False)
    q, _, _, cache, md = make_batch(rows, DTYPE)
    res: dict = {"shape": name, "bf16_bytes": 2 * fp8_bytes}
    res["triton_bf16_us"] = tb = graph_time_us(attn_call(q, cache, md, False, seq_order=order), 28)
    line = f"{name}: triton bf16 {tb:7.1f} us ({2 * fp8_bytes / tb / 1e6:.2f} TB/s)"
    line += sweep_segments(q, cache, md, order, segs_list, tb, 2 * fp8_bytes, res)
    print(line, flush=True)
    del cache
    torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segs", default="1,2,4,8,16")
    ap.add_argument("--bf16", action="store_true", help="the kernel over a bf16 cache")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    segs = [int(t) for t in args.segs.split(",")]
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
    probe = probe_bf16 if args.bf16 else probe_shape
    results = [probe(name, ctxs, segs) for name, ctxs in PROBE_SHAPES]
    bad = [(r["shape"], k) for r in results for k, x in r.items()
           if isinstance(x, dict) and not x["ok"]]  # fmt: skip
    print("ALL OK" if not bad else f"FAILED: {bad}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
