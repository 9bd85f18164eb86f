"""The per-tile steps both paged attention kernels share (the unified kernel in
paged_attention, the persistent decode grid in paged_decode): q rows in, KV tiles through
an online softmax (base 2, fp32), output rows or split-K partials out.

KV tiles come from the paged cache (attn_step_blocks: each token's block id from the block
table, fp8 caches read as byte pairs) or, for a step's own new tokens, from contiguous
[T, Hkv, D] rows (attn_step_rows). Both feed softmax_update (then online_softmax).
"""

from __future__ import annotations

import os

from strixlm.kernels.kv_write import HAS_TRITON

# Masked tiles' block ids loaded unmasked, their index clamped to the last block in range
# (the K / V loads past it stay masked). Masking those loads cost the Gluon fp8 decode
# kernel 1.16-1.31x (session 39); on the Triton kernels the clamp measured +0.7% on the
# bf16 standard workload (session 40, three alternating pairs). STRIXLM_ATTN_CLAMP_IDS=0
# restores the masked loads (read at import).
CLAMP_IDS = os.environ.get("STRIXLM_ATTN_CLAMP_IDS", "1") == "1"
# Where TILE is a multiple of BLOCK_SIZE every tile starts on a block boundary, so a token's
# slot in its block (offs_t % BLOCK_SIZE) and its block's index within the tile are loop
# invariants: the address work leaves the tile loop (benchmarks/sass_tile_loop.py, the
# persistent kernel at tile 32: 545 -> 522 instructions a tile on the common path, 195 ->
# 168 registers). The same values. H200 (session 41), the bf16 workload in three
# alternating pairs: 28,140-28,176 tok/s against 27,940-27,987 (+0.70%).
# STRIXLM_ATTN_ALIGNED_TILES=0 restores the per-token address work (read at import).
ALIGNED_TILES = os.environ.get("STRIXLM_ATTN_ALIGNED_TILES", "1") == "1"
# Aligned tiles' K / V pointers built a block at a time (PER_BLOCK, see per_block_tiles):
# one 64-bit pointer per block of the tile, plus each token's 32-bit offset within its
# block (a loop invariant). Per token, the compiler otherwise formed a 64-bit element
# offset, scaled it to bytes and added it to the K and V bases. sm90 SASS of a tile's
# common path (benchmarks/sass_tile_loop.py): persistent kernel 520 -> 480 instructions,
# unified decode loops 322 / 415 -> 304 / 388, with 184 -> 150 registers. H200 (session
# 41), the bf16 workload in three alternating pairs: 28,567-28,617 tok/s against
# 28,438-28,532 (+0.40%). STRIXLM_ATTN_BLOCK_PTRS=0 keeps the per-token pointers (read
# at import).
BLOCK_PTRS = os.environ.get("STRIXLM_ATTN_BLOCK_PTRS", "1") == "1"
# Each row's softmax sum kept per score element ([rows, TILE], rescaled with the output)
# and summed once, where the row is stored. The decode score tile's tokens are split over
# the program's two warps, so the per-tile row sum crosses warps through shared memory:
# sm90 SASS (benchmarks/sass_tile_loop.py): the persistent tile 480 -> 469 instructions
# and 9 -> 6 barriers, the unified decode loops 304 / 388 -> 288 / 366 and 9 -> 6. The
# same sum in another order (fp32 rounding). H200 (session 47): 0.6% less decode attention
# time a launch over the workload's batches b244-b40, and the bf16 workload in three
# alternating pairs 28,865-28,893 tok/s against 28,749-28,771 (+0.4%).
# STRIXLM_ATTN_DEFER_SUM=0 sums per tile again (read at import).
DEFER_SUM = os.environ.get("STRIXLM_ATTN_DEFER_SUM", "1") == "1"


def per_block_tiles(tile: int, block_size: int, fp8_pairs: bool, kc, vc) -> bool:
    """Whether the attention kernels build K / V pointers per block (PER_BLOCK): aligned
    tiles that span whole blocks, 16-bit or fp8 loads (not fp8 pairs), and rows that
    start on 16 bytes, which the kernels then assert to the compiler (the per-block
    pointers hide the row alignment it infers from the strides)."""
    if not (ALIGNED_TILES and BLOCK_PTRS) or fp8_pairs or tile % block_size:
        return False
    es = kc.element_size()
    return all(t.data_ptr() % 16 == 0 for t in (kc, vc)) and all(
        s * es % 16 == 0 for s in kc.stride()[:3]
    )


