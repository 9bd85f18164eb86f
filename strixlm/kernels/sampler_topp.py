"""Top-p by rejection: draw first, then check the draw is in the nucleus.

The radix top-p (sampler.py, filter_pass_kernel PHASE 2) pins the cutoff value exactly with
8 passes over the row, each a full read with an exp and a 16-bin weighted histogram: at
batch 256 and a 152K vocabulary that is ~4.8 ms a step on the H200. Here, per row:

1. Draw c = argmax of s + gumbel over the row's other filters (top-k set S_k, min-p), all
   above a floor (-inf at first): one pass, which also sums Z = mass(S_k) (w = exp(s - max)).
2. c is in the nucleus iff mass(S_k, s > s_c) < max(p * Z, 1e-30): the nucleus is an upper
   set of values (the cutoff is the smallest value whose mass above is below the target).
   One pass sums that mass.
3. Accepted: c is the token, since the argmax over a superset that lands in the subset is
   the argmax over the subset (ties: the lowest index either way). Rejected: the cutoff is
   above s_c, so raise the floor to s_c and draw again.

Same noise, same row values, same tie rules as the exact path: the same tokens, except that
the mass comparison is summed in another order (the caveat the radix path already has).
ROUNDS rounds are launched whatever happens (graph-capturable); a row still unresolved
after them (rare: each round accepts with probability >= p) falls back to the radix passes
and the sampling pass, which skip the resolved rows. Per-row state: -1 unresolved, -2 no
candidate (only with non-finite values; the radix path then decides), >= 0 the token.
"""

from __future__ import annotations

import triton
import triton.language as tl

from strixlm.kernels.sampler import (
    EPS,
    _row_key,
    _values,
    gumbel_tile_best,
    jit_per_row,
    row_max_and_kth,
)

ROUNDS = 2
UNRESOLVED = -1
NO_CANDIDATE = -2


@triton.jit
def _row_filters(
    topk_ptr, lmp_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S,
    HAS_TOPK: tl.constexpr, RS: tl.constexpr,
):  # fmt: skip
    """(m, kth, thr0): the row max, the top-k threshold (-inf: none) and the threshold of
    every filter but top-p, from the PHASE 0 / 1 partials."""
    m, kth = row_max_and_kth(topk_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S, HAS_TOPK, RS)
    return m, kth, tl.maximum(kth, m + tl.load(lmp_ptr + row))


@triton.jit
def _row_sum(part_ptr, row, S, RS: tl.constexpr):
    so = tl.arange(0, RS)
    acc = tl.zeros([RS], tl.float32)
    for s0 in range(0, S, RS):
        acc += tl.load(part_ptr + row * S + s0 + so, mask=s0 + so < S, other=0.0)
    return tl.sum(acc, 0)


@triton.jit
def _accepted(zpart_ptr, mpart_ptr, p, row, S, RS: tl.constexpr):
    """The last drawn candidate lies in the nucleus: mass above it < max(p * Z, 1e-30)."""
    target = tl.maximum(p * _row_sum(zpart_ptr, row, S, RS), 1e-30)
    return _row_sum(mpart_ptr, row, S, RS) < target


