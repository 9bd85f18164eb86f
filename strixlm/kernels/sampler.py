"""Triton kernels for the Gumbel-max sampler; `strixlm.sample.sampler` is their reference.

Every kernel works on a row split into S contiguous chunks, one program per (row, chunk),
so small batches still spread over the GPU. A multi-pass selection is a sequence of launches:
each launch first reduces the previous launch's per-chunk partials (a few KB per row) into
the row's state, then makes its own partials. No launch reads the host, so the sequence is
sync-free and graph-capturable.

The row values are `s = penalize(suppress(float32(logits))) / T`, recomputed in every pass
with the reference's exact float32 operations (IEEE division via `div_rn`; launch with
`enable_fp_fusion=False` so `x - f * c` is not contracted into an FMA).

Filters (thresholds on s, as the reference defines them; all ties at a threshold are kept):
- top-k: kth = the k-th largest s, found by a 4-digit radix select (8 bits per digit) on the
  order-preserving uint32 key of s, with `tl.histogram` counts per digit.
- top-p: over S_k = {s >= kth} with masses w = exp(s - max), the cutoff is the smallest value
  x in S_k with mass(S_k, > x) < p * mass(S_k); found by an 8-digit radix select (4 bits
  per digit) on the same keys, with per-bin masses and counts. This is the reference's
  `keep = #(mass before < p)` rule stated per value, so sort order among ties is irrelevant.
- min-p: s < max + log(min_p) is dropped (log(min_p) is computed by torch, like the reference).
The masses are float32 sums in a different order from the reference's cumsum: the two can
disagree only when the mass before the boundary value is within float32 rounding of p.
"""

from __future__ import annotations

import inspect

import triton
import triton.language as tl
from triton.language.extra import libdevice

EPS = tl.constexpr(1e-5)  # = strixlm.sample.metadata.SAMPLING_EPS
# Per-(row, token) stats word: output count in the low bits, two flags above.
COUNT_MASK = tl.constexpr((1 << 29) - 1)
SUPPRESS_BIT = tl.constexpr(1 << 29)
PROMPT_BIT = tl.constexpr(1 << 30)
BIG = tl.constexpr(2**31 - 1)
# Above the largest Gumbel value the hash can give: -log(-log(1 - 2**-24)) = 16.6355...
GUMBEL_MAX = tl.constexpr(16.75)
TK_BITS = 8  # top-k radix digit width: 4 passes
TP_BITS = 4  # top-p radix digit width: 8 passes
GREEDY_TILES = tl.constexpr(4)  # tiles per step of the all-greedy argmax loop

# The per-row sampling parameters arrive as rows of one gathered [6, B] float / [3, B] int64
# tensor (SamplingTable.gather), so whether each row's pointer is 16-byte aligned, which
# Triton specializes on, follows B mod 4. Unpinned, each class built its own variant in the
# middle of a run (H200: 144-220 ms a build with a cold Triton cache). The kernels load one
# scalar a row from them, which the alignment does not speed up.
ROW_PARAMS = ("topp_ptr", "lmp_ptr", "rep_ptr", "freq_ptr", "pres_ptr", "seed_ptr")


def jit_per_row(*ints: str):
    """triton.jit for a kernel that takes per-row sampling parameters: no specialization on
    the named batch-dependent ints (== 1, % 16), nor on whichever ROW_PARAMS it takes."""

    def wrap(fn):
        params = inspect.signature(fn).parameters
        pinned = [*ints, *(p for p in ROW_PARAMS if p in params)]
        return triton.jit(fn, do_not_specialize=pinned)

    return wrap


# ---------------------------------------------------------------- helpers


@triton.jit
def _log(x, PRECISE: tl.constexpr):
    # libdevice logf is CUDA's logf, what torch.log runs; the interpreter has no libdevice.
    if PRECISE:
        return libdevice.log(x)
    else:
        return tl.log(x)


