"""Decode attention over an fp8 (e4m3) KV cache with explicit register layouts (Gluon,
mma.sync on sm80+; the engine takes it on sm90).

Why: the Triton decode kernels read an fp8 cache at ~2.3-2.5 TB/s, about half the
bandwidth (docs/benchmarks.md, session 37). Triton moves each converted fp8 tile through
shared memory into the MMA operand layout (cp.async, ld.shared, convert, st.shared, barrier,
ldmatrix), and that chain, not the bytes, sets its speed. Here every K / V word goes from
global memory straight into the registers the MMA reads; there is no shared memory at all.

- K is the B operand of S = q K^T. The m16n8k16 fragment gives a thread two adjacent
  reduction indices (k, k+1), then k+8, k+9. The reduction may run over the head dims in
  any order as long as q and K agree, so the kernel permutes it: lane t of a quad owns dims
  32t..32t+31 of its tokens, one contiguous 32-byte run, loaded as words and converted a
  byte pair at a time (cvt.rn.f16x2.e4m3x2). A reshape and permute of the loaded tile give
  the permuted order; the layout change after it only renames registers.
- V is the B operand of O = P V. Its fragment gives a thread two adjacent tokens of one
  output column. The output columns are permuted instead (column 8j + g of the MMA is head
  dim 16g + j), so lane g of a quad owns dims 16g..16g+15 of its four tokens: four words a
  token, converted in pairs of dims, then paired by token in registers.
- P goes from the S accumulator to the A operand in registers, as in FlashAttention 2.

One warp a (sequence, kv head, segment); the next tile's K / V words are loaded before the
current tile is used.

H200 (benchmarks/gpu/probe_fp8_mma.py, session 39), against the Triton fp8 path at the
workload's decode batches: b256 186.5 vs 229.4 us (3.06 TB/s of fp8), b128 109.2 vs 135.0,
b64 66.6 vs 87.7, b16 24.0 vs 31.5, b1 8.3 vs 12.2; 273.3 vs 432.5 at b256 x 2048 tokens
(3.93 TB/s). The standard workload with fp8 KV: 33,594-33,614 tok/s against 30,120-30,156.

Rows are the G query heads of the kv head, padded to the MMA's 16. The same kernel runs
over a 16-bit cache (FP8=False, 16-token tiles, no conversion) for the probe's bf16
comparison (probe_fp8_mma.py --bf16); the engine takes it for fp8 caches only.
Segments (NUM_SEGS > 1) write paged_attention's split-K partials, merged by its merge
kernel. Gluon has no interpreter: CI compiles the kernel for sm90
(tests/test_paged_decode_fp8.py) and benchmarks/gpu/check_attention.py checks it against
torch on the GPU.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import capability_major

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2

    from strixlm.kernels.pdl import gluon_pdl_prologue

    HAS_GLUON = True
except ImportError:  # CPU-only installs, or a triton without Gluon
    HAS_GLUON = False

LOG2E = 1.4426950408889634
ROWS = 16  # the MMA's M: the G query heads, padded
# Tokens a loop step (two 16-token blocks). H200, unsplit, b64-b256: 16-token tiles read
# 0.97-2.41 TB/s, 32-token tiles 2.05-3.90 (the probe's first version, session 39).
TILE = 32
# STRIXLM_ATTN_FP8_MMA=0 keeps fp8 decode on the Triton kernels (A/B; read at import).
ENABLED = os.environ.get("STRIXLM_ATTN_FP8_MMA", "1") == "1"
# Mixed steps (prompts or chunks beside decodes) over fp8 run their decodes here and the rest
# on the unified kernel, which skips one-query sequences: two launches, split on the device,
# so a mixed-step graph captured with upper bounds serves any mix. H200 (session 40): mixed
# steps x1.14-1.58 faster than one launch, the fp8 workload +0.5%, the fp8 server 257.6 vs
# 245.8 req/s. STRIXLM_ATTN_FP8_MIXED_SPLIT=0 keeps one launch (read at import).
MIXED_SPLIT = os.environ.get("STRIXLM_ATTN_FP8_MIXED_SPLIT", "1") == "1"
# Smaller decode batches stay on the Triton kernels; 1: none do (the kernel, with its
# segments, was faster at every batch of the sweep, b1-b256). For A/B runs.
MIN_SEQS = int(os.environ.get("STRIXLM_ATTN_FP8_MMA_MIN_SEQS", "1"))


def supports(q: torch.Tensor, kv_cache: torch.Tensor, block_size: int, num_seqs: int) -> bool:
    """The shapes the kernel is written for: head dim 128, at most 16 query heads a kv head,
    16-token blocks, a contiguous cache, bf16 / fp16 queries, on an sm90 GPU with Gluon;
    and batches of at least MIN_SEQS sequences."""
    _, hq, d = q.shape
    hkv = kv_cache.shape[3]
    return (
        ENABLED
        and num_seqs >= MIN_SEQS
        and HAS_GLUON
        and q.is_cuda
        and q.dtype in (torch.bfloat16, torch.float16)
        and capability_major(q.device) == 9
        and d == 128
        and hq % hkv == 0
        and hq // hkv <= ROWS
        and block_size == 16
        and kv_cache.is_contiguous()
        and q.stride(2) == 1
    )


def layouts(head_dim: int = 128, fp8: bool = True, tile: int = TILE):
    """(mma, K load, V load) layouts for one warp and a tile of `tile` tokens: over fp8,
    [tile, head_dim / 4] int32 words (four dims each); over a 16-bit cache (the probe's
    bf16 variant), [tile, head_dim] elements."""
    assert head_dim == 128 and tile in (16, 32), (head_dim, tile)
    per = 4 if fp8 else 1  # dims a loaded element holds
    mma = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    # K: lane 4g + t holds tokens g + 8r (r over registers) and dims 32t..32t+31.
    k_ld = gl.BlockedLayout([1, 32 // per], [8, 4], [1, 1], [1, 0])
    # V: lane 4g + t holds tokens 2t + {0, 1} + 8 {0, 1} (+ 16) and dims 16g..16g+15.
    dims = [[0, 1 << i] for i in range((16 // per).bit_length() - 1)]
    toks = [[1, 0], [8, 0]] + ([[16, 0]] if tile == 32 else [])
    v_ld = gl.DistributedLinearLayout(
        reg_bases=dims + toks,
        lane_bases=[[2, 0], [4, 0], [0, 16 // per], [0, 32 // per], [0, 64 // per]],
        warp_bases=[],
        block_bases=[],
        shape=[tile, head_dim // per],
    )
    return mma, k_ld, v_ld


if HAS_GLUON:
    _ROWS = gl.constexpr(ROWS)

    @gluon.jit
    def _perm_dim_of_k(k):
        # The head dim the MMA's reduction index k stands for: k = 16s + 8h + 2t + e reads
        # dim 32t + 4s + 2h + e, so quad lane t owns dims 32t..32t+31.
        return 32 * ((k % 8) // 2) + 4 * (k // 16) + 2 * ((k // 8) % 2) + (k % 2)

    @gluon.jit
    def _fp8x4_to_f16(w):
        # [R, C] int32 words of four e4m3 bytes (dim 4c + i in byte i) to [R, 4C] fp16: two
        # packed converts a word, exact (every e4m3 value is an fp16 value). Loaded as bytes,
        # LLVM unpacked and repacked each byte pair (~10 instructions a pair).
        h0, h1, h2, h3 = gl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; .reg .b32 a, b; mov.b32 {lo, hi}, $4; "
            "cvt.rn.f16x2.e4m3x2 a, lo; cvt.rn.f16x2.e4m3x2 b, hi; "
            "mov.b32 {$0, $1}, a; mov.b32 {$2, $3}, b; }",
            "=h,=h,=h,=h,r",
            [w],
            dtype=(gl.float16, gl.float16, gl.float16, gl.float16),
            is_pure=True,
            pack=1,
        )
        # join puts its new axis first in registers: dim + 1 must be the lowest register
        # bit (the byte pair a convert produced), dim + 2 the next.
        x = gl.join(gl.join(h0, h2), gl.join(h1, h3))  # [R, C, 2 (dim + 2), 2 (dim + 1)]
        return x.reshape([w.shape[0], 4 * w.shape[1]])

    @gluon.jit
    def _tile_words(cache_ptr, bt_row_ptr, j, n_tiles, seq_len, tok, offs, stride_cb,
                    BLOCK_SIZE: gl.constexpr, TILE_: gl.constexpr):  # fmt: skip
        # Tile j's words; tokens past seq_len read as 0 (stale slots may hold NaN bytes).
        # The block ids are loaded unmasked, their index clamped to the sequence's last
        # block (or its row's first): masked, those loads made the kernel 1.16-1.31x slower
        # (H200, b128-b256), the words' addresses waiting on predicated loads.
        pos = gl.minimum(j, gl.maximum(n_tiles - 1, 0)) * TILE_ + tok
        last_blk = gl.maximum(gl.cdiv(seq_len, BLOCK_SIZE) - 1, 0)
        blk = gl.load(bt_row_ptr + gl.minimum(pos // BLOCK_SIZE, last_blk)).to(gl.int64)
        ok = (pos < seq_len)[:, None]
        return gl.load(cache_ptr + (blk * stride_cb)[:, None] + offs, mask=ok, other=0)

    @gluon.jit
    def _paged_decode_fp8_kernel(
        out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, qsl_ptr,
        order_ptr, segm_acc_ptr, segm_max_ptr, segm_sum_ptr, qk_scale, out_scale,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs, stride_bt,
        NUM_Q_HEADS: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
        BLOCK_SIZE: gl.constexpr, TILE_: gl.constexpr, NUM_SEGS: gl.constexpr,
        HAS_ORDER: gl.constexpr, PDL: gl.constexpr,
        MMA: gl.constexpr, K_LD: gl.constexpr, V_LD: gl.constexpr,
        DECODES_ONLY: gl.constexpr = False, FP8: gl.constexpr = True, COLS: gl.constexpr = 32,
    ):  # fmt: skip
        # DECODES_ONLY: a mixed step's launch; sequences with more than one query (prompts,
        # chunks) are left to the unified kernel, which skips the one-query ones. FP8: the
        # cache as int32 words of four e4m3 dims, computed in fp16; else a 16-bit cache in
        # its own dtype (the probe's bf16 variant; the engine takes this kernel for fp8).
        # COLS: loaded elements a token row of one kv head (D / 4 words, or D).
        a_op: gl.constexpr = gl.DotOperandLayout(0, MMA, 2)
        b_op: gl.constexpr = gl.DotOperandLayout(1, MMA, 2)
        row_l: gl.constexpr = gl.SliceLayout(1, MMA)
        col_l: gl.constexpr = gl.SliceLayout(0, MMA)
        seq = gl.program_id(0)
        if HAS_ORDER:  # longest contexts first: the grid's tail is the short ones
            seq = gl.load(order_ptr + seq)
        kv_head = gl.program_id(1)
        seg = gl.program_id(2)
        if PDL:
            gluon_pdl_prologue()
        tok_q = gl.load(qsl_ptr + seq)
        if DECODES_ONLY:
            has_q = gl.load(qsl_ptr + seq + 1) - tok_q == 1
        else:
            has_q = gl.load(qsl_ptr + seq + 1) > tok_q  # graph padding: no query, no work
        seq_len = gl.where(has_q, gl.load(seq_lens_ptr + seq), 0)
        n_tiles = gl.cdiv(seq_len, TILE_)
        per_seg = gl.cdiv(n_tiles, NUM_SEGS)
        lo = seg * per_seg
        hi = gl.minimum(lo + per_seg, n_tiles)

        # q [ROWS, D] (rows past G are zero), its reduction order permuted like K's.
        m_a = gl.arange(0, _ROWS, layout=gl.SliceLayout(1, a_op))
        k_a = gl.arange(0, D, layout=gl.SliceLayout(0, a_op))
        q_ptrs = (
            q_ptr + tok_q.to(gl.int64) * stride_qt + (kv_head * G + m_a)[:, None] * stride_qh
            + _perm_dim_of_k(k_a)[None, :]
        )  # fmt: skip
        q = gl.load(q_ptrs, mask=(m_a < G)[:, None] & (hi > lo), other=0.0)
        if FP8:
            q = q.to(gl.float16)

        # Offsets of a tile's words within their blocks (loop-invariant), in the load layouts.
        k_tok = gl.arange(0, TILE_, layout=gl.SliceLayout(1, K_LD))
        k_word = gl.arange(0, COLS, layout=gl.SliceLayout(0, K_LD))
        k_offs = (k_tok % BLOCK_SIZE)[:, None] * stride_cs + kv_head * COLS + k_word[None, :]
        v_tok = gl.arange(0, TILE_, layout=gl.SliceLayout(1, V_LD))
        v_word = gl.arange(0, COLS, layout=gl.SliceLayout(0, V_LD))
        v_offs = (v_tok % BLOCK_SIZE)[:, None] * stride_cs + kv_head * COLS + v_word[None, :]

        bt_row_ptr = block_table_ptr + seq.to(gl.int64) * stride_bt
        m_i = gl.full([_ROWS], float("-inf"), gl.float32, row_l)
        l_i = gl.zeros([_ROWS], gl.float32, row_l)
        acc = gl.zeros([_ROWS, D], gl.float32, MMA)
        pos0 = gl.arange(0, TILE_, layout=col_l)
        kw = _tile_words(k_cache_ptr, bt_row_ptr, lo, n_tiles, seq_len, k_tok, k_offs,
                         stride_cb, BLOCK_SIZE, TILE_)  # fmt: skip
        vw = _tile_words(v_cache_ptr, bt_row_ptr, lo, n_tiles, seq_len, v_tok, v_offs,
                         stride_cb, BLOCK_SIZE, TILE_)  # fmt: skip
        for j in range(lo, hi):
            # The next tile's words first, so their loads are in flight while this one runs.
            kw_n = _tile_words(k_cache_ptr, bt_row_ptr, j + 1, n_tiles, seq_len, k_tok, k_offs,
                               stride_cb, BLOCK_SIZE, TILE_)  # fmt: skip
            vw_n = _tile_words(v_cache_ptr, bt_row_ptr, j + 1, n_tiles, seq_len, v_tok, v_offs,
                               stride_cb, BLOCK_SIZE, TILE_)  # fmt: skip
            # K^T as the B operand, its reduction order permuted (a register renaming).
            if FP8:
                kf = _fp8x4_to_f16(kw)
            else:
                kf = kw
            kf = kf.reshape([TILE_, 4, 8, 2, 2]).permute([2, 3, 1, 4, 0])
            s = mma_v2(q, gl.convert_layout(kf.reshape([D, TILE_]), b_op),
                       gl.zeros([_ROWS, TILE_], gl.float32, MMA))  # fmt: skip
            s = gl.where((j * TILE_ + pos0 < seq_len)[None, :], s * qk_scale, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, axis=1))
            p = gl.exp2(s - m_new[:, None])
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha + gl.sum(p, axis=1)
            acc = acc * alpha[:, None]
            m_i = m_new
            # V as the B operand, output column 8j + g standing for dim 16g + j.
            if FP8:
                vf = _fp8x4_to_f16(vw)
            else:
                vf = vw
            vf = vf.reshape([TILE_, 8, 16]).permute([0, 2, 1]).reshape([TILE_, D])
            acc = mma_v2(gl.convert_layout(p.to(vf.dtype), a_op), gl.convert_layout(vf, b_op),
                         acc)  # fmt: skip
            kw = kw_n
            vw = vw_n

        m_o = gl.arange(0, _ROWS, layout=row_l)
        n_o = gl.arange(0, D, layout=col_l)
        dim_o = (16 * (n_o % 8) + n_o // 8)[None, :]  # column n is head dim 16 (n % 8) + n // 8
        head = kv_head * G + m_o
        row_ok = (m_o < G) & has_q
        if NUM_SEGS > 1:  # split-K partials; an empty segment leaves max = -inf, sum 0
            row = (tok_q.to(gl.int64) * NUM_Q_HEADS + head) * NUM_SEGS + seg
            gl.store(segm_acc_ptr + row[:, None] * D + dim_o, acc, mask=row_ok[:, None])
            gl.store(segm_max_ptr + row, m_i, mask=row_ok)
            gl.store(segm_sum_ptr + row, l_i, mask=row_ok)
        else:
            res = acc * (out_scale / l_i)[:, None]
            o_ptrs = out_ptr + tok_q.to(gl.int64) * stride_ot + head[:, None] * stride_oh + dim_o
            gl.store(o_ptrs, res.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def launch_paged_decode_fp8(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    out: torch.Tensor,
    qk_scale: float,
    out_scale: float,
    seq_order: torch.Tensor | None,
    segm: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    num_segs: int,
    pdl: bool,
    decodes_only: bool = False,
    tile: int = TILE,
) -> None:
    """One launch over every (sequence, kv head, segment); qk_scale is in log2 units with the
    cache's k_scale folded in. segm: the split-K partial buffers (num_segs > 1), which the
    caller merges. Graph-padding sequences (no query) write nothing; decodes_only: nor do
    sequences with more than one query. A 16-bit cache (the probe's bf16 variant) takes
    tile 16: 32-token tiles of it would not fit the registers."""
    _, hq, d = q.shape
    _, _, bs, hkv, _ = kv_cache.shape
    fp8 = kv_cache.dtype.itemsize == 1
    mma, k_ld, v_ld = layouts(d, fp8, tile)
    # fp8: four e4m3 bytes a word, strides in words; a 16-bit cache as it is.
    kc, vc = kv_cache.view(torch.int32) if fp8 else kv_cache
    sa, sm, ss = segm if segm is not None else (out, out, out)  # unread without a split
    _paged_decode_fp8_kernel[(seq_lens.shape[0], hkv, num_segs)](
        out, q, kc, vc, block_table, seq_lens, query_start_loc,
        seq_order if seq_order is not None else seq_lens, sa, sm, ss, qk_scale, out_scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), kc.stride(0), kc.stride(1),
        block_table.stride(0),
        NUM_Q_HEADS=hq, G=hq // hkv, D=d, BLOCK_SIZE=bs, TILE_=tile, NUM_SEGS=num_segs,
        HAS_ORDER=seq_order is not None, PDL=pdl, MMA=mma, K_LD=k_ld, V_LD=v_ld,
        DECODES_ONLY=decodes_only, FP8=fp8, COLS=d // 4 if fp8 else d, num_warps=1,
        launch_pdl=pdl,
    )  # fmt: skip


# Split each sequence into segments until the one-warp programs number at least this many;
# segments keep >= 4 tiles. H200 sweep (probe_fp8_mma.py, 1-16 segments at b1-b256): the
# pick is the fastest or within 8% of it at every batch (b64: 66.6 us at 4, 61.4 at 2).
TARGET_PROGRAMS = int(os.environ.get("STRIXLM_ATTN_FP8_MMA_PROGRAMS", "2048"))
MIN_TILES_PER_SEG = 4
MAX_SEGS = 16


def num_segments(num_seqs: int, num_kv_heads: int, max_seq_len: int) -> int:
    """Segments a sequence for a batch of num_seqs (host ints; under graph capture
    max_seq_len is the padded upper bound)."""
    segs = 1
    cap = min(MAX_SEGS, max(1, max_seq_len // (MIN_TILES_PER_SEG * TILE)))
    while segs * 2 <= cap and num_seqs * num_kv_heads * segs < TARGET_PROGRAMS:
        segs *= 2
    return segs


def paged_decode_fp8(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    out: torch.Tensor,
    *,
    max_seq_len: int,
    k_scale: float,
    v_scale: float,
    seq_order: torch.Tensor | None = None,
    num_segs: int | None = None,
    decodes_only: bool = False,
    tile: int = TILE,
) -> torch.Tensor:
    """Decode attention (each sequence 0 or 1 query tokens) of q [T, Hq, D] over an fp8
    cache, paged_attention's arguments; num_segs None picks by num_segments. decodes_only:
    any batch; only the one-query sequences' rows are written (a mixed step's decodes).
    tile: launch_paged_decode_fp8's (16 for a 16-bit cache, the probe's variant)."""
    from strixlm.kernels.paged_attention import merge_segments, segment_buffers
    from strixlm.kernels.pdl import pdl_enabled

    _, hq, d = q.shape
    hkv = kv_cache.shape[3]
    # A mixed step's decodes run unsplit: the merge kernel would cover every token row of
    # the step (prompts included) and the partials would be sized by them.
    segs = num_segs or (1 if decodes_only else num_segments(seq_lens.shape[0], hkv, max_seq_len))
    segm = segment_buffers(q.shape[0], hq, segs, d, q.device) if segs > 1 else None
    pdl = pdl_enabled(q)
    launch_paged_decode_fp8(
        q, kv_cache, query_start_loc, seq_lens, block_table, out,
        float(scale * k_scale * LOG2E), float(v_scale), seq_order, segm, segs, pdl,
        decodes_only, tile,
    )  # fmt: skip
    if segm is not None:
        merge_segments(out, *segm, float(v_scale), segs)
    return out
