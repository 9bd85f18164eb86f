"""Persistent decode attention: one flat loop over many sequences per program.

The unified kernel (paged_attention.py) gives each (sequence, kv head) its own program: at
decode, thousands of short programs, each paying a start-up chain (sequence index ->
lengths -> block table -> K/V, dependent loads) before its first tile streams and a drain
after its last. Here a fixed grid of P programs per kv head (one wave: four per SM) shares
the sequences out, and each program walks all KV tiles of all its sequences as ONE loop:
iteration t finds its sequence and tile from a prefix sum of tile counts held in registers,
and the tile's cache block ids were loaded one iteration earlier (BLOCKS_AHEAD), so no K / V
address waits on a load of its own iteration and the software pipeliner double-buffers K /
V (cp.async) across sequence boundaries. After a sequence's last tile its row is normalized
and stored and the online-softmax state restarts. The per-tile math is the unified kernel's
`attn_step_blocks` in the same tile order: identical results under the interpreter;
compiled, the two loops may round differently (within bf16 tolerance on the H200).

Sequences are dealt to programs in a snake over the longest-first order (ranks p, 2P-1-p,
2P+p, ...) so that every program gets a similar number of tiles. Smaller batches (fewer
sequences than ~1.25 per program) split each sequence into NUM_SEGS segments of tiles and
deal the (sequence, segment) items instead; each segment writes a partial row (unnormalized
output, running max and sum) that paged_attention's merge kernel combines, as the unified
kernel's split path does.

The shortest sequences (DYNAMIC_FRAC of them) are not dealt: their items go one at a time,
through a per-head atomic counter, to whichever program has finished its dealt tiles, each
walked by its own loop over its tiles (bit-equal to the dealt walk).

Decode only: each sequence has 0 (graph padding, skipped) or 1 query token. The grid and
MAX_ITEMS depend only on host ints, so the launch is CUDA-graph safe with padded batches.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.attn_tiles import per_block_tiles
from strixlm.kernels.env_knobs import env_float, env_int
from strixlm.kernels.kv_write import FP8_DTYPE, HAS_TRITON
from strixlm.kernels.paged_attention import (
    LOG2E,
    _pow2,
    fp8_pairs,
    launch_strides,
    merge_segments,
    segment_buffers,
)
from strixlm.kernels.pdl import pdl_enabled
from strixlm.kernels.qk_norm_rope import QKNormRopeWrite

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.attn_tiles import (
        attn_step_blocks,
        blocks_step,
        fresh_sums,
        load_q_rows,
        store_out_rows,
        store_segment_partial,
        tile_blocks,
    )
    from strixlm.kernels.pdl import pdl_prologue
    from strixlm.kernels.qk_norm_rope import norm_rope_decode_items

    try:
        from triton.language.extra.cuda import globaltimer, smid
    except ImportError:  # only the timeline benchmark's TIMING variant needs them
        globaltimer = smid = None

# Programs per SM: four 2-warp programs fill an SM at tile 64 (registers); five or six
# spill into a second wave. At tile 32 with K / V double-buffered, five ran 28% slower than
# four (session 29, bench_decode_timeline.py --workload); at 180 registers (session 42)
# still 20% slower (1,057.5 vs 877.5 us over six workload batches), and one-warp programs
# at five or six an SM 6-8% slower (928.7 / 949.2 us). See also MID_GRID_* below.
# H200, sweep_decode_attn.py --persistent (2026-12-01): 4/SM beat the unified kernel by
# 2-10% from batch 128 up, 2-3/SM lost 5-25%, and at batch 64 (one sequence per program) it
# lost 7%.
# One kv head a program. Two (each token's two heads read as one 512-byte run, the other
# head's scores masked; 7c31484, reverted) were slower at every workload batch in five
# tile / warp / per-SM configs: b256 167.2 us one head, 168.4-191.9 two; workload -3%
# (H200, session 31, bench_decode_timeline.py --workload).
PERSISTENT_CTAS_PER_SM = env_int("STRIXLM_ATTN_PERSISTENT_CTAS", 4)
# Over fp8 caches the kernel is latency bound at four programs an SM (218 registers a
# thread, 8 warps an SM, 0.54 eligible warps a scheduler: ncu_fp8_decode.py). Six, with
# registers capped at 168 so that they fit: H200 (2026-12-04, bench_fp8_decode.py
# --occupancy) 252 -> 229 us at b256, 183 -> 159 at b200, even at b128; the two-segment
# grids at b64 / b48 went 88.0 -> 86.5 / 74.2 -> 82.3 us (bench_fp8_decode.py, the default
# path); the standard workload with fp8 KV 28,201-28,209 -> 29,346-29,374 tok/s
# (alternating runs). 0 keeps the bf16 grid / no cap (A/B runs; read at import).
FP8_CTAS_PER_SM = env_int("STRIXLM_ATTN_FP8_CTAS", 6)
FP8_MAXNREG = env_int("STRIXLM_ATTN_FP8_MAXNREG", 168)
# The six-program grid pays only when its programs get ~1.3 items (sequences or segments)
# or more each; with about one apiece the longest item sets the launch, and the bf16 grid
# (four an SM, no cap) is faster. H200 (2026-12-04, bench_fp8_decode.py --grids), by items
# per six-grid program, six-grid vs bf16 grid: 1.0 (b48 split, b96) 84.7 / 144.5 us vs
# 78.0 / 122.0; 1.13-1.29 (b56, b64 split) 82.5 / 83.9 vs 82.3 / 84.0, (b128) 148.3 vs
# 143.3; 1.45-1.6 (b72, b80 split) 92.1 / 94.9 vs 105.0 / 107.8; session 37's b200 / b256
# (2.0-2.6) 158.7 / 229.0 vs 183.3 / 252.3. The fp8 workload: 29,338-29,353 -> 29,545-29,570.
FP8_GRID_MIN_ITEMS = env_float("STRIXLM_ATTN_FP8_GRID_MIN", 1.3)
# Batches the persistent grid would run unsplit are split in two over fp8 caches below this
# many sequences a six-grid program: twice the items, so fp8_grid takes the six-program
# grid, for a merge launch. H200 (2026-12-04, bench_fp8_decode.py --grids), unsplit at the
# best grid vs two segments on the six-grid: b96 121.4 vs 106.6 us, b128 142.7 vs 135.4,
# b160 (1.62 a program) 153.8 vs 148.3, b192 (1.94) 165.7 vs 172.3; the standard workload
# with fp8 KV 29,534-29,557 -> 30,070-30,131 tok/s (alternating). 0: never.
FP8_SPLIT_BELOW = env_float("STRIXLM_ATTN_FP8_SPLIT_BELOW", 1.8)
# STRIXLM_ATTN_PERSISTENT=0 keeps the unified kernel, for A/B runs (read once, at import).
PERSISTENT_ENABLED = os.environ.get("STRIXLM_ATTN_PERSISTENT", "1") != "0"
# Use it unsplit when programs get at least this many sequences on average (batch 83 with
# Qwen3-0.6B's 8 kv heads on 132 SMs). H200, sweep_decode_attn --split-persistent
# (2026-12-01): x1.125 against the unified kernel at batch 96 and 115 (1.45 / 1.74 per
# program), x0.92 at batch 64 (0.97).
PERSISTENT_MIN_ITEMS = env_float("STRIXLM_ATTN_PERSISTENT_MIN", 1.25)
# Each tile used to load its own block ids, and Triton then kept K / V single-buffered at
# any stage count (2 stages timed 1-2% better than 3). With the ids a tile ahead
# (STRIXLM_ATTN_BLOCKS_AHEAD, default on), 3 stages double-buffer K / V by cp.async: at
# 32-token tiles that is 42 KB of shared memory a program, four an SM. The workload gain
# came with the unified kernel's switch too (see paged_attention.DECODE_TILE).
# STRIXLM_ATTN_PERSISTENT_STAGES sets the stages (both read at import, for A/B runs).
BLOCKS_AHEAD = os.environ.get("STRIXLM_ATTN_BLOCKS_AHEAD", "1") == "1"
# With BLOCKS_AHEAD the dealt loop also looks its items up only where one ends: a per-tile
# lookup is ~11 reductions across the program's warps (12 bar.sync a tile in the sm90 PTX
# at tile 32). H200 (2026-12-03, session 30), against the per-tile lookup with the ids
# ahead (removed since): 896.6 vs 909.9 us over six workload batches, and the workload
# +0.08% to +0.34% in four alternating pairs on two machines (+0.18% on average).
PERSISTENT_STAGES = env_int("STRIXLM_ATTN_PERSISTENT_STAGES", 3)
# With BLOCKS_AHEAD, the dealt loop loads an item's q rows once, where the item starts (not
# at every tile: a q tile through shared memory and its ldmatrix each time), and restarts
# only the running max at item ends, not the accumulator and sum (the next tile's rescale
# by exp2(-inf) = 0 clears them exactly): 571 -> 545 SASS instructions a tile on the common
# path (sm90). H200 (session 40), the bf16 workload alternating: 28,318-28,463 tok/s in four
# runs against 28,247-28,318 in six. STRIXLM_ATTN_LEAN_LOOP=0 keeps the per-tile q and
# resets (read at import).
LEAN_LOOP = os.environ.get("STRIXLM_ATTN_LEAN_LOOP", "1") == "1"
# With the lean loop, and where the dealt items' q rows all fit the q tile (MAX_ITEMS * G <=
# BLOCK_M: Qwen3-0.6B's two q heads a kv head and the usual one or two dealt items), every
# item keeps its own rows of the tile and softmax state, and a tile's scores count only in
# its item's rows. q is then loop invariant: sm90 SASS of the persistent tile
# (benchmarks/sass_tile_loop.py) loses the per-tile repacking of the carried q for the MMA.
# Alone it is about even a launch on the H200 (+0.2%, session 47); with CAUSAL_SCORES and
# attn_tiles.DEFER_SUM see below. STRIXLM_ATTN_ITEM_ROWS=0 keeps the lean loop's carried q
# (read at import).
ITEM_ROWS = os.environ.get("STRIXLM_ATTN_ITEM_ROWS", "1") == "1"
# Scores masked by the causal limit alone (the K / V loads keep the length test): a decode
# row's limit is its sequence's last position, so the length test adds nothing to it, and
# with ITEM_ROWS the limit is what keeps other items' rows out. sm90 SASS of the tile: 480
# -> 472 instructions, and 434 -> 421 with ITEM_ROWS and attn_tiles.DEFER_SUM. H200
# (session 47): alone, without ITEM_ROWS, 13% slower a launch (as session 41's opposite
# trim); the three cuts together 0.6% faster a launch than none, and the bf16 workload
# with all three 28,910-28,922 tok/s in four runs against 28,864-28,893 with DEFER_SUM
# alone, alternating. So it applies only where the item rows do (the launcher);
# STRIXLM_ATTN_CAUSAL_SCORES=0 keeps the length test in the mask (read at import).
CAUSAL_SCORES = os.environ.get("STRIXLM_ATTN_CAUSAL_SCORES", "1") == "1"
# From this many sequences per program up to PERSISTENT_MIN_ITEMS, two segments per
# sequence (x1.02 at batch 48 and 64 in the same sweep; four or more segments lost 1-10%
# there, and below batch 33 the unified kernel's own split won). 0 disables the split.
PERSISTENT_SPLIT_MIN_ITEMS = env_float("STRIXLM_ATTN_PERSISTENT_SPLIT_MIN", 0.6)
# Mid batches: from MID_GRID_MIN to MID_GRID_MAX sequences a default-grid program (b66-b95
# for Qwen3-0.6B's 8 kv heads on 132 SMs), where the default grid runs ~one sequence a
# program (split in two below 1.25), the grid takes MID_GRID_CTAS programs an SM with
# MID_GRID_TILE-token tiles, unsplit: each program walks 1.35-1.9 sequences in half as many
# tiles. H200 (session 42, bench_decode_timeline.py --workload, us a launch, default vs
# 64-token tiles at three an SM): b98 119.9 vs 119.6, b93 118.0 / 115.7, b85 113.7 / 108.4,
# b78 108.5 / 101.0, b71 104.2 / 96.2, b63 86.6 / 89.8; from b105 up the default grid wins
# (b110 128.2 vs 136.7, b129 142.7 / 144.6). The bf16 workload, alternating: 28,265-28,309
# vs 28,179-28,233 tok/s (+0.29%) on one machine, 28,066-28,216 vs 28,081-28,138 (+0.16%)
# on another. bf16 / fp16 caches only (fp8 has fp8_grid).
# STRIXLM_ATTN_MID_GRID=0 turns it off (read at import, for A/B runs).
MID_GRID_ENABLED = os.environ.get("STRIXLM_ATTN_MID_GRID", "1") != "0"
MID_GRID_MIN = env_float("STRIXLM_ATTN_MID_GRID_MIN", 1.0)
MID_GRID_MAX = env_float("STRIXLM_ATTN_MID_GRID_MAX", 1.45)
MID_GRID_CTAS = env_int("STRIXLM_ATTN_MID_GRID_CTAS", 3)
MID_GRID_TILE = env_int("STRIXLM_ATTN_MID_GRID_TILE", 64)
# Share of the sequences (the shortest, last in the longest-first order) whose items are
# handed out dynamically instead of dealt (0 = all dealt). bench_decode_timeline.py (H200,
# 2026-12-01): with a static deal programs ended 13-58 us apart within 130-270 us launches,
# even with identical tiles each (busy / span 0.87-0.96).
DYNAMIC_FRAC = env_float("STRIXLM_ATTN_DYNAMIC_FRAC", 0.6)
_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def dynamic_counters(device: torch.device, num_kv_heads: int) -> torch.Tensor | None:
    """int32 [2 * heads] zeros: per kv head, the next dynamic sequence and the programs
    done; each launch leaves them at zero again, so launches share them one after another
    (not concurrently: two streams running the grid at once would race). Allocated once
    per device, outside any CUDA graph capture: during a capture (before any eager call,
    which the runners' warm-ups make first) there are none and the grid deals everything."""
    key = (torch.device(device), num_kv_heads)
    if key not in _COUNTERS:
        if torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None  # a zeroing inside the graph would not run before eager calls
        _COUNTERS[key] = torch.zeros(2 * num_kv_heads, dtype=torch.int32, device=device)
    return _COUNTERS[key]


def dynamic_count(num_seqs: int, dynamic_frac: float | None = None) -> int:
    """Sequences whose items (the sequence, or its segments) are handed out dynamically."""
    frac = DYNAMIC_FRAC if dynamic_frac is None else dynamic_frac
    if frac <= 0:
        return 0
    return min(num_seqs, int(num_seqs * frac))


def persistent_programs(
    num_seqs: int, num_kv_heads: int, sms: int, ctas_per_sm: int | None = None
) -> int:
    """Programs per kv head (P): ctas_per_sm (None or 0: PERSISTENT_CTAS_PER_SM) per SM in
    all, at most one per sequence."""
    return max(1, min(num_seqs, full_grid(num_kv_heads, sms, ctas_per_sm)))


def full_grid(num_kv_heads: int, sms: int, ctas_per_sm: int | None = None) -> int:
    """Programs per kv head of a full grid, uncapped by the batch: ctas_per_sm (None or 0:
    PERSISTENT_CTAS_PER_SM) per SM in all. Batches are sized against it in sequences a
    program."""
    ctas = ctas_per_sm or PERSISTENT_CTAS_PER_SM
    return max(1, (sms * ctas) // max(1, num_kv_heads))


def fp8_grid(items: int, num_kv_heads: int, sms: int) -> tuple[int | None, int]:
    """(programs per SM for persistent_programs, register cap; 0: none) of a launch of
    this many items per kv head over an fp8 cache: FP8_CTAS_PER_SM capped at FP8_MAXNREG
    when each of those programs gets FP8_GRID_MIN_ITEMS items or more, else the bf16 grid."""
    ctas = FP8_CTAS_PER_SM
    if ctas and items >= FP8_GRID_MIN_ITEMS * persistent_programs(items, num_kv_heads, sms, ctas):
        return ctas, FP8_MAXNREG
    return None, 0


def mid_grid(num_seqs: int, num_kv_heads: int, max_query_len: int, sms: int) -> bool:
    """Whether a decode batch takes the mid-batch grid (MID_GRID_CTAS programs an SM,
    MID_GRID_TILE-token tiles, unsplit): MID_GRID_MIN <= sequences a default-grid program
    (uncapped by the batch) < MID_GRID_MAX."""
    if not (MID_GRID_ENABLED and PERSISTENT_ENABLED) or max_query_len != 1:
        return False
    full = full_grid(num_kv_heads, sms)
    return MID_GRID_MIN * full <= num_seqs < MID_GRID_MAX * full


def use_persistent(num_seqs: int, num_kv_heads: int, max_query_len: int, sms: int) -> bool:
    """The persistent grid without splitting: ~2 or more sequences per program."""
    if max_query_len != 1 or not PERSISTENT_ENABLED:
        return False
    p = persistent_programs(num_seqs, num_kv_heads, sms)
    return num_seqs >= PERSISTENT_MIN_ITEMS * p


def persistent_segments(
    num_seqs: int,
    num_kv_heads: int,
    max_query_len: int,
    max_seq_len: int,
    tile: int,
    sms: int,
    fp8: bool = False,
) -> int:
    """Segments per sequence for the persistent grid: 1 (no split), 2, or 0 (use the
    unified kernel). Host ints only, fixed per captured shape; segments stay >= 2 tiles
    long at max_seq_len (the padded upper bound under graph capture). fp8: the cache is
    fp8, whose batches split below FP8_SPLIT_BELOW items a six-grid program."""
    if max_query_len != 1 or not PERSISTENT_ENABLED:
        return 0
    can_split = PERSISTENT_SPLIT_MIN_ITEMS > 0 and max_seq_len >= 4 * tile
    if use_persistent(num_seqs, num_kv_heads, max_query_len, sms):
        if fp8 and can_split and FP8_CTAS_PER_SM:
            fp8_programs = persistent_programs(num_seqs, num_kv_heads, sms, FP8_CTAS_PER_SM)
            if num_seqs < FP8_SPLIT_BELOW * fp8_programs:
                return 2
        return 1
    full = full_grid(num_kv_heads, sms)
    if not can_split or num_seqs < PERSISTENT_SPLIT_MIN_ITEMS * full:
        return 0
    return 2


if HAS_TRITON:

    @triton.jit
    def _tile_item(t, idx, seqs, lens, j_base, ends, q_lo, segs):
        # The item that holds the program's dealt tile t (the first whose end passes t): its
        # sequence, length, tile base (its tile t is tile t - base of the sequence), end (one
        # past its last t), query token, segment and index among the program's items; zeros
        # past the program's items (the index: their count).
        i = tl.sum((ends <= t).to(tl.int32), axis=0)
        sel = idx == i
        return (
            tl.sum(tl.where(sel, seqs, 0), axis=0),
            tl.sum(tl.where(sel, lens, 0), axis=0),
            tl.sum(tl.where(sel, j_base, 0), axis=0),
            tl.sum(tl.where(sel, ends, 0), axis=0),
            tl.sum(tl.where(sel, q_lo, 0), axis=0),
            tl.sum(tl.where(sel, segs, 0), axis=0),
            i,
        )

    @triton.jit
    def _decode_limit(seq_len, BLOCK_M: tl.constexpr):
        # The causal limit of a decode row (its one query at the last position). Masking by
        # the length test alone, with no limit, was 13% slower a launch (H200, session 42).
        return tl.zeros([BLOCK_M], dtype=tl.int32) + (seq_len - 1)

    @triton.jit
    def _fresh_state(BLOCK_M: tl.constexpr, DIM_P: tl.constexpr, TILE: tl.constexpr):
        # (acc, running max, sums) before a sequence's first tile.
        acc = tl.zeros([BLOCK_M, DIM_P], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        return acc, m_i, fresh_sums(BLOCK_M, TILE)

    @triton.jit(do_not_specialize=["num_seqs", "n_static"])
    def _paged_decode_persistent_kernel(
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
        qk_scale,
        out_scale,
        num_seqs,
        n_static,
        ctr_ptr,
        stride_qt,
        stride_qh,
        stride_ot,
        stride_oh,
        stride_cb,
        stride_cs,
        stride_ch,
        stride_bt,
        # The fused q/k norm + rotary + K/V write (FUSE_QK): see qk_norm_rope.QKNormRopeWrite.
        k_ptr,
        v_ptr,
        pos_ptr,
        slot_ptr,
        qw_ptr,
        kw_ptr,
        cos_ptr,
        sin_ptr,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        pos_stride,
        cos_stride,
        sin_stride,
        qk_eps,
        k_scale,
        v_scale,
        timing_ptr,
        NUM_Q_HEADS: tl.constexpr,
        G: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        MAX_ITEMS: tl.constexpr,
        NUM_SEGS: tl.constexpr,
        IEEE: tl.constexpr,
        K_ROWS: tl.constexpr,
        HAS_ORDER: tl.constexpr,
        FP8_PAIRS: tl.constexpr,
        FUSE_QK: tl.constexpr,
        BLOCK_G: tl.constexpr,
        HALF: tl.constexpr,
        FP8: tl.constexpr,
        TIMING: tl.constexpr,
        DYNAMIC: tl.constexpr,
        PDL: tl.constexpr,
        AHEAD: tl.constexpr = False,
        LEAN: tl.constexpr = False,
        PER_BLOCK: tl.constexpr = False,
        ITEM_ROWS: tl.constexpr = False,
        CAUSAL: tl.constexpr = False,
    ):
        p = tl.program_id(0)
        n_prog = tl.num_programs(0)
        kv_head = tl.program_id(1)
        if TIMING:  # a benchmark's timeline of the programs (bench_decode_timeline.py)
            t_start = globaltimer()

        # This program's items (snake over the longest-first order of the first n_static
        # sequences; an item is a sequence, or one of its NUM_SEGS segments) and their tile
        # ranges [los, los + tiles). The rest (DYNAMIC) go to whichever program is free.
        idx = tl.arange(0, MAX_ITEMS)
        rank = idx * n_prog + tl.where(idx % 2 == 0, p, n_prog - 1 - p)
        item_ok = rank < n_static * NUM_SEGS
        seq_rank = rank // NUM_SEGS
        segs = rank % NUM_SEGS
        if HAS_ORDER:
            seqs = tl.load(order_ptr + seq_rank, mask=item_ok, other=0)
        else:
            seqs = seq_rank
        q_lo = tl.load(qsl_ptr + seqs, mask=item_ok, other=0)
        q_hi = tl.load(qsl_ptr + seqs + 1, mask=item_ok, other=0)
        live = item_ok & (q_hi > q_lo)  # graph padding has no query: no tiles
        lens = tl.load(seq_lens_ptr + seqs, mask=live, other=0)
        n_tiles = tl.cdiv(lens, TILE)
        per_seg = tl.cdiv(n_tiles, NUM_SEGS)
        los = segs * per_seg
        tiles = tl.where(live, tl.maximum(tl.minimum(los + per_seg, n_tiles) - los, 0), 0)
        ends = tl.cumsum(tiles, axis=0)
        firsts = ends - tiles
        total = tl.sum(tiles, axis=0)
        # The deal reads only the step's inputs, written before the previous kernel (which
        # waited for them before it let this one start): the wait for the previous
        # kernel's q and K/V comes after it.
        pdl_prologue(PDL)

        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, DIM_P)
        offs_t = tl.arange(0, TILE)
        head = kv_head * G + offs_m % G
        row_ok = offs_m < G  # one query token: rows G.. are padding of the MMA tile
        io_mask_d = (offs_d < HEAD_DIM)[None, :]
        io_mask = row_ok[:, None] & io_mask_d
        if NUM_SEGS > 1:
            # Empty segments (short sequences) never reach a last tile: mark them empty for
            # the merge here (max -inf, sum 0), as the unified kernel's empty segments do.
            rows = (q_lo.to(tl.int64)[:, None] * NUM_Q_HEADS + head[None, :]) * NUM_SEGS
            rows += segs[:, None]
            empty = (live & (tiles == 0))[:, None] & row_ok[None, :]
            tl.store(segm_max_ptr + rows, float("-inf"), mask=empty)
            tl.store(segm_sum_ptr + rows, 0.0, mask=empty)
        if FUSE_QK:
            # This program owns its sequences' q heads of this kv head and their new K/V
            # (NUM_SEGS is 1): prepare them before any tile is read, then a barrier so
            # every thread of the program sees the stores (the tile loop reads them back).
            norm_rope_decode_items(
                q_ptr, k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, qw_ptr,
                kw_ptr, cos_ptr, sin_ptr, q_lo.to(tl.int64), live, kv_head, stride_qt,
                stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, pos_stride, cos_stride,
                sin_stride, qk_eps, k_scale, v_scale, stride_cb, stride_cs, stride_ch,
                G, BLOCK_G, HALF, BLOCK_SIZE, FP8,
            )  # fmt: skip
            tl.debug_barrier()
        head_off = kv_head * stride_ch
        # The lean loop (items looked up ahead): q rows loaded where an item starts, not per
        # tile, and only the running max reset where one ends.
        LEAN_ITEMS: tl.constexpr = LEAN and AHEAD
        # ITEM_ROWS (the launcher checks MAX_ITEMS * G <= BLOCK_M): every dealt item's q rows
        # in the one q tile, item i at rows [i * G, (i + 1) * G), each row keeping its own
        # softmax state; a tile's scores count only in its item's rows (q_abs -1 elsewhere).
        # q is then loop invariant (no reload, no per-tile repacking for the MMA) and no row
        # restarts at item ends.
        ALL_ROWS: tl.constexpr = LEAN_ITEMS and ITEM_ROWS
        row_item = offs_m // G
        acc, m_i, l_i = _fresh_state(BLOCK_M, DIM_P, TILE)
        j_base = firsts - los
        if AHEAD:
            # The current item's fields and the next one's (the first with tiles after it),
            # looked up again only where an item ends: each lookup is a few reductions across
            # the program's warps, which the per-tile lookup below pays at every tile.
            c_seq, c_len, c_jb, c_end, c_tok, c_seg, c_idx = _tile_item(
                0, idx, seqs, lens, j_base, ends, q_lo, segs
            )  # fmt: skip
            n_seq, n_len, n_jb, n_end, n_tok, n_seg, n_idx = _tile_item(
                c_end, idx, seqs, lens, j_base, ends, q_lo, segs
            )  # fmt: skip
            blk_next = tile_blocks(
                block_table_ptr + c_seq.to(tl.int64) * stride_bt, 0 - c_jb,
                tl.where(total > 0, c_len, 0), offs_t, BLOCK_SIZE, TILE, True, PER_BLOCK,
            )  # fmt: skip
            if ALL_ROWS:  # every item's q rows (zeros for rows of no item with a query)
                pick = row_item[:, None] == idx[None, :]
                row_tok = tl.sum(tl.where(pick, q_lo[None, :], 0), axis=1)
                row_live = tl.sum(tl.where(pick, live.to(tl.int32)[None, :], 0), axis=1) > 0
                q = load_q_rows(q_ptr, row_tok.to(tl.int64)[:, None], head, stride_qt,
                                stride_qh, offs_d, row_live[:, None] & io_mask_d,
                                k_cache_ptr)  # fmt: skip
            elif LEAN_ITEMS:  # the first item's q rows (zeros if there is none)
                q = load_q_rows(q_ptr, c_tok.to(tl.int64), head, stride_qt, stride_qh, offs_d,
                                io_mask & (total > 0), k_cache_ptr)  # fmt: skip
        for t in range(0, total):
            if AHEAD:
                if t == c_end:  # the next item starts: shift, and look up the one after it
                    c_seq, c_len, c_jb, c_end = n_seq, n_len, n_jb, n_end
                    c_tok, c_seg, c_idx = n_tok, n_seg, n_idx
                    n_seq, n_len, n_jb, n_end, n_tok, n_seg, n_idx = _tile_item(
                        c_end, idx, seqs, lens, j_base, ends, q_lo, segs
                    )  # fmt: skip
                    if LEAN_ITEMS and not ALL_ROWS:
                        q = load_q_rows(q_ptr, c_tok.to(tl.int64), head, stride_qt, stride_qh,
                                        offs_d, io_mask, k_cache_ptr)  # fmt: skip
            else:  # the item of tile t, looked up at every tile
                c_seq, c_len, c_jb, c_end, c_tok, c_seg, c_idx = _tile_item(
                    t, idx, seqs, lens, j_base, ends, q_lo, segs
                )  # fmt: skip
            seq = c_seq
            seq_len = c_len
            j = t - c_jb
            last = t == c_end - 1
            tok = c_tok.to(tl.int64)
            if not LEAN_ITEMS:
                q = load_q_rows(q_ptr, tok, head, stride_qt, stride_qh, offs_d, io_mask,
                                k_cache_ptr)  # fmt: skip
            if ALL_ROWS:  # only this item's rows see the tile
                q_abs = tl.where(row_item == c_idx, seq_len - 1, -1)
            else:
                q_abs = _decode_limit(seq_len, BLOCK_M)
            if AHEAD:
                # The next tile's cache blocks (this item's next, or the next item's first):
                # tile t's K / V addresses then depend on no load of this iteration, and the
                # pipeliner multi-buffers them.
                blk = blk_next
                blk_next = tile_blocks(
                    block_table_ptr + tl.where(last, n_seq, c_seq).to(tl.int64) * stride_bt,
                    tl.where(last, t + 1 - n_jb, j + 1),
                    tl.where(t + 1 < total, tl.where(last, n_len, c_len), 0), offs_t,
                    BLOCK_SIZE, TILE, True, PER_BLOCK,
                )  # fmt: skip
            else:
                bt_row_ptr = block_table_ptr + seq.to(tl.int64) * stride_bt
                blk = tile_blocks(bt_row_ptr, j, seq_len, offs_t, BLOCK_SIZE, TILE, True, PER_BLOCK)
            acc, m_i, l_i = attn_step_blocks(
                acc, m_i, l_i, q, j, seq_len, q_abs, blk, k_cache_ptr, v_cache_ptr, head_off,
                stride_cb, stride_cs, qk_scale, offs_t, offs_d, HEAD_DIM, HEAD_DIM == DIM_P,
                BLOCK_SIZE, TILE, True, IEEE, K_ROWS, FP8_PAIRS,
                PER_BLOCK, not CAUSAL,
            )  # fmt: skip
            if last:
                if ALL_ROWS:
                    mine = row_item == c_idx
                else:
                    mine = row_ok
                if NUM_SEGS > 1:  # a partial row for the merge, in the unified layout
                    row = (tok * NUM_Q_HEADS + head) * NUM_SEGS + c_seg
                    store_segment_partial(
                        segm_acc_ptr, segm_max_ptr, segm_sum_ptr, row, mine, True, acc, m_i,
                        l_i, offs_d, DIM_P,
                    )  # fmt: skip
                else:
                    store_out_rows(out_ptr, tok, head, stride_ot, stride_oh, offs_d, acc, l_i,
                                   out_scale, mine[:, None] & io_mask_d)  # fmt: skip
            if LEAN_ITEMS:
                # Only the running max restarts (with ALL_ROWS nothing does: a row holds one
                # item): the next tile's rescale factor is then exp2(-inf) = 0, which clears
                # acc and l_i exactly (no selects for them).
                if not ALL_ROWS:
                    m_i = tl.where(last, float("-inf"), m_i)
            else:
                acc = tl.where(last, 0.0, acc)
                m_i = tl.where(last, float("-inf"), m_i)
                l_i = tl.where(last, 0.0, l_i)
        if DYNAMIC:
            # The shortest sequences' items, one at a time, to the programs as they come
            # free: programs with the same tiles end ~10% of a launch apart on the H200 (SMs
            # run at different speeds), so a static deal alone ends with idle programs.
            heads = tl.num_programs(1)
            i = tl.atomic_add(ctr_ptr + kv_head, 1, sem="relaxed")
            while i < (num_seqs - n_static) * NUM_SEGS:
                r = n_static + i // NUM_SEGS
                if HAS_ORDER:
                    seq = tl.load(order_ptr + r)
                else:
                    seq = r
                tok_lo = tl.load(qsl_ptr + seq)
                has_q = tl.load(qsl_ptr + seq + 1) > tok_lo  # graph padding: no query
                seq_len = tl.where(has_q, tl.load(seq_lens_ptr + seq), 0)
                tok = tok_lo.to(tl.int64)
                q = load_q_rows(q_ptr, tok, head, stride_qt, stride_qh, offs_d, io_mask & has_q,
                                k_cache_ptr)  # fmt: skip
                q_abs = _decode_limit(seq_len, BLOCK_M)
                bt_row_ptr = block_table_ptr + seq.to(tl.int64) * stride_bt
                acc, m_i, l_i = _fresh_state(BLOCK_M, DIM_P, TILE)
                seq_tiles = tl.cdiv(seq_len, TILE)
                seg_tiles = tl.cdiv(seq_tiles, NUM_SEGS)
                j_lo = (i % NUM_SEGS) * seg_tiles
                j_hi = tl.minimum(j_lo + seg_tiles, seq_tiles)
                blk_next = (
                    tile_blocks(
                        bt_row_ptr, j_lo, seq_len, offs_t, BLOCK_SIZE, TILE, True, PER_BLOCK
                    )
                    if AHEAD
                    else j_lo
                )
                for j in range(j_lo, j_hi):
                    blk, blk_next = blocks_step(
                        blk_next, bt_row_ptr, j, seq_len, offs_t, BLOCK_SIZE, TILE, True, AHEAD,
                        PER_BLOCK,
                    )  # fmt: skip
                    acc, m_i, l_i = attn_step_blocks(
                        acc, m_i, l_i, q, j, seq_len, q_abs, blk, k_cache_ptr, v_cache_ptr,
                        head_off, stride_cb, stride_cs, qk_scale, offs_t, offs_d, HEAD_DIM,
                        HEAD_DIM == DIM_P, BLOCK_SIZE, TILE, True, IEEE, K_ROWS, FP8_PAIRS,
                        PER_BLOCK, not CAUSAL,
                    )  # fmt: skip
                if NUM_SEGS > 1:  # the segment's partial row (an empty one: max -inf, sum 0)
                    row = (tok * NUM_Q_HEADS + head) * NUM_SEGS + i % NUM_SEGS
                    store_segment_partial(
                        segm_acc_ptr, segm_max_ptr, segm_sum_ptr, row, row_ok & has_q,
                        j_lo < seq_tiles, acc, m_i, l_i, offs_d, DIM_P,
                    )  # fmt: skip
                else:
                    store_out_rows(out_ptr, tok, head, stride_ot, stride_oh, offs_d, acc, l_i,
                                   out_scale, io_mask & has_q)  # fmt: skip
                i = tl.atomic_add(ctr_ptr + kv_head, 1, sem="relaxed")
            # The last program out resets this head's counters for the next launch (every
            # program has made its final grab before it counts itself out).
            out_count = tl.atomic_add(ctr_ptr + heads + kv_head, 1, sem="relaxed")
            if out_count == n_prog - 1:
                tl.store(ctr_ptr + kv_head, 0)
                tl.store(ctr_ptr + heads + kv_head, 0)
        if TIMING:  # per program: start and end (ns), SM, tiles walked
            rec = timing_ptr + (kv_head * n_prog + p).to(tl.int64) * 4
            tl.store(rec, t_start)
            tl.store(rec + 1, globaltimer())
            tl.store(rec + 2, smid().to(tl.int64))
            tl.store(rec + 3, total.to(tl.int64))


def paged_decode_persistent(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    out: torch.Tensor,
    *,
    block_m: int,
    tile: int,
    num_warps: int,
    num_stages: int,
    k_rows: bool,
    sms: int,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    seq_order: torch.Tensor | None = None,
    num_programs: int | None = None,
    num_segs: int = 1,
    qk: QKNormRopeWrite | None = None,
    timing: torch.Tensor | None = None,
    dynamic_frac: float | None = None,
    maxnreg: int | None = None,
    ctas_per_sm: int = 0,
) -> torch.Tensor:
    """Decode attention (each sequence 0 or 1 query tokens) with the persistent grid; the
    arguments are paged_attention's. num_segs > 1 splits every sequence into that many
    segments, merged by paged_attention's merge kernel. Rows of graph-padding sequences
    are not written without a split (the merge writes them, from unset partials).

    qk (unsplit grids only): q and the step's k/v are raw projections; the kernel runs
    the q/k norm + rotary on them (q and k in place) and writes K/V to the cache first.
    timing (benchmarks, compiled only): int64 [num_kv_heads * programs * 4] receives each
    program's start and end globaltimer (ns), SM id and tile count. dynamic_frac: the share
    of sequences whose items are handed out dynamically (None: DYNAMIC_FRAC). maxnreg caps
    the registers per thread (None: fp8_grid's over fp8 caches, else none; 0: none).
    ctas_per_sm (bf16 / fp16 caches; 0: PERSISTENT_CTAS_PER_SM) sizes the grid unless
    num_programs does."""
    _, hq, d = q.shape
    _, _, bs, hkv, _ = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    g = hq // hkv
    assert block_m >= g
    items = num_seqs * num_segs
    fp8 = kv_cache.dtype == FP8_DTYPE
    ctas, cap = fp8_grid(items, hkv, sms) if fp8 else (ctas_per_sm or None, 0)
    maxnreg = cap if maxnreg is None else maxnreg  # 0: no cap
    n_prog = num_programs or persistent_programs(items, hkv, sms, ctas)
    # The fused q/k prologue covers the dealt sequences only: no dynamic ones with it.
    n_dyn = dynamic_count(num_seqs, dynamic_frac) if qk is None else 0
    counters = dynamic_counters(q.device, hkv) if n_dyn else None
    if counters is None:
        n_dyn = 0
    n_static = num_seqs - n_dyn
    max_items = max(2, _pow2(-(-(n_static * num_segs) // n_prog)))
    if kv_cache.dtype != FP8_DTYPE:
        k_scale = v_scale = 1.0
    kc, vc = kv_cache[0], kv_cache[1]
    dim_p = max(16, _pow2(d))
    pairs = fp8_pairs(q, kv_cache)
    pdl = pdl_enabled(q)
    if num_segs > 1:
        segm = segment_buffers(q.shape[0], hq, num_segs, dim_p, q.device)
    else:
        segm = (out, out, out)  # never touched; any pointer will do
    if qk is not None:
        assert num_segs == 1 and qk.fusable(q, kv_cache), "q/k prologue needs an unsplit grid"
        fuse = qk.kernel_args(kc)
    else:  # never read without FUSE_QK
        fuse = (q, q, seq_lens, seq_lens, q, q, q, q) + (0,) * 7 + (0.0, 1.0, 1.0)
    # Every dealt item's q rows in the one q tile, where they fit (ITEM_ROWS, lean loop).
    item_rows = ITEM_ROWS and LEAN_LOOP and BLOCKS_AHEAD and max_items * g <= block_m
    _paged_decode_persistent_kernel[(n_prog, hkv)](
        out,
        q,
        kc,
        vc,
        block_table,
        seq_lens,
        query_start_loc,
        seq_order if seq_order is not None else seq_lens,  # unread without HAS_ORDER
        *segm,
        float(scale * k_scale * LOG2E),
        float(v_scale),
        num_seqs,
        n_static,
        counters if n_dyn else seq_lens,  # untouched without DYNAMIC
        *launch_strides(q, out, kc, block_table),
        *fuse,
        timing if timing is not None else seq_lens,  # unwritten without TIMING
        NUM_Q_HEADS=hq,
        G=g,
        HEAD_DIM=d,
        DIM_P=dim_p,
        BLOCK_SIZE=bs,
        TILE=tile,
        BLOCK_M=block_m,
        MAX_ITEMS=max_items,
        NUM_SEGS=num_segs,
        IEEE=q.dtype == torch.float32,
        K_ROWS=k_rows,
        HAS_ORDER=seq_order is not None,
        FP8_PAIRS=pairs,
        FUSE_QK=qk is not None,
        BLOCK_G=max(2, _pow2(g)),
        HALF=d // 2,
        FP8=kv_cache.dtype == FP8_DTYPE,
        TIMING=timing is not None,
        DYNAMIC=n_dyn > 0,
        PDL=pdl,
        AHEAD=BLOCKS_AHEAD,
        LEAN=LEAN_LOOP,
        PER_BLOCK=per_block_tiles(tile, bs, pairs, kc, vc),
        ITEM_ROWS=item_rows,
        CAUSAL=CAUSAL_SCORES and item_rows,  # alone it cost 13% a launch (session 47)
        num_warps=num_warps,
        num_stages=num_stages,
        launch_pdl=pdl,
        **({"maxnreg": maxnreg} if maxnreg else {}),
    )
    if num_segs > 1:
        merge_segments(out, *segm, float(v_scale), num_segs)
    return out