@jit_per_row("B", "S")
def topp_draw_kernel(
    X, xs, ST, temp_ptr, topk_ptr, topp_ptr, lmp_ptr, rep_ptr, freq_ptr, pres_ptr,
    seed_ptr, pos_ptr, part_max_ptr, hist_ptr, tks_ptr,
    state_ptr, cand_ptr, cand_s_ptr, zpart_ptr, mpart_ptr, cval_ptr, cidx_ptr,
    B, V, S, CHUNK,
    ROUND: tl.constexpr, HAS_TOPK: tl.constexpr, HAS_STATS: tl.constexpr,
    HAS_PEN: tl.constexpr, PRECISE: tl.constexpr, BLOCK: tl.constexpr, RS: tl.constexpr,
):  # fmt: skip
    """Round ROUND's draw, per (row, chunk). From round 1 on it first settles the previous
    round's check: accepted rows store their token and stop; rejected rows draw above it."""
    row = tl.program_id(0)
    sid = tl.program_id(1)
    temp = tl.load(temp_ptr + row)
    p = tl.load(topp_ptr + row)
    go = (temp >= EPS) & (p < 1.0)
    floor = tl.full([], float("-inf"), tl.float32)
    if go & (ROUND > 0):
        go = tl.load(state_ptr + row) == -1
        if go:
            if _accepted(zpart_ptr, mpart_ptr, p, row, S, RS):
                if sid == 0:
                    tl.store(state_ptr + row, tl.load(cand_ptr + row))
                go = False
            else:
                floor = tl.load(cand_s_ptr + row)
    if go:
        m, kth, thr = _row_filters(
            topk_ptr, lmp_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S, HAS_TOPK, RS
        )
        rep = tl.load(rep_ptr + row)
        freq = tl.load(freq_ptr + row)
        pres = tl.load(pres_ptr + row)
        key = _row_key(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
        start = sid * CHUNK
        stop = tl.minimum(start + CHUNK, V)
        best_v = tl.full([], float("-inf"), tl.float32)
        best_i = start
        z = tl.zeros([BLOCK], tl.float32)
        for t in range(start, stop, BLOCK):
            offs = t + tl.arange(0, BLOCK)
            ok = offs < stop
            s = _values(X, xs, ST, row, offs, ok, V, temp, rep, freq, pres, HAS_STATS, HAS_PEN)
            if ROUND == 0:
                z += tl.where(ok & (s >= kth), tl.exp(s - m), 0.0)
            live = ok & (s >= thr) & (s > floor)
            best_v, best_i = gumbel_tile_best(s, live, key, offs, t, best_v, best_i, PRECISE, BLOCK)
        tl.store(cval_ptr + row * S + sid, best_v)
        tl.store(cidx_ptr + row * S + sid, best_i)
        if ROUND == 0:
            tl.store(zpart_ptr + row * S + sid, tl.sum(z, 0))


@jit_per_row("B", "S")
def topp_check_kernel(
    X, xs, ST, temp_ptr, topk_ptr, topp_ptr, lmp_ptr, rep_ptr, freq_ptr, pres_ptr,
    part_max_ptr, hist_ptr, tks_ptr,
    state_ptr, cand_ptr, cand_s_ptr, mpart_ptr, cval_ptr, cidx_ptr,
    B, V, S, CHUNK,
    HAS_TOPK: tl.constexpr, HAS_STATS: tl.constexpr, HAS_PEN: tl.constexpr,
    BLOCK: tl.constexpr, RS: tl.constexpr, SP: tl.constexpr,
):  # fmt: skip
    """Per (row, chunk): the round's candidate c (reduced from the draw's partials) and the
    chunk's mass of S_k strictly above s_c."""
    row = tl.program_id(0)
    sid = tl.program_id(1)
    temp = tl.load(temp_ptr + row)
    p = tl.load(topp_ptr + row)
    if (temp >= EPS) & (p < 1.0):
        if tl.load(state_ptr + row) == -1:
            so = tl.arange(0, SP)
            vals = tl.load(cval_ptr + row * S + so, mask=so < S, other=float("-inf"))
            idxs = tl.load(cidx_ptr + row * S + so, mask=so < S, other=2**31 - 1)
            best = tl.max(vals, 0)
            c = tl.min(tl.where(vals == best, idxs, 2**31 - 1), 0)
            if best == float("-inf"):
                if sid == 0:
                    tl.store(state_ptr + row, -2)
            else:
                m, kth, _ = _row_filters(
                    topk_ptr, lmp_ptr, part_max_ptr, hist_ptr, tks_ptr, row, B, V, S,
                    HAS_TOPK, RS,
                )  # fmt: skip
                rep = tl.load(rep_ptr + row)
                freq = tl.load(freq_ptr + row)
                pres = tl.load(pres_ptr + row)
                one = tl.arange(0, 16)
                sc = _values(X, xs, ST, row, c + one, one == 0, V, temp, rep, freq, pres,
                             HAS_STATS, HAS_PEN)  # fmt: skip
                s_c = tl.max(tl.where(one == 0, sc, float("-inf")), 0)
                start = sid * CHUNK
                stop = tl.minimum(start + CHUNK, V)
                w = tl.zeros([BLOCK], tl.float32)
                for t in range(start, stop, BLOCK):
                    offs = t + tl.arange(0, BLOCK)
                    ok = offs < stop
                    s = _values(X, xs, ST, row, offs, ok, V, temp, rep, freq, pres,
                                HAS_STATS, HAS_PEN)  # fmt: skip
                    w += tl.where(ok & (s >= kth) & (s > s_c), tl.exp(s - m), 0.0)
                tl.store(mpart_ptr + row * S + sid, tl.sum(w, 0))
                if sid == 0:
                    tl.store(cand_ptr + row, c)
                    tl.store(cand_s_ptr + row, s_c)


@jit_per_row("S")  # S follows the row count
def topp_settle_kernel(state_ptr, temp_ptr, topp_ptr, cand_ptr, zpart_ptr, mpart_ptr, S,
                       RS: tl.constexpr):  # fmt: skip
    """After the last round: accepted rows store their token."""
    row = tl.program_id(0)
    temp = tl.load(temp_ptr + row)
    p = tl.load(topp_ptr + row)
    if (temp >= EPS) & (p < 1.0):
        if tl.load(state_ptr + row) == -1:
            if _accepted(zpart_ptr, mpart_ptr, p, row, S, RS):
                tl.store(state_ptr + row, tl.load(cand_ptr + row))
