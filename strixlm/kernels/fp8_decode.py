"""Decode attention over an fp8 (e4m3) KV cache on the CUDA cores: no MMA operand layouts.

The bf16 decode kernels feed K / V to tensor-core MMAs. Over an fp8 cache that path is
bound by the conversion: Triton moves each fp8 tile from shared memory to the fp16 MMA
operand layout one byte at a time, and the kernels read 1.7-2.4 TB/s of fp8 where the bf16
ones read 4.0-4.3 (H200, benchmarks/gpu/bench_fp8_decode.py). A decode query is only G
rows (the q heads of one kv head), so the MMA's 16-row tile is mostly padding anyway.

Here each thread owns 16 contiguous head-dim values (16 bytes: one vector load) of a few
tokens of every tile, in a [I, WR, L, D] tile: D split 16 per thread over 8 lanes, L = 4
lanes, WR = the warps, I = tokens each thread holds. The scores need a sum over D (three
shuffles); everything else stays in the thread: each (wr, l) lane position keeps its own
online softmax (max, sum and a [G, 16] slice of the output) over the tokens it sees, and
the partial states are merged once per item (sequence or segment), not per tile.
"""

from __future__ import annotations

from strixlm.kernels.dispatch import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def fp8_slots(I: tl.constexpr, WR: tl.constexpr, L: tl.constexpr):
        # Token slot of each [I, WR, L] position within a tile (a bijection onto [0, TILE)).
        i = tl.arange(0, I)[:, None, None]
        w = tl.arange(0, WR)[None, :, None]
        lane = tl.arange(0, L)[None, None, :]
        return (i * WR + w) * L + lane

    @triton.jit
    def fp8_state(G: tl.constexpr, WR: tl.constexpr, L: tl.constexpr, D: tl.constexpr):
        # (acc [G, WR, L, D], max [G, WR, L], sum [G, WR, L]) of an empty item.
        acc = tl.zeros([G, WR, L, D], dtype=tl.float32)
        m = tl.full([G, WR, L], float("-inf"), dtype=tl.float32)
        l_sum = tl.zeros([G, WR, L], dtype=tl.float32)
        return acc, m, l_sum

    @triton.jit
    def fp8_load_q(q_ptr, tok, head0, stride_qt, stride_qh, has_q, G: tl.constexpr,
                   G_REAL: tl.constexpr, D: tl.constexpr):  # fmt: skip
        # q rows of the kv head's G_REAL q heads (padding rows G_REAL.. are 0) as fp32
        # [G, 1, 1, 1, D], to broadcast over a tile.
        g = tl.arange(0, G)[:, None]
        d = tl.arange(0, D)[None, :]
        ptrs = q_ptr + tok * stride_qt + (head0 + g) * stride_qh + d
        q = tl.load(ptrs, mask=(g < G_REAL) & has_q, other=0.0).to(tl.float32)
        return q[:, None, None, None, :]

    @triton.jit
    def fp8_tile_step(
        acc,
        m,
        l_sum,
        q,
        pos,
        blk,
        kv_end,
        k_cache_ptr,
        v_cache_ptr,
        head_off,
        stride_cb,
        stride_cs,
        qk_scale,
        D: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
    ):
        # One online-softmax step over the tile whose token positions are pos [I, WR, L]
        # (cache blocks blk, same shape). qk_scale holds k_scale * softmax scale * log2(e);
        # acc is unscaled by v_scale (the caller's out_scale applies it).
        ok = pos < kv_end
        row = blk * stride_cb + (pos % BLOCK_SIZE) * stride_cs + head_off
        ptrs = row[:, :, :, None] + tl.arange(0, D)[None, None, None, :]
        k = tl.load(k_cache_ptr + ptrs, mask=ok[:, :, :, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + ptrs, mask=ok[:, :, :, None], other=0.0).to(tl.float32)
        s = tl.sum(q * k[None], axis=4) * qk_scale  # [G, I, WR, L]
        s = tl.where(ok[None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        # A lane position may have seen only masked tokens so far: keep exp2 off -inf - -inf.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m - m_safe)
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, :, :, None] + tl.sum(p[:, :, :, :, None] * v[None], axis=1)
        return acc, m_new, l_sum

    @triton.jit
    def fp8_merge(acc, m, l_sum):
        # The item's (acc [G, D], max [G], sum [G]) from the lane positions' states.
        m_all = tl.max(tl.max(m, axis=2), axis=1)  # [G]
        m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
        w = tl.exp2(m - m_safe[:, None, None])  # 0 where a position saw nothing
        l_all = tl.sum(tl.sum(l_sum * w, axis=2), axis=1)
        acc_all = tl.sum(tl.sum(acc * w[:, :, :, None], axis=2), axis=1)
        return acc_all, m_all, l_all
