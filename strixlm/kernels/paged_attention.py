"""Paged attention in Triton: one "unified" kernel for prefill, chunked prefill and decode.

Inputs are variable-length: the queries of sequence i are q[qsl[i]:qsl[i+1]] and sit at the
end of its context (query j at position seq_len - qlen + j, seeing keys 0..that position);
the keys live in the paged cache [2, num_blocks, block_size, Hkv, D] through block_table.

Grid: (query tiles, kv heads[, KV segments]). A program takes BLOCK_Q query tokens of one
sequence and the G = Hq / Hkv query heads that share one kv head (BLOCK_M = BLOCK_Q * G rows),
so K/V are loaded once per GQA group. It runs an online softmax (base 2, fp32) over KV tiles
of TILE tokens up to its causal limit: first the tiles every row sees in full (no mask), then
the diagonal tiles with the causal mask. The number of query tiles is bounded by
num_tokens // BLOCK_Q + num_seqs (each sequence wastes at most one tile), so the grid depends
only on host ints; a program finds its sequence by binary search in query_start_loc and
exits when its tile is past the sequence's query length. Everything else (lengths, causal
limits) comes from device tensors, so the launch is CUDA-graph safe with padded batches.

Split-K (flash decoding): with few sequences and long contexts, the 2D grid leaves SMs idle.
Then each program handles one of NUM_SEGS segments of the KV range and writes its partial
(acc, max, sum); a second kernel merges them. Correct for any batch; chosen for decode-like
batches only (max_query_len small) where the partial buffers stay small.

Rows of tokens outside every sequence (graph padding past query_start_loc[-1]) are not
written by the unified kernel (the split path's merge writes zeros there): treat them as
unspecified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from strixlm.kernels import paged_decode_fp8 as fp8_mma
from strixlm.kernels.attn_tiles import per_block_tiles
from strixlm.kernels.dispatch import sm_count
from strixlm.kernels.env_knobs import env_float, env_int, env_ints
from strixlm.kernels.kv_write import FP8_DTYPE, HAS_TRITON
from strixlm.kernels.pdl import EARLY_LOADS, pdl_enabled

if TYPE_CHECKING:
    from strixlm.kernels.qk_norm_rope import QKNormRopeWrite

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.attn_tiles import (
        attn_step_blocks,
        attn_step_rows,
        blocks_step,
        fresh_sums,
        load_q_rows,
        store_out_rows,
        store_segment_partial,
        tile_blocks,
    )
    from strixlm.kernels.pdl import pdl_prologue

LOG2E = 1.4426950408889634
# Split heuristic knobs (see choose_num_splits); tuned on the H200 by
# benchmarks/gpu/check_attention.py --sweep.
SPLIT_MAX_QUERY_LEN = 8  # decode and short speculative verification
# Split until the decode programs fill SPLIT_TARGET_CTAS_PER_SM an SM. H200, the workload's
# tail shapes (sweep_decode_attn.py --tail, session 30), us a launch by segments a sequence:
#   b39: 1 seg 75.3, 2 segs 67.4 | b33: 67.2, 60.7 | b26: 2 segs 50.8, 4 57.9
#   b20: 2 segs 45.8, 4 44.0 | b12: 4 segs 29.5, 8 31.0 | b6: 8 segs 18.0, 16 17.9
# Per launch the best pick sits at 2.9-5 programs an SM, which a target of 2.9 gives at
# every shape above; 2 keeps b33-b39 unsplit (with graph padding only the 40-row graph's
# pick differs; the persistent grid takes 40 and up). On the workload 2.9 has not shown
# it: one alternating pair ran 27,615.7 vs 27,674.6 / 27,654.1 at 2 (session 30), inside
# the spread of same-code runs; 3 ran +0.15% in session 29. Until a longer A/B settles it,
# the measured 2 stays. STRIXLM_ATTN_SPLIT_CTAS (read at import; a float) for A/B runs.
SPLIT_TARGET_CTAS_PER_SM = env_float("STRIXLM_ATTN_SPLIT_CTAS", 2.0)
SPLIT_MIN_TOKENS_PER_SEG = 128
SPLIT_MAX_SEGS = 64
# Benchmark knobs for A/B runs of the decode config. 64-token tiles with 2 warps and 3 stages
# were within 1-2% of the best of 54 configs at batch 64-256 (H200, session 3), 10-18% faster
# than 32 / 4 warps. Since the block ids come a tile ahead (UNIFIED_AHEAD,
# paged_decode.BLOCKS_AHEAD), K / V are double-buffered, and 32-token tiles with both on ran
# the workload +0.5% (27,582.9 / 27,538.5 / 27,566.1 / 27,555.0 tok/s -> 27,700.0 / 27,703.6
# / 27,698.3 / 27,681.5, alternating, H200, 2026-12-03). The unified kernel's switch at
# 64-token tiles (27,558.8 / 27,579.6) and 32-token tiles without it (27,575.2) gained nothing.
DECODE_TILE = env_int("STRIXLM_ATTN_DECODE_TILE", 32)
DECODE_WARPS = env_int("STRIXLM_ATTN_DECODE_WARPS", 2)
DEFAULT_K_ROWS = os.environ.get("STRIXLM_ATTN_K_ROWS", "0") == "1"
# Long prefills' and budget-sized mixed steps' config: block_m, tile, warps, stages. H200
# sweep (check_attention --sweep, 2026-12-01): 13 x 600-token prompts + 64 decodes 250 ->
# 152 us, one 2048-token prompt 117 -> 96 us, against 128 / 64 / 8 / 2. Sessions 40-41
# changed the kernel's tile loops since; STRIXLM_ATTN_PREFILL_CONFIG (read at import, e.g.
# "64,32,4,3") A/Bs a re-sweep's pick (run_remeasure.sh prefillsweep).
PREFILL_CONFIG = env_ints(
    "STRIXLM_ATTN_PREFILL_CONFIG",
    (64, 32, 4, 3),
    lambda c: all(v >= 16 and v & (v - 1) == 0 for v in c[:2]) and c[2] in (1, 2, 4, 8, 16)
    and c[3] >= 1,
    "block_m,tile,warps,stages (block_m and tile powers of two >= 16, warps a power of two "
    "up to 16, stages >= 1)",
)  # fmt: skip
# KV segments forced on decode-like batches (0 = the heuristic); for A/B runs.
DECODE_SPLITS = env_int("STRIXLM_ATTN_DECODE_SPLITS", 0)
# The q/k norm + rotary + K/V write inside the persistent decode kernel when a caller
# offers it (qk_prologue), opt-in with STRIXLM_ATTN_FUSE_QK=1. H200 (bench_fused_qk.py,
# 2026-12-01): bit-equal, but with a bf16 cache x0.990 / 0.985 / 0.999 / 1.021 against the
# separate launch at batch 256 / 192 / 128 / 96 (fp8 cache x1.035 at 256); the workload
# A/B was 26,092 / 26,068 tok/s on vs 26,235 / 26,152 off. The prologue's dependent loads
# delay the first KV tile by about what the saved launch cost. With those loads before the
# PDL wait (session 22, code in af97000): x0.95-0.98 per layer at batch 96-256, workload
# -6.5%; reverted.
FUSED_QK_ENABLED = os.environ.get("STRIXLM_ATTN_FUSE_QK", "0") == "1"
# KV tiles' block ids loaded a tile ahead, which lets Triton multi-buffer K / V at 3+ stages
# (see paged_decode.BLOCKS_AHEAD); STRIXLM_ATTN_UNIFIED_AHEAD=0 turns it off (read at import).
UNIFIED_AHEAD = os.environ.get("STRIXLM_ATTN_UNIFIED_AHEAD", "1") == "1"
# fp8 caches read as byte pairs (see fp8_pairs); STRIXLM_ATTN_FP8_PAIRS=0 turns it off (A/B).
FP8_PAIRS_ENABLED = os.environ.get("STRIXLM_ATTN_FP8_PAIRS", "1") == "1"
# Over fp8 caches the unified kernel reads each sequence's new tokens from the step's K / V
# rows (see fresh_rows); STRIXLM_ATTN_FP8_FRESH=0 reads them back from the cache (A/B).
# H200 (bench_fp8_decode --fresh, 28 launches a graph, session 39): 4 x 512-token prompts
# 35.2 -> 26.7 us (bf16 cache 26.4), a 512-token chunk at 1536 82.3 -> 75.1, 13 x 600 +
# 64 decodes 172.2 -> 150.8, a chunk + 63 decodes 251.7 -> 252.5.
FP8_FRESH_ENABLED = os.environ.get("STRIXLM_ATTN_FP8_FRESH", "1") == "1"


@dataclass(frozen=True)
class AttnConfig:
    block_m: int  # rows per program: BLOCK_Q query tokens x G heads (power of two, >= 16)
    tile: int  # KV tokens per inner step (power of two, >= 16; may span cache blocks)
    num_warps: int
    num_stages: int
    num_splits: int = 1  # > 1: split-K with that many KV segments
    k_rows: bool = False  # load K as [TILE, D] rows (contiguous per token) and transpose
    persistent: bool = False  # decode: paged_decode's persistent grid (one query per seq)
    ctas_per_sm: int = 0  # persistent grid's programs an SM (0: its default)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132  # H200; only used by the heuristic under the interpreter
    return sm_count(device)


def choose_num_splits(
    num_seqs: int, num_kv_heads: int, max_query_len: int, max_seq_len: int, tile: int, sms: int
) -> int:
    """KV segments per sequence: > 1 when decode-like programs would leave SMs idle.

    Host ints only (under graph capture max_seq_len is the padded upper bound), so the
    choice is fixed per captured shape. Segments are kept >= SPLIT_MIN_TOKENS_PER_SEG
    tokens (and one tile) long so each one amortizes its partial write and the merge.
    """
    if max_query_len > SPLIT_MAX_QUERY_LEN:
        return 1
    if DECODE_SPLITS > 0:
        return DECODE_SPLITS
    base = max(1, num_seqs * num_kv_heads)
    target = max(1, int(sms * SPLIT_TARGET_CTAS_PER_SM))
    if base >= target:
        return 1
    by_len = max(1, max_seq_len // max(tile, SPLIT_MIN_TOKENS_PER_SEG))
    by_len = 1 << (by_len.bit_length() - 1)  # round down to a power of two
    n = min(_pow2(-(-target // base)), by_len, SPLIT_MAX_SEGS)
    return n if n >= 2 else 1


def select_config(
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    num_seqs: int,
    max_query_len: int,
    max_seq_len: int,
    sms: int,
    num_splits: int | None = None,
    fp8: bool = False,
) -> AttnConfig:
    g = num_q_heads // num_kv_heads
    dp = max(16, _pow2(head_dim))
    if max_query_len <= SPLIT_MAX_QUERY_LEN:
        # Memory bound: small row blocks, moderate tiles, pipelined loads.
        block_m = max(16, min(64, _pow2(g * max_query_len)), _pow2(g))
        tile = DECODE_TILE if dp <= 128 else 16
        cfg = AttnConfig(block_m, tile, DECODE_WARPS, num_stages=3, k_rows=DEFAULT_K_ROWS)
    elif max_query_len * g <= 256:  # short chunks: smaller tiles, more programs
        block_m = max(64, _pow2(g))
        tile = 64 if dp <= 128 else 32
        cfg = AttnConfig(block_m, tile, num_warps=4, num_stages=3, k_rows=DEFAULT_K_ROWS)
    elif dp <= 128 and g <= 64:
        # Long prefills and budget-sized mixed steps (PREFILL_CONFIG).
        block_m, tile, warps, stages = PREFILL_CONFIG
        cfg = AttnConfig(max(block_m, _pow2(g)), tile, warps, stages, k_rows=DEFAULT_K_ROWS)
    else:
        block_m = max(128, _pow2(g))
        tile = 64 if dp <= 128 else 32
        warps = 8 if dp >= 128 else 4
        cfg = AttnConfig(block_m, tile, num_warps=warps, num_stages=2, k_rows=DEFAULT_K_ROWS)
    from strixlm.kernels.paged_decode import (
        MID_GRID_CTAS,
        MID_GRID_TILE,
        PERSISTENT_STAGES,
        mid_grid,
        persistent_segments,
        use_persistent,
    )

    ctas = 0
    if num_splits is None:
        # The persistent grid when it has enough items, splitting small batches; else the
        # unified kernel, split when its programs would leave SMs idle.
        segs = persistent_segments(
            num_seqs, num_kv_heads, max_query_len, max_seq_len, cfg.tile, sms, fp8
        )
        persistent = segs >= 1 and DECODE_SPLITS <= 0
        if persistent:
            num_splits = segs
            if not fp8 and dp <= 128 and mid_grid(num_seqs, num_kv_heads, max_query_len, sms):
                num_splits, ctas = 1, MID_GRID_CTAS
                cfg = replace(cfg, tile=MID_GRID_TILE)
        else:
            num_splits = choose_num_splits(
                num_seqs, num_kv_heads, max_query_len, max_seq_len, cfg.tile, sms
            )
    else:
        persistent = num_splits <= 1 and use_persistent(num_seqs, num_kv_heads, max_query_len, sms)
    return AttnConfig(
        cfg.block_m,
        cfg.tile,
        cfg.num_warps,
        PERSISTENT_STAGES if persistent else cfg.num_stages,
        max(1, num_splits),
        cfg.k_rows,
        persistent,
        ctas,  # only the persistent path sets it
    )


if HAS_TRITON:

    @triton.jit
    def _find_seq(qsl_ptr, q_block, num_seqs, BLOCK_Q: tl.constexpr):
        # Last sequence i with qsl[i] // BLOCK_Q + i <= q_block (its first query tile index).
        lo: tl.int32 = 0  # a tensor, not a constexpr: it is loop-carried
        hi = num_seqs
        while lo < hi:
            mid = (lo + hi) // 2
            start = tl.load(qsl_ptr + mid) // BLOCK_Q + mid
            if start <= q_block:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    # num_seqs changes every step: specializing on its value (== 1, divisible by 16) would
    # compile new variants in the middle of a run.
    @triton.jit(do_not_specialize=["num_seqs"])
    def _paged_attn_kernel(
        out_ptr,
        q_ptr,
        k_cache_ptr,
        v_cache_ptr,
        block_table_ptr,
        seq_lens_ptr,
        qsl_ptr,
        order_ptr,
        segm_acc_ptr,
        segm_max_ptr,
        segm_sum_ptr,
        k_new_ptr,
        v_new_ptr,
        qk_scale,
        out_scale,
        new_qk_scale,
        new_v_inv,
        num_seqs,
        stride_qt,
        stride_qh,
        stride_ot,
        stride_oh,
        stride_cb,
        stride_cs,
        stride_ch,
        stride_bt,
        stride_nt,
        stride_nh,
        NUM_Q_HEADS: tl.constexpr,
        G: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_Q: tl.constexpr,
        NUM_SEGS: tl.constexpr,
        SPLIT: tl.constexpr,
        IEEE: tl.constexpr,
        K_ROWS: tl.constexpr,
        SEQ_GRID: tl.constexpr,
        HAS_ORDER: tl.constexpr,
        FP8_PAIRS: tl.constexpr,
        PDL: tl.constexpr,
        EARLY: tl.constexpr = False,
        AHEAD: tl.constexpr = False,
        FRESH: tl.constexpr = False,
        SKIP_DECODES: tl.constexpr = False,
        PER_BLOCK: tl.constexpr = False,
    ):
        # FRESH (unsplit launches only): each sequence's new tokens are read from the step's
        # K / V rows (k_new_ptr / v_new_ptr, [T, Hkv, D]) and only its cached prefix from the
        # cache; new_qk_scale / new_v_inv replace the cache's scales for those rows.
        # EARLY: the sequence lookup (order, query_start_loc, seq_lens: step inputs written
        # before the previous kernel) runs before the PDL wait; q and K/V are read after it.
        if not EARLY:
            pdl_prologue(PDL)
        kv_head = tl.program_id(1)
        seg = tl.program_id(2)
        if SEQ_GRID:
            # Every sequence fits one query tile (decode, short verification): the program
            # index is the sequence, no search through query_start_loc.
            seq = tl.program_id(0)
            if HAS_ORDER:  # longest contexts first: the grid's tail is the short ones
                seq = tl.load(order_ptr + seq)
            q_start = tl.load(qsl_ptr + seq)
            q_len = tl.load(qsl_ptr + seq + 1) - q_start
            local = 0
            if q_len == 0:
                return
        else:
            # Reversed: the last query tiles see the most keys under the causal mask; start
            # them first so the tail of the grid is the cheap tiles.
            q_block = tl.num_programs(0) - 1 - tl.program_id(0)
            seq = _find_seq(qsl_ptr, q_block, num_seqs, BLOCK_Q)
            q_start = tl.load(qsl_ptr + seq)
            q_len = tl.load(qsl_ptr + seq + 1) - q_start
            local = q_block - (q_start // BLOCK_Q + seq)
            if local * BLOCK_Q >= q_len:
                return
            if SKIP_DECODES:  # a mixed step's decodes are another launch's
                if q_len == 1:
                    return
        seq_len = tl.load(seq_lens_ptr + seq)
        ctx_len = seq_len - q_len
        if EARLY:
            pdl_prologue(PDL)

        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, DIM_P)
        offs_t = tl.arange(0, TILE)
        q_pos = local * BLOCK_Q + offs_m // G
        head = kv_head * G + offs_m % G
        row_ok = (q_pos < q_len) & (offs_m < BLOCK_Q * G)
        q_abs = ctx_len + q_pos
        tok = (q_start + q_pos).to(tl.int64)
        d_ok = offs_d < HEAD_DIM
        io_mask = row_ok[:, None] & d_ok[None, :]
        q = load_q_rows(q_ptr, tok[:, None], head, stride_qt, stride_qh, offs_d, io_mask,
                        k_cache_ptr)  # fmt: skip

        # Keys this tile of queries may see, and the prefix every one of its rows sees.
        kv_end = tl.minimum(seq_len, ctx_len + (local + 1) * BLOCK_Q)
        n_tiles = tl.cdiv(kv_end, TILE)
        n_full = (ctx_len + local * BLOCK_Q + 1) // TILE
        lo = 0
        hi = n_tiles
        if SPLIT:
            per_seg = tl.cdiv(tl.cdiv(seq_len, TILE), NUM_SEGS)
            lo = seg * per_seg
            hi = tl.minimum(lo + per_seg, n_tiles)
        mid = tl.minimum(tl.maximum(n_full, lo), hi)
        new_end = kv_end
        if FRESH:
            # The cache loops below cover only the cached prefix [0, ctx_len), which every
            # row sees (masked only past its end); the new tokens come from their rows after.
            kv_end = ctx_len
            mid = ctx_len // TILE
            hi = tl.cdiv(ctx_len, TILE)

        bt_row_ptr = block_table_ptr + seq.to(tl.int64) * stride_bt
        head_off = kv_head * stride_ch
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = fresh_sums(BLOCK_M, TILE)
        acc = tl.zeros([BLOCK_M, DIM_P], dtype=tl.float32)
        # With AHEAD the loops carry the next tile's block ids (blocks_step); else a
        # placeholder that blocks_step passes through.
        blk_next = (
            tile_blocks(bt_row_ptr, lo, kv_end, offs_t, BLOCK_SIZE, TILE, True, PER_BLOCK)
            if AHEAD
            else lo
        )
        for j in range(lo, mid):
            blk, blk_next = blocks_step(
                blk_next, bt_row_ptr, j, kv_end, offs_t, BLOCK_SIZE, TILE, False, AHEAD, PER_BLOCK
            )  # fmt: skip
            acc, m_i, l_i = attn_step_blocks(
                acc, m_i, l_i, q, j, kv_end, q_abs, blk, k_cache_ptr, v_cache_ptr,
                head_off, stride_cb, stride_cs, qk_scale, offs_t, offs_d,
                HEAD_DIM, HEAD_DIM == DIM_P, BLOCK_SIZE, TILE, False, IEEE, K_ROWS, FP8_PAIRS,
                PER_BLOCK,
            )  # fmt: skip
        for j in range(mid, hi):
            blk, blk_next = blocks_step(
                blk_next, bt_row_ptr, j, kv_end, offs_t, BLOCK_SIZE, TILE, True, AHEAD, PER_BLOCK
            )  # fmt: skip
            acc, m_i, l_i = attn_step_blocks(
                acc, m_i, l_i, q, j, kv_end, q_abs, blk, k_cache_ptr, v_cache_ptr,
                head_off, stride_cb, stride_cs, qk_scale, offs_t, offs_d,
                HEAD_DIM, HEAD_DIM == DIM_P, BLOCK_SIZE, TILE, True, IEEE, K_ROWS, FP8_PAIRS,
                PER_BLOCK,
            )  # fmt: skip
        if FRESH:
            # The new tokens after the prefix (the online softmax does not depend on the
            # order; the cache's reads start first), with q reloaded in its own dtype so the
            # unquantized rows' dots need no conversion. Unmasked while every row sees the
            # whole tile, then causally masked.
            q = load_q_rows(q_ptr, tok[:, None], head, stride_qt, stride_qh, offs_d, io_mask,
                            k_cache_ptr, True)  # fmt: skip
            new_full = (local * BLOCK_Q + 1) // TILE
            k_rows_ptr = k_new_ptr + kv_head * stride_nh
            v_rows_ptr = v_new_ptr + kv_head * stride_nh
            for f in range(0, new_full):
                acc, m_i, l_i = attn_step_rows(
                    acc, m_i, l_i, q, f, new_end, q_abs, k_rows_ptr, v_rows_ptr,
                    q_start, ctx_len, stride_nt, new_qk_scale, new_v_inv, offs_t, offs_d,
                    HEAD_DIM, HEAD_DIM == DIM_P, TILE, False, IEEE,
                )  # fmt: skip
            for f in range(new_full, tl.cdiv(new_end - ctx_len, TILE)):
                acc, m_i, l_i = attn_step_rows(
                    acc, m_i, l_i, q, f, new_end, q_abs, k_rows_ptr, v_rows_ptr,
                    q_start, ctx_len, stride_nt, new_qk_scale, new_v_inv, offs_t, offs_d,
                    HEAD_DIM, HEAD_DIM == DIM_P, TILE, True, IEEE,
                )  # fmt: skip

        if SPLIT:  # an empty segment leaves max = -inf (its acc is never read)
            row = (tok * NUM_Q_HEADS + head) * NUM_SEGS + seg
            store_segment_partial(
                segm_acc_ptr, segm_max_ptr, segm_sum_ptr, row, row_ok, hi > lo, acc, m_i, l_i,
                offs_d, DIM_P,
            )  # fmt: skip
        else:
            store_out_rows(out_ptr, tok[:, None], head, stride_ot, stride_oh, offs_d, acc, l_i,
                           out_scale, io_mask)  # fmt: skip

    @triton.jit
    def _merge_segments_kernel(
        out_ptr,
        segm_acc_ptr,
        segm_max_ptr,
        segm_sum_ptr,
        out_scale,
        stride_ot,
        stride_oh,
        NUM_Q_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        DIM_P: tl.constexpr,
        NUM_SEGS: tl.constexpr,
        SEGS_P: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        offs_s = tl.arange(0, SEGS_P)
        offs_d = tl.arange(0, DIM_P)
        row = (t * NUM_Q_HEADS + h) * NUM_SEGS + offs_s
        s_ok = offs_s < NUM_SEGS
        m = tl.load(segm_max_ptr + row, mask=s_ok, other=float("-inf"))
        m_max = tl.max(m, axis=0)
        live = s_ok & (m > float("-inf"))
        w = tl.where(live, tl.exp2(m - m_max), 0.0)
        ssum = tl.sum(tl.load(segm_sum_ptr + row, mask=live, other=0.0) * w, axis=0)
        acc = tl.load(
            segm_acc_ptr + row[:, None] * DIM_P + offs_d[None, :],
            mask=live[:, None],
            other=0.0,
        )
        acc = tl.sum(acc * w[:, None], axis=0)
        # ssum == 0 only for rows outside every sequence (graph padding): write zeros there.
        res = acc * (out_scale / tl.where(ssum > 0.0, ssum, float("inf")))
        tl.store(
            out_ptr + t * stride_ot + h * stride_oh + offs_d,
            res.to(out_ptr.dtype.element_ty),
            mask=offs_d < HEAD_DIM,
        )


def paged_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    *,
    max_query_len: int,
    max_seq_len: int,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    config: AttnConfig | None = None,
    seq_order: torch.Tensor | None = None,
    qk_prologue: QKNormRopeWrite | None = None,
    k_new: torch.Tensor | None = None,
    v_new: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of q [T, Hq, D] over the paged cache; returns out [T, Hq, D].

    query_start_loc [B+1] int32 (non-decreasing; padded sequences have zero queries),
    seq_lens [B] int32, block_table [B, >= ceil(seq_len / block_size)] int32 — all device
    tensors. max_query_len / max_seq_len are host ints used only to pick the config (upper
    bounds are fine). num_splits: None = heuristic, 1 = never split, n > 1 = n segments.
    For an fp8 cache, k_scale / v_scale dequantize it (folded into the softmax / output).
    seq_order [B] (a permutation of the sequences, longest first) only orders the programs
    of the one-program-per-sequence grid; results do not depend on it.
    qk_prologue: q and the step's K/V are raw projections still to be normed, rotated and
    written to the cache: inside the persistent decode kernel when it runs unsplit (one
    launch fewer), else by the separate q/k norm + rotary launch first.
    k_new / v_new [T, Hkv, D]: the step's K / V as written to the cache (qk_prologue's
    after its launch, if not given). Over an fp8 cache the unified kernel reads each
    sequence's new tokens from them unquantized (fresh_rows), and only cached prefixes
    pay the fp8 conversion.
    """
    t, hq, d = q.shape
    _, _, bs, hkv, dc = kv_cache.shape
    assert dc == d and hq % hkv == 0, (q.shape, kv_cache.shape)
    assert q.stride(2) == 1 and kv_cache.stride(4) == 1
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # dense even if q is a view
    num_seqs = seq_lens.shape[0]
    if t == 0 or num_seqs == 0:
        return out
    cfg = config or select_config(
        hq, hkv, d, num_seqs, max_query_len, max_seq_len, num_sms(q.device), num_splits,
        kv_cache.dtype == FP8_DTYPE,
    )  # fmt: skip
    g = hq // hkv
    block_q = cfg.block_m // g
    assert block_q >= 1, "block_m must cover the GQA group"
    dim_p = max(16, _pow2(d))
    # max_query_len is an upper bound: when it fits one tile, one program per sequence.
    seq_grid = max_query_len <= block_q
    n_q_blocks = num_seqs if seq_grid else t // block_q + num_seqs
    split = cfg.num_splits > 1
    persistent = cfg.persistent and seq_grid and max_query_len == 1
    # fp8 decode: the Gluon kernel with explicit register layouts (paged_decode_fp8), whatever
    # grid the Triton config picked; its q/k prologue runs as its own launch first.
    gluon_fp8 = (
        kv_cache.dtype == FP8_DTYPE and config is None and num_splits is None
        and fp8_mma.supports(q, kv_cache, bs, num_seqs)
    )  # fmt: skip
    mma_fp8 = gluon_fp8 and seq_grid and max_query_len == 1
    # Mixed steps over fp8: their decodes on that kernel first, the rest on the unified one.
    mixed_fp8 = gluon_fp8 and not seq_grid and not split and fp8_mma.MIXED_SPLIT
    fuse_qk = (
        qk_prologue is not None
        and persistent
        and not mma_fp8
        and cfg.num_splits == 1
        and FUSED_QK_ENABLED
        and qk_prologue.fusable(q, kv_cache)
    )
    if qk_prologue is not None and not fuse_qk:
        qk_prologue.run(q, kv_cache)
        if k_new is None:
            k_new, v_new = qk_prologue.k, qk_prologue.v
    if mma_fp8:
        return fp8_mma.paged_decode_fp8(
            q, kv_cache, query_start_loc, seq_lens, block_table, scale, out,
            max_seq_len=max_seq_len, k_scale=k_scale, v_scale=v_scale, seq_order=seq_order,
        )  # fmt: skip
    if persistent:
        from strixlm.kernels.paged_decode import paged_decode_persistent

        return paged_decode_persistent(
            q, kv_cache, query_start_loc, seq_lens, block_table, scale, out,
            block_m=cfg.block_m, tile=cfg.tile, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, k_rows=cfg.k_rows, sms=num_sms(q.device),
            k_scale=k_scale, v_scale=v_scale, seq_order=seq_order, num_segs=cfg.num_splits,
            qk=qk_prologue if fuse_qk else None, ctas_per_sm=cfg.ctas_per_sm,
        )  # fmt: skip
    if mixed_fp8:
        fp8_mma.paged_decode_fp8(
            q, kv_cache, query_start_loc, seq_lens, block_table, scale, out,
            max_seq_len=max_seq_len, k_scale=k_scale, v_scale=v_scale, decodes_only=True,
        )  # fmt: skip
    if kv_cache.dtype != FP8_DTYPE:
        k_scale = v_scale = 1.0
    kc, vc = kv_cache[0], kv_cache[1]
    pdl = pdl_enabled(q)
    if split:
        segm_acc, segm_max, segm_sum = segment_buffers(t, hq, cfg.num_splits, dim_p, q.device)
    else:
        segm_acc = segm_max = segm_sum = out  # never touched; any pointer will do
    fresh = not split and not seq_grid and fresh_rows(q, kv_cache, k_new, v_new)
    pairs = fp8_pairs(q, kv_cache)
    if not fresh:
        k_new = v_new = q  # never read without FRESH
    _paged_attn_kernel[(n_q_blocks, hkv, cfg.num_splits)](
        out,
        q,
        kc,
        vc,
        block_table,
        seq_lens,
        query_start_loc,
        seq_order if seq_order is not None else seq_lens,  # unread without HAS_ORDER
        segm_acc,
        segm_max,
        segm_sum,
        k_new,
        v_new,
        float(scale * k_scale * LOG2E),
        float(v_scale),
        float(scale * LOG2E),
        1.0 / float(v_scale),
        num_seqs,
        *launch_strides(q, out, kc, block_table),
        k_new.stride(0),
        k_new.stride(1),
        NUM_Q_HEADS=hq,
        G=g,
        HEAD_DIM=d,
        DIM_P=dim_p,
        BLOCK_SIZE=bs,
        TILE=cfg.tile,
        BLOCK_M=cfg.block_m,
        BLOCK_Q=block_q,
        NUM_SEGS=cfg.num_splits,
        SPLIT=split,
        IEEE=q.dtype == torch.float32,
        K_ROWS=cfg.k_rows,
        SEQ_GRID=seq_grid,
        HAS_ORDER=seq_grid and seq_order is not None,
        FP8_PAIRS=pairs,
        PDL=pdl,
        EARLY=pdl and EARLY_LOADS,
        AHEAD=UNIFIED_AHEAD,
        FRESH=fresh,
        SKIP_DECODES=mixed_fp8,
        PER_BLOCK=per_block_tiles(cfg.tile, bs, pairs, kc, vc),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        launch_pdl=pdl,
    )
    if split:
        merge_segments(out, segm_acc, segm_max, segm_sum, float(v_scale), cfg.num_splits)
    return out


