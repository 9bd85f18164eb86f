"""Stream-K decode attention: the persistent grid splits the step's KV tiles exactly.

paged_decode.py deals whole sequences to a fixed grid of programs. On the H200 its programs
end 13-58 us apart within 130-270 us launches (bench_decode_timeline.py): the deal is uneven
when a few sequences are long, and even identical work finishes at different times on
different SMs. Here the unit of work is a KV tile, not a sequence.

Per kv head, the step's tiles form one space: sequence i owns tiles [end_i - n_i, end_i)
(n_i = ceil(seq_len_i / TILE), prefix sums in registers). Program p first walks the static
range [p * S, (p + 1) * S), S = (total - P * DYN_TILES) // P, then takes CHUNK-tile ranges of
the rest from a per-head atomic counter until none are left, so every program ends within
about one chunk of the others. A range is walked as one flat loop over its tiles (the
sequence of tile t comes from prefix sums over a window of WINDOW sequences held in
registers), so loads prefetch across sequence boundaries as in paged_decode.

A sequence that lies wholly inside one range is normalized and stored there. One cut by a
range boundary leaves a partial row (unnormalized output, running max and sum) per range in
a slot keyed by (range, first or last item of the range), and adds its tile count to the
sequence's counter; the program that completes the count merges the parts in range order.
Parts and merge order depend only on the lengths, never on which program ran what, so the
output is the same from launch to launch. Counters return to zero within each launch.

Decode only (each sequence 0 or 1 query tokens); the grid depends on host ints only, so the
launch is CUDA-graph safe with padded batches.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.kv_write import FP8_DTYPE, HAS_TRITON
from strixlm.kernels.paged_attention import LOG2E, _pow2, fp8_pairs, launch_strides

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.paged_attention import _attn_step, load_q_rows, store_out_rows

    try:
        from triton.language.extra.cuda import globaltimer, smid
    except ImportError:  # only the timeline benchmark's TIMING variant needs them
        globaltimer = smid = None

# Tiles per program left to the dynamic hand-out, and the tiles per grab there.
STREAMK_DYN_TILES = int(os.environ.get("STRIXLM_ATTN_STREAMK_DYN", "4"))
STREAMK_CHUNK = int(os.environ.get("STRIXLM_ATTN_STREAMK_CHUNK", "2"))
# STRIXLM_ATTN_STREAMK=0 keeps paged_decode's dealt grid, for A/B runs (read at import);
# the grid's two-segment split of small batches stays there unless =2.
STREAMK_MODE = int(os.environ.get("STRIXLM_ATTN_STREAMK", "1"))
# Sequences of one prefix-sum window in a range's flat loop.
STREAMK_WINDOW = 8
# Largest batch the kernel takes (every program holds all sequences' tile counts).
STREAMK_MAX_SEQS = 2048
_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def streamk_counters(device: torch.device, num_kv_heads: int, num_seqs: int) -> torch.Tensor | None:
    """int32 zeros: per kv head the next chunk and the programs done, then per (kv head,
    sequence) the tiles done. Each launch leaves them at zero, so launches share them one
    after another (not concurrently). Grown only outside a CUDA graph capture (a zeroing
    captured in a graph would not run before eager calls): None when a captured launch
    needs more sequences than the counters hold."""
    key = (torch.device(device), num_kv_heads)
    have = _COUNTERS.get(key)
    need = 2 * num_kv_heads + num_kv_heads * num_seqs
    if have is None or have.numel() < need:
        if torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        cap = max(num_seqs, 1024)
        have = torch.zeros(2 * num_kv_heads + num_kv_heads * cap, dtype=torch.int32, device=device)
        _COUNTERS[key] = have
    return have


def streamk_programs(num_kv_heads: int, sms: int, ctas_per_sm: int) -> int:
    """Programs per kv head: one wave of ctas_per_sm per SM, whatever the batch."""
    return max(1, (sms * ctas_per_sm) // max(1, num_kv_heads))


def max_ranges(n_prog: int, dyn_tiles: int, chunk: int) -> int:
    """Ranges per kv head: P static ones, and the dynamic region (< P * (dyn_tiles + 1)
    tiles whatever the total) in chunks."""
    return n_prog + -(-(n_prog * (dyn_tiles + 1)) // chunk)


if HAS_TRITON:

    @triton.jit
    def _pick(vec, idx, i):
        # vec[i] of a register vector (i a scalar; 0 when out of range)
        return tl.sum(tl.where(idx == i, vec, 0), axis=0)

    @triton.jit
    def _range_of(t, static, dyn_base, n_prog, CHUNK: tl.constexpr):
        # The range holding tile t: static ranges first, then the dynamic chunks.
        return tl.where(t < dyn_base, t // tl.maximum(static, 1), n_prog + (t - dyn_base) // CHUNK)

    @triton.jit
    def _finish_part(
        out_ptr, part_acc_ptr, part_ml_ptr, seq_ctr_ptr, qsl_ptr, seq, first, end, n_part,
        static, dyn_base, n_prog, slot_base, out_scale, kv_head, stride_ot, stride_oh,
        G: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_P: tl.constexpr, BLOCK_G: tl.constexpr,
        CHUNK: tl.constexpr,
    ):  # fmt: skip
        # Count this range's tiles of a cut sequence; the program that completes the count
        # merges every part. The barrier puts all of this program's partial stores before
        # the (release) add; the (acquire) add puts the other parts' stores before the loads.
        tl.debug_barrier()
        done = tl.atomic_add(seq_ctr_ptr + seq, n_part, sem="acq_rel") + n_part
        if done == end - first:
            offs_g = tl.arange(0, BLOCK_G)
            offs_d = tl.arange(0, DIM_P)
            g_ok = offs_g < G
            m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
            s = tl.zeros([BLOCK_G], dtype=tl.float32)
            acc = tl.zeros([BLOCK_G, DIM_P], dtype=tl.float32)
            r_lo = _range_of(first, static, dyn_base, n_prog, CHUNK)
            r_hi = _range_of(end - 1, static, dyn_base, n_prog, CHUNK)
            for r in range(r_lo, r_hi + 1):
                # The sequence starts inside its first range (slot 1: that range's last
                # item) and before every later one (slot 0: their first item).
                sid = (slot_base + r).to(tl.int64) * 2 + tl.where(r == r_lo, 1, 0)
                pm = tl.load(part_ml_ptr + sid * 2 * G + offs_g, mask=g_ok, other=0.0,
                             cache_modifier=".cg")  # fmt: skip
                ps = tl.load(part_ml_ptr + (sid * 2 + 1) * G + offs_g, mask=g_ok, other=0.0,
                             cache_modifier=".cg")  # fmt: skip
                pa = tl.load(
                    part_acc_ptr + (sid * G + offs_g)[:, None] * DIM_P + offs_d[None, :],
                    mask=g_ok[:, None], other=0.0, cache_modifier=".cg",
                )  # fmt: skip
                m_new = tl.maximum(m, pm)  # every part saw >= 1 key: pm is finite
                a_old = tl.exp2(m - m_new)
                a_part = tl.exp2(pm - m_new)
                s = s * a_old + ps * a_part
                acc = acc * a_old[:, None] + pa * a_part[:, None]
                m = m_new
            tok = tl.load(qsl_ptr + seq).to(tl.int64)
            head = kv_head * G + offs_g
            io_mask = g_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
            store_out_rows(out_ptr, tok, head, stride_ot, stride_oh, offs_d, acc, s,
                           out_scale, io_mask)  # fmt: skip
            tl.store(seq_ctr_ptr + seq, 0)  # for the next launch

    @triton.jit(do_not_specialize=["num_seqs", "n_ranges"])
    def _paged_decode_streamk_kernel(
        out_ptr,
        q_ptr,
        k_cache_ptr,
        v_cache_ptr,
        block_table_ptr,
        seq_lens_ptr,
        qsl_ptr,
        part_acc_ptr,
        part_ml_ptr,
        ctr_ptr,
        qk_scale,
        out_scale,
        num_seqs,
        n_ranges,
        ctr_stride,
        stride_qt,
        stride_qh,
        stride_ot,
        stride_oh,
        stride_cb,
        stride_cs,
        stride_ch,
        stride_bt,
        timing_ptr,
        G: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_G: tl.constexpr,
        BLOCK_B: tl.constexpr,
        WINDOW: tl.constexpr,
        CHUNK: tl.constexpr,
        DYN_TILES: tl.constexpr,
        IEEE: tl.constexpr,
        K_ROWS: tl.constexpr,
        FP8_PAIRS: tl.constexpr,
        TIMING: tl.constexpr,
    ):
        p = tl.program_id(0)
        n_prog = tl.num_programs(0)
        kv_head = tl.program_id(1)
        heads = tl.num_programs(1)
        if TIMING:  # a benchmark's timeline of the programs (bench_decode_timeline.py)
            t_start = globaltimer()
        grab_ptr = ctr_ptr + kv_head
        out_ctr_ptr = ctr_ptr + heads + kv_head
        seq_ctr_ptr = ctr_ptr + 2 * heads + kv_head * ctr_stride
        slot_base = kv_head * n_ranges

        # Every sequence's tiles (graph padding has no query: none) and where they end.
        bidx = tl.arange(0, BLOCK_B)
        b_ok = bidx < num_seqs
        lo_all = tl.load(qsl_ptr + bidx, mask=b_ok, other=0)
        hi_all = tl.load(qsl_ptr + bidx + 1, mask=b_ok, other=0)
        lens_all = tl.load(seq_lens_ptr + bidx, mask=b_ok & (hi_all > lo_all), other=0)
        tiles_all = tl.cdiv(lens_all, TILE)
        ends_all = tl.cumsum(tiles_all, axis=0)
        total = tl.sum(tiles_all, axis=0)
        static = tl.maximum((total - n_prog * DYN_TILES) // n_prog, 0)
        dyn_base = static * n_prog

        widx = tl.arange(0, WINDOW)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, DIM_P)
        offs_t = tl.arange(0, TILE)
        head = kv_head * G + offs_m % G
        row_ok = offs_m < G  # one query token: rows G.. are padding of the MMA tile
        io_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
        head_off = kv_head * stride_ch
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, DIM_P], dtype=tl.float32)
        walked = 0
        r = p
        a = p * static
        b = a + static
        while a < total:
            wa = a
            while wa < b:
                # A window of sequences from the one holding tile wa: their tile ranges.
                s0 = tl.sum((ends_all <= wa).to(tl.int32), axis=0)
                base = _pick(ends_all - tiles_all, bidx, s0)
                ws = s0 + widx
                w_ok = ws < num_seqs
                wlo = tl.load(qsl_ptr + ws, mask=w_ok, other=0)
                whi = tl.load(qsl_ptr + ws + 1, mask=w_ok, other=0)
                wlens = tl.load(seq_lens_ptr + ws, mask=w_ok & (whi > wlo), other=0)
                wtiles = tl.cdiv(wlens, TILE)
                wends = base + tl.cumsum(wtiles, axis=0)
                wfirsts = wends - wtiles
                wb = tl.minimum(b, tl.max(wends, axis=0))
                for t in range(wa, wb):
                    # Which sequence and tile: everything below is a function of t.
                    k = tl.sum((wends <= t).to(tl.int32), axis=0)
                    sel = widx == k
                    seq = s0 + k
                    seq_len = tl.sum(tl.where(sel, wlens, 0), axis=0)
                    first = tl.sum(tl.where(sel, wfirsts, 0), axis=0)
                    end = tl.sum(tl.where(sel, wends, 0), axis=0)
                    tok = tl.sum(tl.where(sel, wlo, 0), axis=0).to(tl.int64)
                    last = (t == end - 1) | (t == b - 1)
                    q = load_q_rows(
                        q_ptr, tok, head, stride_qt, stride_qh, offs_d, io_mask, k_cache_ptr
                    )  # fmt: skip
                    q_abs = tl.zeros([BLOCK_M], dtype=tl.int32) + (seq_len - 1)
                    bt_row_ptr = block_table_ptr + seq.to(tl.int64) * stride_bt
                    acc, m_i, l_i = _attn_step(
                        acc, m_i, l_i, q, t - first, seq_len, q_abs, bt_row_ptr, k_cache_ptr,
                        v_cache_ptr, head_off, stride_cb, stride_cs, qk_scale, offs_t, offs_d,
                        HEAD_DIM, HEAD_DIM == DIM_P, BLOCK_SIZE, TILE, True, IEEE, K_ROWS,
                        FP8_PAIRS,
                    )  # fmt: skip
                    if last:
                        if (first >= a) & (end <= b):  # the whole sequence: its output
                            store_out_rows(out_ptr, tok, head, stride_ot, stride_oh, offs_d,
                                           acc, l_i, out_scale, io_mask)  # fmt: skip
                        else:  # a part: slot 0 if it started before this range, else 1
                            sid = (slot_base + r).to(tl.int64) * 2 + (first >= a).to(tl.int64)
                            rows = sid * G + offs_m
                            tl.store(part_ml_ptr + sid * 2 * G + offs_m, m_i, mask=row_ok)
                            tl.store(part_ml_ptr + (sid * 2 + 1) * G + offs_m, l_i, mask=row_ok)
                            tl.store(part_acc_ptr + rows[:, None] * DIM_P + offs_d[None, :],
                                     acc, mask=row_ok[:, None])  # fmt: skip
                    acc = tl.where(last, 0.0, acc)
                    m_i = tl.where(last, float("-inf"), m_i)
                    l_i = tl.where(last, 0.0, l_i)
                walked += wb - wa
                wa = wb
            if b > a:
                # At most two sequences of a range are cut: the ones holding its first and
                # its last tile. Count them (outside the tile loop, so it stays pipelined).
                s_a = tl.sum((ends_all <= a).to(tl.int32), axis=0)
                end_a = _pick(ends_all, bidx, s_a)
                first_a = end_a - _pick(tiles_all, bidx, s_a)
                if (first_a < a) | (end_a > b):
                    _finish_part(
                        out_ptr, part_acc_ptr, part_ml_ptr, seq_ctr_ptr, qsl_ptr, s_a, first_a,
                        end_a, tl.minimum(end_a, b) - a, static, dyn_base, n_prog, slot_base,
                        out_scale, kv_head, stride_ot, stride_oh, G, HEAD_DIM, DIM_P, BLOCK_G,
                        CHUNK,
                    )  # fmt: skip
                s_b = tl.sum((ends_all <= b - 1).to(tl.int32), axis=0)
                end_b = _pick(ends_all, bidx, s_b)
                first_b = end_b - _pick(tiles_all, bidx, s_b)
                if (s_b != s_a) & (end_b > b):
                    _finish_part(
                        out_ptr, part_acc_ptr, part_ml_ptr, seq_ctr_ptr, qsl_ptr, s_b, first_b,
                        end_b, b - first_b, static, dyn_base, n_prog, slot_base, out_scale,
                        kv_head, stride_ot, stride_oh, G, HEAD_DIM, DIM_P, BLOCK_G, CHUNK,
                    )  # fmt: skip
            # The next chunk of the dynamic region, to whichever program is free first.
            c = tl.atomic_add(grab_ptr, 1, sem="relaxed")
            r = n_prog + c
            a = dyn_base + c * CHUNK
            b = tl.minimum(a + CHUNK, total)
        # The last program out resets the head's chunk counter for the next launch (every
        # program has made its final grab before it counts itself out).
        out_count = tl.atomic_add(out_ctr_ptr, 1, sem="acq_rel")
        if out_count == n_prog - 1:
            tl.store(grab_ptr, 0)
            tl.store(out_ctr_ptr, 0)
        if TIMING:  # per program: start and end (ns), SM, tiles walked
            rec = timing_ptr + (kv_head * n_prog + p).to(tl.int64) * 4
            tl.store(rec, t_start)
            tl.store(rec + 1, globaltimer())
            tl.store(rec + 2, smid().to(tl.int64))
            tl.store(rec + 3, walked.to(tl.int64))


def use_streamk(num_seqs: int, num_segs: int) -> bool:
    """For a batch the dispatch gave the persistent grid with num_segs segments."""
    if not 0 < num_seqs <= STREAMK_MAX_SEQS:
        return False
    return STREAMK_MODE >= 2 or (STREAMK_MODE == 1 and num_segs == 1)


def paged_decode_streamk(
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
    num_programs: int,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    timing: torch.Tensor | None = None,
    dyn_tiles: int | None = None,
    chunk: int | None = None,
) -> torch.Tensor | None:
    """Decode attention (each sequence 0 or 1 query tokens) over the paged cache with the
    stream-K grid of num_programs programs per kv head; the other arguments are
    paged_attention's. Returns None, launching nothing, when the counters cannot be
    allocated (first needed inside a CUDA graph capture): the caller then takes another
    kernel. Rows of graph-padding sequences are not written.

    timing (benchmarks, compiled only): int64 [num_kv_heads * programs * 4] receives each
    program's start and end globaltimer (ns), SM id and tiles walked. dyn_tiles / chunk:
    the dynamic region's tiles per program and tiles per grab (None: the defaults)."""
    _, hq, d = q.shape
    _, _, bs, hkv, _ = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    assert 0 < num_seqs <= STREAMK_MAX_SEQS, num_seqs
    g = hq // hkv
    assert block_m >= g
    dyn = STREAMK_DYN_TILES if dyn_tiles is None else dyn_tiles
    chunk = STREAMK_CHUNK if chunk is None else chunk
    assert dyn >= 0 and chunk >= 1
    counters = streamk_counters(q.device, hkv, num_seqs)
    if counters is None:
        return None
    ctr_stride = (counters.numel() - 2 * hkv) // hkv
    n_ranges = max_ranges(num_programs, dyn, chunk)
    dim_p = max(16, _pow2(d))
    slots = hkv * n_ranges * 2 * g
    part_acc = torch.empty(slots * dim_p, dtype=torch.float32, device=q.device)
    part_ml = torch.empty(2 * slots, dtype=torch.float32, device=q.device)
    if kv_cache.dtype != FP8_DTYPE:
        k_scale = v_scale = 1.0
    kc, vc = kv_cache[0], kv_cache[1]
    _paged_decode_streamk_kernel[(num_programs, hkv)](
        out,
        q,
        kc,
        vc,
        block_table,
        seq_lens,
        query_start_loc,
        part_acc,
        part_ml,
        counters,
        float(scale * k_scale * LOG2E),
        float(v_scale),
        num_seqs,
        n_ranges,
        ctr_stride,
        *launch_strides(q, out, kc, block_table),
        timing if timing is not None else seq_lens,  # unwritten without TIMING
        G=g,
        HEAD_DIM=d,
        DIM_P=dim_p,
        BLOCK_SIZE=bs,
        TILE=tile,
        BLOCK_M=block_m,
        BLOCK_G=max(2, _pow2(g)),
        BLOCK_B=max(16, _pow2(num_seqs)),
        WINDOW=STREAMK_WINDOW,
        CHUNK=chunk,
        DYN_TILES=dyn,
        IEEE=q.dtype == torch.float32,
        K_ROWS=k_rows,
        FP8_PAIRS=fp8_pairs(q, kv_cache),
        TIMING=timing is not None,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