if HAS_TRITON:
    import triton
    import triton.language as tl

    _CLAMP_IDS = tl.constexpr(CLAMP_IDS)
    _ALIGNED_TILES = tl.constexpr(ALIGNED_TILES)
    _DEFER_SUM = tl.constexpr(DEFER_SUM)

    @triton.jit
    def fresh_sums(BLOCK_M: tl.constexpr, TILE: tl.constexpr):
        # The row sums before a sequence's first tile: per score element with _DEFER_SUM.
        if _DEFER_SUM:
            l_i = tl.zeros([BLOCK_M, TILE], dtype=tl.float32)
        else:
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        return l_i

    @triton.jit
    def row_sums(l_i):
        # Each row's softmax sum [BLOCK_M] from the carried sums: per element ([BLOCK_M,
        # TILE], fresh_sums under _DEFER_SUM) or per row already, as online_softmax tells.
        if len(l_i.shape) == 2:
            l_i = tl.sum(l_i, axis=1)
        return l_i

    @triton.jit
    def _fp8_compute_dtype(q, k_cache_ptr):
        # A 16-bit q over an fp8 cache computes in fp16: fp8 -> fp16 is one native cvt per
        # two values on sm89+, while bf16 took a second, scalar conversion per value (512
        # per thread per tile at tile 64). The fp8 values are raw (at most 448): the scales
        # are folded into qk_scale / out_scale. fp32 q keeps the fp32 (IEEE) path.
        if k_cache_ptr.dtype.element_ty == tl.float8e4nv and q.dtype != tl.float32:
            q = q.to(tl.float16)
        return q

    @triton.jit
    def _fp8_pairs_to_f16(x):
        # x: int16 holding two e4m3 bytes (element 2i in the low byte): one packed convert,
        # exact (every e4m3 value is an fp16 value). Triton's own fp8 -> fp16 path moved the
        # tiles through shared memory a byte at a time (256 ld.shared.b8 per thread per tile).
        lo, hi = tl.inline_asm_elementwise(
            "{ .reg .b32 t; cvt.rn.f16x2.e4m3x2 t, $2; mov.b32 {$0, $1}, t; }",
            "=h,=h,h",
            [x],
            dtype=(tl.float16, tl.float16),
            is_pure=True,
            pack=1,
        )
        return lo, hi

    @triton.jit
    def _load_fp8_rows_f16(cache_ptr, tok, ok_t, HEAD_DIM: tl.constexpr, TILE: tl.constexpr):
        # [TILE, HEAD_DIM] fp16 from fp8 rows starting at element offsets tok (even), read
        # as pairs: 16-byte vector loads and no byte-wise shared-memory traffic.
        offs_h = tl.arange(0, HEAD_DIM // 2)
        ptrs = cache_ptr.to(tl.pointer_type(tl.int16)) + ((tok // 2)[:, None] + offs_h[None, :])
        raw = tl.load(ptrs, mask=ok_t[:, None], other=0)
        lo, hi = _fp8_pairs_to_f16(raw)
        return tl.reshape(tl.join(lo, hi), [TILE, HEAD_DIM])

    @triton.jit
    def tile_blocks(bt_row_ptr, j, kv_end, offs_t, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                    MASKED: tl.constexpr, PER_BLOCK: tl.constexpr):  # fmt: skip
        # The cache block of each token of KV tile j (int64 [TILE]; PER_BLOCK: of each
        # block of the tile, [TILE // BLOCK_SIZE]). MASKED: past kv_end, 0 (or, with
        # _CLAMP_IDS, the last block in range); those tokens' K / V are never read.
        if PER_BLOCK:
            idx = j * (TILE // BLOCK_SIZE) + tl.arange(0, TILE // BLOCK_SIZE)
            pos = idx * BLOCK_SIZE  # each block's first position
        else:
            pos = j * TILE + offs_t
            idx = _block_index(pos, j, offs_t, BLOCK_SIZE, TILE)
        if MASKED:
            if _CLAMP_IDS:
                last = tl.maximum(tl.cdiv(kv_end, BLOCK_SIZE) - 1, 0)
                ids = tl.load(bt_row_ptr + tl.minimum(idx, last))
            else:
                ids = tl.load(bt_row_ptr + idx, mask=pos < kv_end, other=0)
        else:
            ids = tl.load(bt_row_ptr + idx)
        return ids.to(tl.int64)

    @triton.jit
    def _block_index(pos, j, offs_t, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
        # The block-table index of each position pos = j * TILE + offs_t. With _ALIGNED_TILES
        # and tiles that start on a block, offs_t // BLOCK_SIZE is a loop invariant.
        if _ALIGNED_TILES and TILE % BLOCK_SIZE == 0:
            idx = j * (TILE // BLOCK_SIZE) + offs_t // BLOCK_SIZE
        else:
            idx = pos // BLOCK_SIZE
        return idx

    @triton.jit
    def blocks_step(carried, bt_row_ptr, j, kv_end, offs_t, BLOCK_SIZE: tl.constexpr,
                    TILE: tl.constexpr, MASKED: tl.constexpr, AHEAD: tl.constexpr,
                    PER_BLOCK: tl.constexpr):  # fmt: skip
        # (tile j's block ids, what the loop carries to tile j + 1). AHEAD: carried holds
        # tile j's ids and tile j + 1's are loaded now (masked: the lookahead may pass
        # kv_end), so no K / V address waits on a load of its own iteration; else the ids
        # are loaded here and carried passes through untouched.
        if AHEAD:
            return carried, tile_blocks(bt_row_ptr, j + 1, kv_end, offs_t, BLOCK_SIZE, TILE, True,
                                        PER_BLOCK)  # fmt: skip
        return (tile_blocks(bt_row_ptr, j, kv_end, offs_t, BLOCK_SIZE, TILE, MASKED, PER_BLOCK),
                carried)  # fmt: skip

    @triton.jit
    def _token_offsets(blk, pos, offs_t, head_off, stride_cb, stride_cs,
                       BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):  # fmt: skip
        # Each token's element offset in the cache (blk: per token).
        if _ALIGNED_TILES and TILE % BLOCK_SIZE == 0:
            tok = blk * stride_cb + ((offs_t % BLOCK_SIZE) * stride_cs + head_off)
        else:
            tok = blk * stride_cb + (pos % BLOCK_SIZE) * stride_cs + head_off
        return tok

    @triton.jit
    def _block_rows(blk, k_cache_ptr, v_cache_ptr, head_off, stride_cb, stride_cs, offs_d,
                    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):  # fmt: skip
        # K and V row pointers [TILE, D] of a tile of whole blocks (blk: per block): a
        # 64-bit pointer per block plus each token's 32-bit offset in its block, with the
        # rows' 16-byte alignment restated (per_block_tiles checked it), which the reshape
        # hides from the compiler; without it the loads would not vectorize.
        d: tl.constexpr = offs_d.shape[0]
        slot = tl.arange(0, BLOCK_SIZE)
        in_blk = (slot[:, None] * stride_cs + head_off) + offs_d[None, :]
        kp = tl.reshape((k_cache_ptr + blk * stride_cb)[:, None, None] + in_blk[None, :, :],
                        [TILE, d])  # fmt: skip
        vp = tl.reshape((v_cache_ptr + blk * stride_cb)[:, None, None] + in_blk[None, :, :],
                        [TILE, d])  # fmt: skip
        kp = tl.max_contiguous(tl.multiple_of(kp, [1, 16]), [1, d])
        vp = tl.max_contiguous(tl.multiple_of(vp, [1, 16]), [1, d])
        return kp, vp

    @triton.jit
    def attn_step_blocks(
        acc,
        m_i,
        l_i,
        q,
        j,
        kv_end,
        q_abs,
        blk,
        k_cache_ptr,
        v_cache_ptr,
        head_off,
        stride_cb,
        stride_cs,
        qk_scale,
        offs_t,
        offs_d,
        HEAD_DIM: tl.constexpr,
        EVEN_D: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        MASKED: tl.constexpr,
        IEEE: tl.constexpr,
        K_ROWS: tl.constexpr,
        FP8_PAIRS: tl.constexpr,
        PER_BLOCK: tl.constexpr,
        LEN_MASK: tl.constexpr = True,
    ):
        # One online-softmax step over KV tile j, whose cache blocks are blk (tile_blocks,
        # per token or PER_BLOCK): a caller that loads them a tile ahead keeps every K / V
        # address free of a same-iteration load, which lets Triton's pipeliner multi-buffer
        # them.
        pos = j * TILE + offs_t
        pos_ok = pos < kv_end  # read (and kept) only when MASKED
        if FP8_PAIRS:  # fp8 cache, 16-bit q, compiled for the GPU, HEAD_DIM a power of two
            tok = _token_offsets(blk, pos, offs_t, head_off, stride_cb, stride_cs, BLOCK_SIZE,
                                 TILE)  # fmt: skip
            v = _load_fp8_rows_f16(v_cache_ptr, tok, pos_ok, HEAD_DIM, TILE)
            k = tl.trans(_load_fp8_rows_f16(k_cache_ptr, tok, pos_ok, HEAD_DIM, TILE))
        else:
            # Both tiles as [TILE, D]: one contiguous row of D values per token. K is
            # transposed in registers for the dot (K_ROWS), or loaded as [D, TILE] directly.
            if PER_BLOCK:
                kp, vp = _block_rows(blk, k_cache_ptr, v_cache_ptr, head_off, stride_cb,
                                     stride_cs, offs_d, BLOCK_SIZE, TILE)  # fmt: skip
            else:
                tok = _token_offsets(blk, pos, offs_t, head_off, stride_cb, stride_cs,
                                     BLOCK_SIZE, TILE)  # fmt: skip
                rows = tok[:, None] + offs_d[None, :]
                kp = k_cache_ptr + rows
                vp = v_cache_ptr + rows
            if MASKED or not EVEN_D:
                ok = pos_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
                v = tl.load(vp, mask=ok, other=0.0)
                if K_ROWS:
                    k = tl.trans(tl.load(kp, mask=ok, other=0.0))
                else:
                    k = tl.load(tl.trans(kp), mask=tl.trans(ok), other=0.0)
            else:
                v = tl.load(vp)
                if K_ROWS:
                    k = tl.trans(tl.load(kp))
                else:
                    k = tl.load(tl.trans(kp))
        return softmax_update(acc, m_i, l_i, q, k, v, qk_scale, pos, pos_ok, q_abs, MASKED, IEEE,
                              LEN_MASK=LEN_MASK)  # fmt: skip

    @triton.jit
    def attn_step_rows(
        acc,
        m_i,
        l_i,
        q,
        f,
        kv_end,
        q_abs,
        k_rows_ptr,
        v_rows_ptr,
        row0,
        ctx_len,
        stride_nt,
        s_scale,
        v_inv,
        offs_t,
        offs_d,
        HEAD_DIM: tl.constexpr,
        EVEN_D: tl.constexpr,
        TILE: tl.constexpr,
        MASKED: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        # One online-softmax step over tile f of a sequence's own new tokens, read from the
        # step's K / V rows ([T, Hkv, D]; k_rows_ptr / v_rows_ptr at the kv head, row0 the
        # sequence's first new token) instead of the cache: new token i sits at position
        # ctx_len + i. The rows are unquantized, so the cache's scales do not apply: s_scale
        # leaves out k_scale, and the tile's probabilities are divided by v_scale (v_inv)
        # because the output is multiplied by it once for both sources.
        idx = f * TILE + offs_t
        pos = ctx_len + idx
        pos_ok = pos < kv_end
        ptrs = ((row0 + idx).to(tl.int64) * stride_nt)[:, None] + offs_d[None, :]
        if MASKED or not EVEN_D:
            ok = pos_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
            k = tl.load(k_rows_ptr + ptrs, mask=ok, other=0.0)
            v = tl.load(v_rows_ptr + ptrs, mask=ok, other=0.0)
        else:
            k = tl.load(k_rows_ptr + ptrs)
            v = tl.load(v_rows_ptr + ptrs)
        # q is in the rows' own dtype (the caller's raw q): no per-element conversion.
        return softmax_update(acc, m_i, l_i, q, tl.trans(k), v, s_scale, pos, pos_ok, q_abs,
                              MASKED, IEEE, v_inv, True)  # fmt: skip

    @triton.jit
    def softmax_update(
        acc, m_i, l_i, q, k, v, s_scale, pos, pos_ok, q_abs, MASKED: tl.constexpr,
        IEEE: tl.constexpr, p_scale=1.0, P_SCALED: tl.constexpr = False,
        LEN_MASK: tl.constexpr = True,
    ):  # fmt: skip
        # The online-softmax update with one KV tile: k [D, TILE] and v [TILE, D] at
        # positions pos; scores times s_scale (log2 units); MASKED applies the causal limit
        # (q_abs per row) and pos_ok (the positions that exist), the latter only with
        # LEN_MASK (a caller whose stored rows all have q_abs < kv_end may leave it to the
        # loads). P_SCALED: the tile's values weigh p_scale times its probabilities in the
        # output (not in the sum).
        if IEEE:
            s = tl.dot(q, k.to(q.dtype), input_precision="ieee")
        else:
            s = tl.dot(q, k.to(q.dtype))
        s = s * s_scale
        if MASKED:
            if LEN_MASK:
                ok = (pos[None, :] <= q_abs[:, None]) & pos_ok[None, :]
            else:
                ok = pos[None, :] <= q_abs[:, None]
            s = tl.where(ok, s, float("-inf"))
        return online_softmax(acc, m_i, l_i, q, s, v, IEEE, p_scale, P_SCALED)

    @triton.jit
    def online_softmax(
        acc, m_i, l_i, q, s, v, IEEE: tl.constexpr, p_scale=1.0, P_SCALED: tl.constexpr = False,
    ):  # fmt: skip
        # The state (acc [..., M, D], running max and sum [..., M]) after one tile's scores s
        # [..., M, T] (log2 units, -inf where masked) and values v [..., T, D], with any
        # leading batch dims. P_SCALED: see softmax_update.
        m_new = tl.maximum(m_i, tl.max(s, axis=-1))
        # A row can be fully masked so far (split segments): keep exp2 away from -inf - -inf.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - tl.expand_dims(m_safe, -1))
        alpha = tl.exp2(m_i - m_safe)
        if len(l_i.shape) == len(s.shape):  # sums per element (fresh_sums, _DEFER_SUM)
            l_i = l_i * tl.expand_dims(alpha, -1) + p
        else:
            l_i = l_i * alpha + tl.sum(p, axis=-1)
        acc = acc * tl.expand_dims(alpha, -1)
        if P_SCALED:
            p = p * p_scale
        if IEEE:
            acc = tl.dot(p, v.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(q.dtype), v.to(q.dtype), acc)
        return acc, m_new, l_i

    @triton.jit
    def load_q_rows(
        q_ptr, tok_col, head, stride_qt, stride_qh, offs_d, io_mask, k_cache_ptr,
        RAW: tl.constexpr = False,
    ):  # fmt: skip
        # The program's q rows [BLOCK_M, DIM_P] in the dtype its dots over the cache use (RAW:
        # q's own); tok_col is the token per row ([BLOCK_M, 1]) or one token for all rows.
        q = tl.load(
            q_ptr + tok_col * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
            mask=io_mask,
            other=0.0,
        )
        if not RAW:
            q = _fp8_compute_dtype(q, k_cache_ptr)
        return q

    @triton.jit
    def store_out_rows(
        out_ptr, tok_col, head, stride_ot, stride_oh, offs_d, acc, l_i, out_scale, io_mask
    ):
        # The normalized output rows (tok_col as in load_q_rows), in out's dtype; l_i as
        # carried (fresh_sums).
        res = acc * (out_scale / row_sums(l_i))[:, None]
        tl.store(
            out_ptr + tok_col * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
            res.to(out_ptr.dtype.element_ty),
            mask=io_mask,
        )

    @triton.jit
    def store_segment_partial(
        segm_acc_ptr, segm_max_ptr, segm_sum_ptr, row, row_ok, acc_ok, acc, m_i, l_i, offs_d,
        DIM_P: tl.constexpr,
    ):  # fmt: skip
        # One segment's partial rows for _merge_segments_kernel: running max and sum
        # [T, Hq, NUM_SEGS] and the unnormalized output [T, Hq, NUM_SEGS, DIM_P] (row indexes
        # the first two layouts); l_i as carried (fresh_sums).
        tl.store(segm_max_ptr + row, m_i, mask=row_ok)
        tl.store(segm_sum_ptr + row, row_sums(l_i), mask=row_ok)
        acc_ptrs = segm_acc_ptr + row[:, None] * DIM_P + offs_d[None, :]
        tl.store(acc_ptrs, acc, mask=row_ok[:, None] & acc_ok)