@triton.jit
def _fmix32(x):
    x = x ^ (x >> 16)
    x = x * 0x85EBCA6B
    x = x ^ (x >> 13)
    x = x * 0xC2B2AE35
    return x ^ (x >> 16)


@triton.jit
def _row_key(seed, pos):
    """The row key of strixlm.sample.random.row_keys, from int64 seed and position."""
    k = tl.full([], 0x243F6A88, tl.uint32)
    k = _fmix32((k ^ (seed & 0xFFFFFFFF).to(tl.uint32)) + 0x9E3779B9)
    k = _fmix32((k ^ (seed >> 32).to(tl.uint32)) + 0x9E3779B9)
    k = _fmix32((k ^ (pos & 0xFFFFFFFF).to(tl.uint32)) + 0x9E3779B9)
    return _fmix32((k ^ (pos >> 32).to(tl.uint32)) + 0x9E3779B9)


@triton.jit
def _gumbel(key, offs, PRECISE: tl.constexpr):
    h = _fmix32(key ^ _fmix32(offs.to(tl.uint32) + 0x7F4A7C15))
    u = (((h >> 9) << 1) | 1).to(tl.float32) * 5.9604644775390625e-08  # * 2**-24, exact
    return -_log(-_log(u, PRECISE), PRECISE)


@triton.jit
def _okey(s):
    """Order-preserving uint32 key of float32 s (larger s, larger key)."""
    b = s.to(tl.uint32, bitcast=True)
    # `^ 0xFFFFFFFF`, not `~`: the interpreter cannot invert uint32.
    return tl.where((b >> 31) != 0, b ^ 0xFFFFFFFF, b | 0x80000000)


@triton.jit
def _okey_inv(k):
    b = tl.where((k >> 31) != 0, k & 0x7FFFFFFF, k ^ 0xFFFFFFFF)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _values(
    X, xs, ST, row, offs, valid, V, T, rep, freq, pres,
    HAS_STATS: tl.constexpr, HAS_PEN: tl.constexpr,
):  # fmt: skip
    """Row values s: the reference's suppress -> penalties -> / T, op for op."""
    row = row.to(tl.int64)
    x = tl.load(X + row * xs + offs, mask=valid, other=float("-inf")).to(tl.float32)
    if HAS_STATS:
        st = tl.load(ST + row * V + offs, mask=valid, other=0)
        x = tl.where((st & SUPPRESS_BIT) != 0, float("-inf"), x)
        if HAS_PEN:
            cnt = st & COUNT_MASK
            seen = (st & (PROMPT_BIT | COUNT_MASK)) != 0
            x = tl.where(seen, tl.where(x > 0, tl.math.div_rn(x, rep), x * rep), x)
            x = x - freq * cnt.to(tl.float32)
            x = x - pres * (cnt > 0).to(tl.float32)
    return tl.math.div_rn(x, T)


@triton.jit
def _topk_resolve(hist_ptr, state_ptr, row, B, S, j, shift, RS: tl.constexpr):
    """Fix top-k digit j from its per-chunk histograms: (prefix, k remaining in it)."""
    bins = tl.arange(0, 256)
    base = (j * B + row) * 2
    prefix = tl.load(state_ptr + base).to(tl.uint32, bitcast=True)
    krem = tl.load(state_ptr + base + 1)
    acc = tl.zeros([256], tl.int32)
    for s0 in range(0, S, RS):
        sid = s0 + tl.arange(0, RS)
        ptrs = hist_ptr + ((j * B + row) * S + sid[:, None]) * 256 + bins[None, :]
        acc += tl.sum(tl.load(ptrs, mask=sid[:, None] < S, other=0), axis=0)
    above = tl.sum(acc, 0) - tl.cumsum(acc, 0)  # count in higher bins (exact, ints)
    sel = (above < krem) & (krem <= above + acc)
    d = tl.sum(tl.where(sel, bins, 0), 0)
    krem = krem - tl.sum(tl.where(sel, above, 0), 0)
    return prefix | (d.to(tl.uint32) << shift), krem