def segment_buffers(
    t: int, hq: int, segs: int, dim_p: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split-K partials: unnormalized rows [T, Hq, segs, DIM_P], running max and sum
    [T, Hq, segs], all float32."""
    acc = torch.empty((t, hq, segs, dim_p), dtype=torch.float32, device=device)
    mx = torch.empty((t, hq, segs), dtype=torch.float32, device=device)
    return acc, mx, torch.empty_like(mx)


def merge_segments(
    out: torch.Tensor,
    segm_acc: torch.Tensor,
    segm_max: torch.Tensor,
    segm_sum: torch.Tensor,
    out_scale: float,
    segs: int,
) -> None:
    """Combine the segments' partial rows into out [T, Hq, D] (one program per row)."""
    t, hq, d = out.shape
    dim_p = segm_acc.shape[-1]
    pdl = pdl_enabled(out)
    _merge_segments_kernel[(t, hq)](
        out,
        segm_acc,
        segm_max,
        segm_sum,
        out_scale,
        out.stride(0),
        out.stride(1),
        NUM_Q_HEADS=hq,
        HEAD_DIM=d,
        DIM_P=dim_p,
        NUM_SEGS=segs,
        SEGS_P=_pow2(segs),
        PDL=pdl,
        num_warps=4 if dim_p >= 128 else 2,
        launch_pdl=pdl,
    )


def launch_strides(q, out, k_cache, block_table) -> tuple[int, ...]:
    """stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs, stride_ch,
    stride_bt: the stride arguments both attention kernels take, in their order."""
    return (
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
    )  # fmt: skip


def paged_attention_ref(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    query_lens: list[int],
    seq_lens: list[int],
    block_table: torch.Tensor,
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Torch reference from host lengths (fp8 caches dequantized with the scales)."""
    _, _, bs, hkv, d = kv_cache.shape
    hq = q.shape[1]
    out = torch.zeros_like(q)
    fp8 = kv_cache.dtype == FP8_DTYPE
    raw = kv_cache.view(torch.uint8) if fp8 else kv_cache  # no fp8 gather on CPU
    start = 0
    for i, (qlen, slen) in enumerate(zip(query_lens, seq_lens, strict=True)):
        if qlen == 0:
            continue
        nblk = -(-slen // bs)
        bt = block_table[i, :nblk].long()
        kk, vv = (raw[i][bt].reshape(nblk * bs, hkv, d)[:slen] for i in (0, 1))
        if fp8:
            kk, vv = kk.view(FP8_DTYPE), vv.view(FP8_DTYPE)
        kk, vv = kk.float() * k_scale, vv.float() * v_scale
        kk = kk.repeat_interleave(hq // hkv, dim=1).transpose(0, 1)  # [Hq, S, D]
        vv = vv.repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        qq = q[start : start + qlen].float().transpose(0, 1)  # [Hq, L, D]
        s = (qq @ kk.transpose(1, 2)) * scale
        qpos = torch.arange(slen - qlen, slen, device=q.device)[:, None]
        s = s.masked_fill(torch.arange(slen, device=q.device)[None, :] > qpos, float("-inf"))
        out[start : start + qlen] = (s.softmax(-1) @ vv).transpose(0, 1).to(q.dtype)
        start += qlen
    return out


def fp8_pairs(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Read an fp8 cache as byte pairs with one packed convert (inline PTX, so compiled
    kernels only): a 16-bit q, an even head dim that fills its tile.

    Triton's own fp8 -> fp16 path moves each tile into the MMA operand layout a byte at a
    time. H200 (2026-12-04, bench_fp8_decode.py): decode attention over fp8 at the workload's
    batches 48-256 took 74-253 us with pairs against 87-286 without (bf16 caches: 74-265);
    the standard workload with fp8 KV ran 28,094-28,185 tok/s against 25,296-25,413.
    check_attention.py matches torch with it in decode, chunked prefill and mixed steps.
    """
    d = q.shape[-1]
    return (
        kv_cache.dtype == FP8_DTYPE
        and FP8_PAIRS_ENABLED
        and q.dtype != torch.float32
        and d == max(16, _pow2(d))
        and not interpreter_active()
    )


def fresh_rows(
    q: torch.Tensor, kv_cache: torch.Tensor, k_new: torch.Tensor | None, v_new: torch.Tensor | None
) -> bool:
    """Read a step's own K / V rows instead of the cache (the unified kernel, unsplit):
    over fp8 caches, where each cache tile costs a conversion that a prompt's
    compute-bound attention pays once per query tile; rows in q's dtype, [T, Hkv, D]
    with k and v strided alike."""
    return (
        FP8_FRESH_ENABLED
        and kv_cache.dtype == FP8_DTYPE
        and k_new is not None
        and v_new is not None
        and k_new.dtype == v_new.dtype == q.dtype
        and k_new.shape == v_new.shape == (q.shape[0], kv_cache.shape[3], q.shape[2])
        and k_new.stride() == v_new.stride()
        and k_new.stride(2) == 1
    )


def interpreter_active() -> bool:
    """True when the kernels were built for the Triton interpreter (so CPU tensors work).

    Decided at import time by TRITON_INTERPRET, hence checked on the kernel object itself.
    """
    return HAS_TRITON and type(_paged_attn_kernel).__name__ == "InterpretedFunction"
