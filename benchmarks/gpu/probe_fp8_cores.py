"""Probe: decode attention over an fp8 KV cache on the CUDA cores, one program per
(sequence, kv head), against the engine's kernels over fp8 and bf16 caches.

python benchmarks/gpu/probe_fp8_cores.py [--json PATH]

The engine's fp8 decode feeds K / V to fp16 tensor-core MMAs, and Triton moves each fp8
tile into the MMA operand layout a byte at a time: it reads 1.7-2.4 TB/s of fp8 where the
bf16 kernels read 4.0-4.3 (bench_fp8_decode.py). Here each thread holds 16 contiguous head
dims (one 16-byte load) of a few tokens of each tile: the scores are a sum over D (three
shuffles), and every token slot of the tile keeps its own online softmax, merged once at
the sequence's end, so no tile needs a layout change or a barrier. G = 2 q heads per kv
head (Qwen3-0.6B), written out per head. PREFETCH loads tile j + 1's K / V while tile j
is computed (the block ids two tiles ahead).
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
    FP8_SCALE,
    HKV,
    HQ,
    REL_TOL,
    SCALE,
    D,
    attn_call,
    batch_reference,
    make_batch,
    rel_err,
)
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels.paged_attention import LOG2E  # noqa: E402


@triton.jit
def _one_head(acc, m, l_sum, q, k, v, ok, qk_scale):
    # One q head's online-softmax step, per token slot of the tile.
    s = tl.sum(q[None, :] * k, axis=1) * qk_scale
    s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m, s)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe)
    alpha = tl.exp2(m - m_safe)
    return acc * alpha[:, None] + p[:, None] * v, m_new, l_sum * alpha + p


@triton.jit
def _finish(acc, m, l_sum, out_ptr, out_off, out_scale, offs_d):
    m_all = tl.max(m, axis=0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    w = tl.exp2(m - m_safe)
    l_all = tl.sum(l_sum * w, axis=0)
    o = tl.sum(acc * w[:, None], axis=0) * (out_scale / l_all)
    tl.store(out_ptr + out_off + offs_d, o.to(out_ptr.dtype.element_ty))


@triton.jit
def _kv(k_cache_ptr, v_cache_ptr, blk, pos, kv_end, head_off, stride_cb, stride_cs, offs_d,
        BLOCK_SIZE: tl.constexpr):  # fmt: skip
    ok = pos < kv_end
    row = blk * stride_cb + (pos % BLOCK_SIZE) * stride_cs + head_off
    ptrs = row[:, None] + offs_d[None, :]
    k = tl.load(k_cache_ptr + ptrs, mask=ok[:, None], other=0.0)
    v = tl.load(v_cache_ptr + ptrs, mask=ok[:, None], other=0.0)
    return k, v


@triton.jit
def fp8_cores_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, bt_ptr, seq_lens_ptr, qk_scale,
                     out_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs,
                     stride_ch, stride_bt, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                     TILE: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    tok = seq.to(tl.int64)
    offs_d = tl.arange(0, D)
    q_row = q_ptr + tok * stride_qt + (kvh * 2) * stride_qh + offs_d
    q0 = tl.load(q_row).to(tl.float32)
    q1 = tl.load(q_row + stride_qh).to(tl.float32)
    acc0 = tl.zeros([TILE, D], dtype=tl.float32)
    acc1 = tl.zeros([TILE, D], dtype=tl.float32)
    m0 = tl.full([TILE], float("-inf"), dtype=tl.float32)
    m1 = tl.full([TILE], float("-inf"), dtype=tl.float32)
    l0 = tl.zeros([TILE], dtype=tl.float32)
    l1 = tl.zeros([TILE], dtype=tl.float32)
    slots = tl.arange(0, TILE)
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    head_off = kvh * stride_ch
    n_tiles = tl.cdiv(seq_len, TILE)
    blk = tl.load(bt_row + slots // BLOCK_SIZE, mask=slots < seq_len, other=0).to(tl.int64)
    nxt = slots + TILE
    blk_next = tl.load(bt_row + nxt // BLOCK_SIZE, mask=nxt < seq_len, other=0).to(tl.int64)
    if PREFETCH:
        k, v = _kv(k_cache_ptr, v_cache_ptr, blk, slots, seq_len, head_off, stride_cb,
                   stride_cs, offs_d, BLOCK_SIZE)  # fmt: skip
    for j in range(0, n_tiles):
        pos = j * TILE + slots
        if PREFETCH:
            k_cur, v_cur = k, v
            k, v = _kv(k_cache_ptr, v_cache_ptr, blk_next, pos + TILE, seq_len, head_off,
                       stride_cb, stride_cs, offs_d, BLOCK_SIZE)  # fmt: skip
        else:
            k_cur, v_cur = _kv(k_cache_ptr, v_cache_ptr, blk, pos, seq_len, head_off,
                               stride_cb, stride_cs, offs_d, BLOCK_SIZE)  # fmt: skip
        blk = blk_next  # tile j + 1's ids; the load below is tile j + 2's
        nxt = pos + 2 * TILE
        blk_next = tl.load(bt_row + nxt // BLOCK_SIZE, mask=nxt < seq_len, other=0).to(tl.int64)
        ok = pos < seq_len
        kf = k_cur.to(tl.float32)
        vf = v_cur.to(tl.float32)
        acc0, m0, l0 = _one_head(acc0, m0, l0, q0, kf, vf, ok, qk_scale)
        acc1, m1, l1 = _one_head(acc1, m1, l1, q1, kf, vf, ok, qk_scale)
    out_row = tok * stride_ot + (kvh * 2) * stride_oh
    _finish(acc0, m0, l0, out_ptr, out_row, out_scale, offs_d)
    _finish(acc1, m1, l1, out_ptr, out_row + stride_oh, out_scale, offs_d)


def fp8_cores(q, cache, md, tile: int, warps: int, prefetch: bool):
    out = torch.empty_like(q)
    kc, vc = cache[0], cache[1]
    b = md.seq_lens.shape[0]
    fp8_cores_kernel[(b, HKV)](
        out, q, kc, vc, md.block_table, md.seq_lens, SCALE * FP8_SCALE * LOG2E, FP8_SCALE,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), kc.stride(0), kc.stride(1),
        kc.stride(2), md.block_table.stride(0), D=D, BLOCK_SIZE=kc.shape[1], TILE=tile,
        PREFETCH=prefetch, num_warps=warps, num_stages=1,
    )  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    assert HQ // HKV == 2
    results, bad = [], []
    for name, ctxs in MID_SHAPES:
        rows, order, _, _, fp8_bytes = decode_shape(ctxs)
        q, _, _, c16, md = make_batch(rows, DTYPE)
        t16 = graph_time_us(attn_call(q, c16, md, False, seq_order=order))
        del c16
        q, _, _, c8, md = make_batch(rows, kvw.FP8_DTYPE)
        t8 = graph_time_us(attn_call(q, c8, md, True, seq_order=order))
        ref = batch_reference(q, c8, md)
        row = {"shape": name, "bf16_us": t16, "fp8_engine_us": t8, "cores": []}
        print(f"{name}: bf16 {t16:.1f} us ({2 * fp8_bytes / t16 / 1e6:.2f} TB/s), fp8 engine"
              f" {t8:.1f} us ({fp8_bytes / t8 / 1e6:.2f} TB/s)", flush=True)  # fmt: skip
        for tile, warps, pf in ((32, 4, False), (32, 4, True), (64, 4, True), (32, 2, True),
                                (64, 8, True), (16, 2, True)):  # fmt: skip
            fn = functools.partial(fp8_cores, q, c8, md, tile, warps, pf)
            err = rel_err(fn(), ref)[0]
            t = graph_time_us(fn)
            ok = err < REL_TOL
            bad += [] if ok else [(name, tile, warps, pf)]
            print(f"  cores tile {tile} w{warps} prefetch {int(pf)}: {t:7.1f} us"
                  f" ({fp8_bytes / t / 1e6:.2f} TB/s, x{t8 / t:.2f} vs fp8 engine,"
                  f" x{t16 / t:.2f} vs bf16) rel err {err:.1e}", flush=True)  # fmt: skip
            row["cores"].append(dict(tile=tile, warps=warps, prefetch=pf, us=t, rel_err=err))
        results.append(row)
        del c8
        torch.cuda.empty_cache()
    return report(results, bad, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