@triton.jit
def _topp_resolve(mass_ptr, cnt_ptr, tps_ptr, tpf_ptr, row, B, S, j, p, shift, RS: tl.constexpr):
    """Fix top-p digit j: the lowest non-empty bin whose mass above is < p * Z."""
    bins = tl.arange(0, 16)
    w = tl.zeros([16], tl.float32)
    c = tl.zeros([16], tl.int32)
    for s0 in range(0, S, RS):
        sid = s0 + tl.arange(0, RS)
        off = ((j * B + row) * S + sid[:, None]) * 16 + bins[None, :]
        m = sid[:, None] < S
        w += tl.sum(tl.load(mass_ptr + off, mask=m, other=0.0), axis=0)
        c += tl.sum(tl.load(cnt_ptr + off, mask=m, other=0), axis=0)
    prefix = tl.load(tps_ptr + j * B + row).to(tl.uint32, bitcast=True)
    above0 = tl.load(tpf_ptr + (j * B + row) * 2)
    target = tl.load(tpf_ptr + (j * B + row) * 2 + 1)
    # Digit 0 sees all of S_k, so its total is Z; p <= 0 keeps just the top value.
    target = tl.where(j == 0, tl.maximum(p * tl.sum(w, 0), 1e-30), target)
    # Mass strictly above each bin, summed directly (no cumsum cancellation).
    above = above0 + tl.sum(tl.where(bins[None, :] > bins[:, None], w[None, :], 0.0), axis=1)
    ok = (c > 0) & (above < target)
    d = tl.min(tl.where(ok, bins, 16), 0)
    d = tl.where(d == 16, tl.max(tl.where(c > 0, bins, 0), 0), d)  # unreachable guard
    above_d = tl.sum(tl.where(bins == d, above, 0.0), 0)
    return prefix | (d.to(tl.uint32) << shift), above_d, target


@triton.jit
def _row_max(part_max_ptr, row, S, RS: tl.constexpr):
    so = tl.arange(0, RS)
    m = tl.full([], float("-inf"), tl.float32)
    for s0 in range(0, S, RS):
        pm = tl.load(part_max_ptr + row * S + s0 + so, mask=s0 + so < S, other=float("-inf"))
        m = tl.maximum(m, tl.max(pm, 0))
    return m


@triton.jit
def row_max_and_kth(
    topk_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S,
    HAS_TOPK: tl.constexpr, RS: tl.constexpr,
):  # fmt: skip
    """(row max, top-k threshold or -inf) from the PHASE 0 / 1 partials."""
    m = _row_max(part_max_ptr, row, S, RS)
    kth = tl.full([], float("-inf"), tl.float32)
    if HAS_TOPK:
        k = tl.load(topk_ptr + row)
        if (k > 0) & (k < V):
            pk, _ = _topk_resolve(hist_ptr, tks_ptr, row, B, S, 3, 0, RS)
            kth = _okey_inv(pk)
    return m, kth


# ---------------------------------------------------------------- token stats (penalties)


