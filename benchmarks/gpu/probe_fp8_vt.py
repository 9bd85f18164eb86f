"""Probe: would an fp8 cache whose V blocks are stored transposed ([head, dim, token]) let
decode attention stream? One program per (sequence, kv head), the engine's tile loop
(block ids a tile ahead, K / V multi-buffered by the pipeliner), three caches:

- bf16, V rows [token, dim]: the engine's layout and dtype;
- fp8, V rows: the engine's fp8 layout (Triton upcasts V for the P @ V dot a byte at a
  time: its reduction runs over tokens, which are 1 KB apart);
- fp8, V transposed: each V tile's tokens are contiguous for every dim (16 a block), so
  both dots reduce over contiguous bytes, the case Triton upcasts through ldmatrix.

python benchmarks/gpu/probe_fp8_vt.py [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from bench_fp8_decode import MID_SHAPES, decode_shape, report  # noqa: E402
from check_attention import (  # noqa: E402
    DTYPE,
    HKV,
    HQ,
    REL_TOL,
    SCALE,
    D,
    batch_reference,
    cache_scale,
    make_batch,
    rel_err,
)
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels.paged_attention import LOG2E  # noqa: E402


@triton.jit
def vt_decode_kernel(out_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, qk_scale, out_scale,
                     stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_ks,
                     stride_kh, stride_vb, stride_vs, stride_vh, stride_vd, stride_bt,
                     G: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                     TILE: tl.constexpr, BLOCK_M: tl.constexpr):  # fmt: skip
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    tok = seq.to(tl.int64)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, TILE)
    row_ok = offs_m < G
    q = tl.load(q_ptr + tok * stride_qt + (kvh * G + offs_m)[:, None] * stride_qh
                + offs_d[None, :], mask=row_ok[:, None], other=0.0)  # fmt: skip
    if k_ptr.dtype.element_ty == tl.float8e4nv:
        q = q.to(tl.float16)  # fp8 -> fp16 is one packed convert per two values
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    blk_next = tl.load(bt_row + offs_t // BLOCK_SIZE, mask=offs_t < seq_len, other=0)
    for j in range(0, tl.cdiv(seq_len, TILE)):
        pos = j * TILE + offs_t
        blk = blk_next.to(tl.int64)
        nxt = pos + TILE
        blk_next = tl.load(bt_row + nxt // BLOCK_SIZE, mask=nxt < seq_len, other=0)
        ok = pos < seq_len
        slot = pos % BLOCK_SIZE
        k_rows = blk * stride_kb + slot * stride_ks + kvh * stride_kh
        k = tl.load(k_ptr + k_rows[None, :] + offs_d[:, None], mask=ok[None, :], other=0.0)
        v_base = blk * stride_vb + slot * stride_vs + kvh * stride_vh
        v = tl.load(v_ptr + v_base[:, None] + offs_d[None, :] * stride_vd, mask=ok[:, None],
                    other=0.0)  # fmt: skip
        s = tl.dot(q, k.to(q.dtype)) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(q.dtype), v.to(q.dtype), acc * alpha[:, None])
        m_i = m_new
    res = acc * (out_scale / l_i)[:, None]
    tl.store(out_ptr + tok * stride_ot + (kvh * G + offs_m)[:, None] * stride_oh
             + offs_d[None, :], res.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])  # fmt: skip


def vt_decode(q, k_cache, v_cache, md, scale_kv: float, tile: int, warps: int, stages: int):
    """k_cache [blocks, BS, HKV, D]; v_cache any strided view of [blocks, BS, HKV, D]."""
    out = torch.empty_like(q)
    b = md.seq_lens.shape[0]
    vt_decode_kernel[(b, HKV)](
        out, q, k_cache, v_cache, md.block_table, md.seq_lens, SCALE * scale_kv * LOG2E,
        scale_kv, q.stride(0), q.stride(1), out.stride(0), out.stride(1), *k_cache.stride()[:3],
        *v_cache.stride(), md.block_table.stride(0), G=HQ // HKV, D=D,
        BLOCK_SIZE=k_cache.shape[1], TILE=tile, BLOCK_M=16, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def transposed_v(v_cache: torch.Tensor) -> torch.Tensor:
    """The same V values stored [blocks, HKV, D, BS], viewed as [blocks, BS, HKV, D]."""
    return v_cache.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results, bad = [], []
    for name, ctxs in MID_SHAPES:
        rows, _, _, _, fp8_bytes = decode_shape(ctxs)
        row = {"shape": name}
        line = name + ":"
        for label, dt, vt in (("bf16 rows", DTYPE, False), ("fp8 rows", kvw.FP8_DTYPE, False),
                              ("fp8 vt", kvw.FP8_DTYPE, True)):  # fmt: skip
            q, _, _, cache, md = make_batch(rows, dt)
            s = cache_scale(cache)
            ref = batch_reference(q, cache, md)
            v = transposed_v(cache[1]) if vt else cache[1]
            nbytes = fp8_bytes * (2 if dt == DTYPE else 1)
            for tile, warps, stages in ((32, 2, 3), (64, 2, 3), (32, 4, 3), (64, 4, 3)):
                fn = functools.partial(vt_decode, q, cache[0], v, md, s, tile, warps, stages)
                try:
                    err = rel_err(fn(), ref)[0]
                    t = graph_time_us(fn)
                except Exception as e:  # out of resources
                    line += f"\n  {label} t{tile} w{warps}: {type(e).__name__}"
                    continue
                bad += [] if err < REL_TOL else [(name, label, tile, warps)]
                row[f"{label} t{tile} w{warps}"] = dict(us=t, rel_err=err)
                line += (f"\n  {label:>9} t{tile} w{warps} s{stages}: {t:7.1f} us"
                         f" ({nbytes / t / 1e6:.2f} TB/s) rel err {err:.1e}")  # fmt: skip
            del cache, v
            torch.cuda.empty_cache()
        print(line, flush=True)
        results.append(row)
    return report(results, bad, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