@triton.jit
def history_stats_kernel(
    stats_ptr,
    tok_ptr,
    tok_stride,
    prompt_lens_ptr,
    seq_lens_ptr,
    V,
    CLEAR: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Count output tokens / flag prompt tokens into stats[row, tok]; CLEAR zeroes them again."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < tl.load(seq_lens_ptr + row)
    tok = tl.load(tok_ptr + row * tok_stride + offs, mask=inb, other=-1)
    valid = inb & (tok >= 0) & (tok < V)
    ptrs = stats_ptr + row * V + tok
    if CLEAR:
        tl.store(ptrs, tl.zeros([BLOCK], tl.int32), mask=valid)
    else:
        in_prompt = offs < tl.load(prompt_lens_ptr + row)
        ones = tl.full([BLOCK], 1, tl.int32)
        tl.atomic_add(ptrs, ones, mask=valid & ~in_prompt, sem="relaxed")
        tl.atomic_or(ptrs, ones * PROMPT_BIT, mask=valid & in_prompt, sem="relaxed")


@triton.jit(do_not_specialize=["n"])
def suppress_kernel(stats_ptr, rows_ptr, cols_ptr, n, V, CLEAR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    r = tl.load(rows_ptr + offs, mask=m, other=0).to(tl.int64)
    c = tl.load(cols_ptr + offs, mask=m, other=0)
    ptrs = stats_ptr + r * V + c
    if CLEAR:
        tl.store(ptrs, tl.zeros([BLOCK], tl.int32), mask=m)
    else:
        tl.atomic_or(ptrs, tl.full([BLOCK], SUPPRESS_BIT, tl.int32), mask=m, sem="relaxed")


# ---------------------------------------------------------------- filter passes


# Batch-dependent ints are not specialized (on == 1, % 16): one compile serves every B.
@jit_per_row("B", "S", "j", "hi_mask", "shift", "prev_shift")
def filter_pass_kernel(
    X, xs, ST, temp_ptr, topk_ptr, topp_ptr, rep_ptr, freq_ptr, pres_ptr,
    part_max_ptr, hist_ptr, tks_ptr, rowbuf_ptr, mass_ptr, cnt_ptr, tps_ptr, tpf_ptr,
    state_ptr, B, V, S, CHUNK, j, hi_mask, shift, prev_shift,
    PHASE: tl.constexpr, HAS_TOPK: tl.constexpr, HAS_STATS: tl.constexpr,
    HAS_PEN: tl.constexpr, BLOCK: tl.constexpr, RS: tl.constexpr, TOPP_STATE: tl.constexpr,
):  # fmt: skip
    """One pass over a chunk of row values. PHASE 0: row max and top-k digit 0; PHASE 1:
    top-k digit j >= 1; PHASE 2: top-p digit j. (hi_mask, shift) select digit j's bits,
    prev_shift is digit j-1's; each pass first fixes digit j-1 from the last pass's partials.
    TOPP_STATE: state_ptr holds sampler_topp's per-row result (>= 0: resolved, skip PHASE 2).
    """
    row = tl.program_id(0)
    sid = tl.program_id(1)
    temp = tl.load(temp_ptr + row)
    if temp >= EPS:  # greedy rows ignore filters
        k = tl.load(topk_ptr + row)
        topk_on = (k > 0) & (k < V)
        p = tl.load(topp_ptr + row)
        prefix = tl.full([], 0, tl.uint32)
        kth = tl.full([], float("-inf"), tl.float32)
        m = tl.full([], 0.0, tl.float32)
        if PHASE == 0:
            active = temp >= EPS
            if sid == 0:
                tl.store(tks_ptr + row * 2, 0)
                tl.store(tks_ptr + row * 2 + 1, k)
        elif PHASE == 1:
            active = topk_on
            if active:
                prefix, krem = _topk_resolve(hist_ptr, tks_ptr, row, B, S, j - 1, prev_shift, RS)
                if sid == 0:
                    tl.store(tks_ptr + (j * B + row) * 2, prefix.to(tl.int32, bitcast=True))
                    tl.store(tks_ptr + (j * B + row) * 2 + 1, krem)
        else:
            if j == 0:
                # Finish top-k and the row max once; later passes and the sampler read them.
                if HAS_TOPK:
                    if topk_on:
                        pk, _ = _topk_resolve(hist_ptr, tks_ptr, row, B, S, 3, 0, RS)
                        kth = _okey_inv(pk)
                m = _row_max(part_max_ptr, row, S, RS)
                if sid == 0:
                    tl.store(rowbuf_ptr + row * 2, kth)
                    tl.store(rowbuf_ptr + row * 2 + 1, m)
                    tl.store(tps_ptr + row, 0)
                    tl.store(tpf_ptr + row * 2, 0.0)
                    tl.store(tpf_ptr + row * 2 + 1, 0.0)
            else:
                kth = tl.load(rowbuf_ptr + row * 2)
                m = tl.load(rowbuf_ptr + row * 2 + 1)
            active = p < 1.0
            if TOPP_STATE:  # rows sampler_topp already resolved skip the radix passes
                active = active & (tl.load(state_ptr + row) < 0)
            if active & (j > 0):
                prefix, above, target = _topp_resolve(
                    mass_ptr, cnt_ptr, tps_ptr, tpf_ptr, row, B, S, j - 1, p, prev_shift, RS
                )
                if sid == 0:
                    tl.store(tps_ptr + j * B + row, prefix.to(tl.int32, bitcast=True))
                    tl.store(tpf_ptr + (j * B + row) * 2, above)
                    tl.store(tpf_ptr + (j * B + row) * 2 + 1, target)
        if active:
            rep = tl.load(rep_ptr + row)
            freq = tl.load(freq_ptr + row)
            pres = tl.load(pres_ptr + row)
            hm = hi_mask.to(tl.uint32, bitcast=True)
            do_hist = HAS_TOPK & topk_on
            start = sid * CHUNK
            stop = tl.minimum(start + CHUNK, V)
            b16 = tl.arange(0, 16)
            mx = tl.full([], float("-inf"), tl.float32)
            acc = tl.zeros([256], tl.int32)
            wacc = tl.zeros([16], tl.float32)
            cacc = tl.zeros([16], tl.int32)
            for t in range(start, stop, BLOCK):
                offs = t + tl.arange(0, BLOCK)
                ok = offs < stop
                s = _values(X, xs, ST, row, offs, ok, V, temp, rep, freq, pres, HAS_STATS, HAS_PEN)
                if PHASE == 0:
                    mx = tl.maximum(mx, tl.max(s, 0))
                    if do_hist:
                        acc += tl.histogram(((_okey(s) >> shift) & 255).to(tl.int32), 256, mask=ok)
                elif PHASE == 1:
                    key = _okey(s)
                    match = ok & ((key & hm) == prefix)
                    if tl.max(match.to(tl.int32), 0) > 0:  # later digits match few tiles
                        dig = ((key >> shift) & 255).to(tl.int32)
                        acc += tl.histogram(dig, 256, mask=match)
                else:
                    key = _okey(s)
                    match = ok & (s >= kth) & ((key & hm) == prefix)
                    if tl.max(match.to(tl.int32), 0) > 0:
                        dig = ((key >> shift) & 15).to(tl.int32)
                        w = tl.where(match, tl.exp(s - m), 0.0)
                        wacc += tl.sum(tl.where(dig[:, None] == b16[None, :], w[:, None], 0.0), 0)
                        cacc += tl.histogram(dig, 16, mask=match)
            part = (j * B + row) * S + sid
            if PHASE == 0:
                tl.store(part_max_ptr + row * S + sid, mx)
                if do_hist:
                    tl.store(hist_ptr + part * 256 + tl.arange(0, 256), acc)
            elif PHASE == 1:
                tl.store(hist_ptr + part * 256 + tl.arange(0, 256), acc)
            else:
                tl.store(mass_ptr + part * 16 + b16, wacc)
                tl.store(cnt_ptr + part * 16 + b16, cacc)


# ---------------------------------------------------------------- sampling


@triton.jit
def gumbel_tile_best(s, live, key, offs, t, best_v, best_i, PRECISE: tl.constexpr,
                     BLOCK: tl.constexpr):  # fmt: skip
    """Fold one tile into the running argmax of s + gumbel over the `live` tokens.

    Skips the noise where nothing can win: s + g <= s + GUMBEL_MAX (rounding is monotone),
    so a tile whose best live s + GUMBEL_MAX <= best cannot beat the best, which also has
    the lower index. Ties go to the first index, as in torch.argmax.
    """
    y = tl.full([BLOCK], float("-inf"), tl.float32)
    smax = tl.max(tl.where(live, s, float("-inf")), 0)
    if (smax > float("-inf")) & (smax + GUMBEL_MAX > best_v):
        y = tl.where(live, s + _gumbel(key, offs, PRECISE), float("-inf"))
    return fold_tile_best(y, t, best_v, best_i)


@triton.jit
def fold_tile_best(y, t, best_v, best_i):
    """Fold tile y (values of tokens t, t + 1, ...) into the running (best value, index);
    strict, so the first index wins ties, as in torch.argmax."""
    tv = tl.max(y, 0)
    ti = tl.argmax(y, 0) + t
    better = tv > best_v
    return tl.where(better, tv, best_v), tl.where(better, ti, best_i)


@jit_per_row("B", "S")
def sample_kernel(
    X, xs, ST, temp_ptr, topk_ptr, topp_ptr, lmp_ptr, rep_ptr, freq_ptr, pres_ptr,
    seed_ptr, pos_ptr,
    part_max_ptr, hist_ptr, tks_ptr, rowbuf_ptr, mass_ptr, cnt_ptr, tps_ptr, tpf_ptr,
    out_val_ptr, out_idx_ptr, thr_ptr, state_ptr, B, V, S, CHUNK,
    FILTER: tl.constexpr, HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr,
    ALL_GREEDY: tl.constexpr, HAS_STATS: tl.constexpr, HAS_PEN: tl.constexpr,
    PRECISE: tl.constexpr, BLOCK: tl.constexpr, RS: tl.constexpr, TOPP_STATE: tl.constexpr,
):  # fmt: skip
    """Per chunk: argmax of s (greedy rows) or of s + gumbel over s >= threshold. A row
    sampler_topp resolved (TOPP_STATE, state >= 0) passes its token on as chunk 0's winner
    (value +inf) and its threshold as NaN (not computed)."""
    row = tl.program_id(0)
    sid = tl.program_id(1)
    if TOPP_STATE:
        st = tl.load(state_ptr + row)
        if st >= 0:
            tl.store(out_val_ptr + row * S + sid, tl.where(sid == 0, float("inf"), float("-inf")))
            tl.store(out_idx_ptr + row * S + sid, st)
            if sid == 0:
                tl.store(thr_ptr + row, float("nan"))
            return
    temp = tl.load(temp_ptr + row)
    greedy = temp < EPS
    T = tl.where(greedy, 1.0, temp)
    rep = tl.load(rep_ptr + row)
    freq = tl.load(freq_ptr + row)
    pres = tl.load(pres_ptr + row)
    start = sid * CHUNK
    stop = tl.minimum(start + CHUNK, V)
    thr = tl.full([], float("-inf"), tl.float32)
    if FILTER:
        if temp >= EPS:
            kth = tl.full([], float("-inf"), tl.float32)
            if HAS_TOPP:
                kth = tl.load(rowbuf_ptr + row * 2)
                m = tl.load(rowbuf_ptr + row * 2 + 1)
                p = tl.load(topp_ptr + row)
                if p < 1.0:
                    pp, _, _ = _topp_resolve(mass_ptr, cnt_ptr, tps_ptr, tpf_ptr, row, B, S, 7,
                                             p, 0, RS)  # fmt: skip
                    kth = tl.maximum(kth, _okey_inv(pp))
            else:
                m, kth = row_max_and_kth(
                    topk_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S, HAS_TOPK, RS
                )
            thr = tl.maximum(kth, m + tl.load(lmp_ptr + row))
        if sid == 0:
            tl.store(thr_ptr + row, thr)
    if ALL_GREEDY:
        # Argmax only: keep a running best per lane and reduce once at the end. A reduction
        # per tile (below) serializes the loop on barriers; without it the wider tiles keep
        # more loads in flight (the greedy pass read bf16 logits at ~1 TB/s before).
        lane_v = tl.full([GREEDY_TILES * BLOCK], float("-inf"), tl.float32)
        lane_i = tl.full([GREEDY_TILES * BLOCK], 0, tl.int32) + start
        for t in range(start, stop, GREEDY_TILES * BLOCK):
            offs = t + tl.arange(0, GREEDY_TILES * BLOCK)
            ok = offs < stop
            s = _values(X, xs, ST, row, offs, ok, V, T, rep, freq, pres, HAS_STATS, HAS_PEN)
            s = tl.where(ok, s, float("-inf"))
            better = s > lane_v  # strict: a lane keeps its earlier (lower) index on ties
            lane_v = tl.where(better, s, lane_v)
            lane_i = tl.where(better, offs, lane_i)
        best_v = tl.max(lane_v, 0)
        # The lowest index among the lanes at the max, as torch.argmax picks the first.
        best_i = tl.min(tl.where(lane_v == best_v, lane_i, BIG), 0)
        best_i = tl.where(best_i == BIG, start, best_i)
    else:
        key = _row_key(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
        best_v = tl.full([], float("-inf"), tl.float32)
        best_i = start
        for t in range(start, stop, BLOCK):
            offs = t + tl.arange(0, BLOCK)
            ok = offs < stop
            s = _values(X, xs, ST, row, offs, ok, V, T, rep, freq, pres, HAS_STATS, HAS_PEN)
            if greedy:
                y = tl.where(ok, s, float("-inf"))
                best_v, best_i = fold_tile_best(y, t, best_v, best_i)
            else:
                best_v, best_i = gumbel_tile_best(
                    s, ok & (s >= thr), key, offs, t, best_v, best_i, PRECISE, BLOCK
                )
    tl.store(out_val_ptr + row * S + sid, best_v)
    tl.store(out_idx_ptr + row * S + sid, best_i)


@triton.jit(do_not_specialize=["S"])
def argmax_finalize_kernel(val_ptr, idx_ptr, out_ptr, S, SP: tl.constexpr):
    row = tl.program_id(0)
    so = tl.arange(0, SP)
    v = tl.load(val_ptr + row * S + so, mask=so < S, other=float("-inf"))
    mx = tl.max(v, 0)
    first = tl.min(tl.where((v == mx) & (so < S), so, SP), 0)
    first = tl.where(first == SP, 0, first)
    tl.store(out_ptr + row, tl.load(idx_ptr + row * S + first).to(tl.int64))


# ---------------------------------------------------------------- logprobs


@triton.jit(do_not_specialize=["S", "K"])
def logprobs_partial_kernel(
    X, xs, tok_ptr, pm_ptr, pz_ptr, pc_ptr, ptv_ptr, pti_ptr, V, S, CHUNK, K,
    TOP: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Per chunk of raw logits: max, sum exp(x - max), #(x > x[token]), top-K (value, id)."""
    row = tl.program_id(0)
    sid = tl.program_id(1)
    base = X + row.to(tl.int64) * xs
    xc = tl.load(base + tl.load(tok_ptr + row)).to(tl.float32)
    start = sid * CHUNK
    stop = tl.minimum(start + CHUNK, V)
    m = tl.full([], float("-inf"), tl.float32)
    z = tl.full([], 0.0, tl.float32)
    cnt = tl.full([], 0, tl.int32)
    slots = tl.arange(0, KP)
    # Slots past K hold +inf so they are never the worst entry; empty slots are (-inf, BIG).
    lv = tl.where(slots < K, float("-inf"), float("inf"))
    li = tl.where(slots < K, BIG, -1)
    for t in range(start, stop, BLOCK):
        offs = t + tl.arange(0, BLOCK)
        valid = offs < stop
        x = tl.load(base + offs, mask=valid, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - m_new))
        z = z * scale + tl.sum(tl.where(valid, tl.exp(x - m_new), 0.0), 0)
        m = m_new
        cnt += tl.sum((valid & (x > xc)).to(tl.int32), 0)
        if TOP:
            # Insert this tile's entries while they beat the list's worst (value, then lower
            # id first); usually zero or a few rounds per tile.
            avail = valid
            wv = tl.min(lv, 0)
            wi = tl.max(tl.where(lv == wv, li, -1), 0)
            xa = tl.where(avail, x, float("-inf"))
            tv = tl.max(xa, 0)
            ti = tl.min(tl.where(avail & (xa == tv), offs, BIG), 0)
            go = (ti < BIG) & ((tv > wv) | ((tv == wv) & (ti < wi)))
            while go:
                ws = tl.argmax(tl.where(lv == wv, li, -1), 0)
                lv = tl.where(slots == ws, tv, lv)
                li = tl.where(slots == ws, ti, li)
                avail = avail & (offs != ti)
                wv = tl.min(lv, 0)
                wi = tl.max(tl.where(lv == wv, li, -1), 0)
                xa = tl.where(avail, x, float("-inf"))
                tv = tl.max(xa, 0)
                ti = tl.min(tl.where(avail & (xa == tv), offs, BIG), 0)
                go = (ti < BIG) & ((tv > wv) | ((tv == wv) & (ti < wi)))
    tl.store(pm_ptr + row * S + sid, m)
    tl.store(pz_ptr + row * S + sid, z)
    tl.store(pc_ptr + row * S + sid, cnt)
    if TOP:
        tl.store(ptv_ptr + (row * S + sid) * KP + slots, lv)
        tl.store(pti_ptr + (row * S + sid) * KP + slots, li)


@triton.jit(do_not_specialize=["S", "K"])
def logprobs_finalize_kernel(
    X, xs, tok_ptr, pm_ptr, pz_ptr, pc_ptr, ptv_ptr, pti_ptr,
    out_lp_ptr, out_rank_ptr, top_ids_ptr, top_lp_ptr, V, S, K,
    TOP: tl.constexpr, KP: tl.constexpr, SP: tl.constexpr,
):  # fmt: skip
    """Combine chunks: lse, sampled logprob = (x - max) - log Z, rank, and the top-K merge."""
    row = tl.program_id(0)
    so = tl.arange(0, SP)
    sm = so < S
    pm = tl.load(pm_ptr + row * S + so, mask=sm, other=float("-inf"))
    m = tl.max(pm, 0)
    z = tl.sum(
        tl.where(sm, tl.load(pz_ptr + row * S + so, mask=sm, other=0.0) * tl.exp(pm - m), 0.0), 0
    )
    log_z = tl.log(z)
    xc = tl.load(X + row.to(tl.int64) * xs + tl.load(tok_ptr + row))
    tl.store(out_lp_ptr + row, (xc.to(tl.float32) - m) - log_z)
    rank = tl.sum(tl.load(pc_ptr + row * S + so, mask=sm, other=0), 0) + 1
    tl.store(out_rank_ptr + row, rank.to(tl.int64))
    if TOP:
        slots = tl.arange(0, KP)
        off = (row * S + so[:, None]) * KP + slots[None, :]
        ids = tl.load(pti_ptr + off, mask=sm[:, None], other=-1)
        vals = tl.load(ptv_ptr + off, mask=sm[:, None], other=float("-inf"))
        avail = (ids >= 0) & (ids < V)
        for r in range(K):
            xa = tl.where(avail, vals, float("-inf"))
            bv = tl.max(tl.max(xa, 1), 0)
            bi = tl.min(tl.min(tl.where(avail & (xa == bv), ids, BIG), 1), 0)
            tl.store(top_ids_ptr + row * K + r, bi.to(tl.int64))
            tl.store(top_lp_ptr + row * K + r, (bv - m) - log_z)
            avail = avail & (ids != bi)
