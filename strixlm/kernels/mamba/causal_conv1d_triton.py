"""Triton kernels of the causal conv1d (see causal_conv1d.py for the semantics).

A varlen batch takes two launches: the first computes every output from the old states, the
second rewrites the states. On one stream that order keeps a sequence's outputs from reading
a state its own update has already overwritten. Decode is one launch that reads the whole
window of a (sequence, channel block) before writing the rolled state back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _conv_varlen_out_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    st_ptr,
    qsl_ptr,
    sidx_ptr,
    init_ptr,
    out_ptr,
    num_tokens,
    num_seqs,
    dim,
    x_st,
    x_sd,
    w_sd,
    w_sk,
    st_ss,
    st_sd,
    st_sk,
    o_st,
    o_sd,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    SEARCH_STEPS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # Programs tile tokens x channels regardless of sequence boundaries, so one long
    # prompt spreads over the whole GPU; each token finds its sequence by bisection.
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    t_ok = t < num_tokens
    d_ok = d < dim
    lo = tl.zeros([BLOCK_T], dtype=tl.int32)
    hi = tl.zeros([BLOCK_T], dtype=tl.int32) + (num_seqs - 1)
    for _ in tl.static_range(SEARCH_STEPS):  # largest seq with start <= t
        mid = (lo + hi + 1) // 2
        before = tl.load(qsl_ptr + mid) <= t
        lo = tl.where(before, mid, lo)
        hi = tl.where(before, hi, mid - 1)
    start = tl.load(qsl_ptr + lo)
    slot = tl.load(sidx_ptr + lo).to(tl.int64)
    has_past = tl.load(init_ptr + lo) != 0
    t64 = t.to(tl.int64)
    acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(b_ptr + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    ok = t_ok[:, None] & d_ok[None, :]
    for k in tl.static_range(WIDTH):
        back = WIDTH - 1 - k  # how many tokens before t this tap reads
        wk = tl.load(w_ptr + d * w_sd + k * w_sk, mask=d_ok, other=0.0).to(tl.float32)
        inside = (t - back) >= start
        xv = tl.load(
            x_ptr + (t64 - back)[:, None] * x_st + d[None, :] * x_sd,
            mask=ok & inside[:, None],
            other=0.0,
        ).to(tl.float32)
        if k < WIDTH - 1:
            # Before the start: state column width-1 + (t - back - start), from the past.
            col = (WIDTH - 1 - back) + (t - start)
            from_past = (~inside) & has_past
            sv = tl.load(
                st_ptr + slot[:, None] * st_ss + d[None, :] * st_sd + col[:, None] * st_sk,
                mask=ok & from_past[:, None],
                other=0.0,
            ).to(tl.float32)
            xv += sv
        acc += xv * wk[None, :]
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    tl.store(
        out_ptr + t64[:, None] * o_st + d[None, :] * o_sd,
        acc.to(out_ptr.dtype.element_ty),
        mask=ok,
    )


@triton.jit
def _conv_varlen_state_kernel(
    x_ptr,
    st_ptr,
    qsl_ptr,
    sidx_ptr,
    init_ptr,
    num_tokens,
    dim,
    x_st,
    x_sd,
    st_ss,
    st_sd,
    st_sk,
    WIDTH: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # New state column j holds the input at (len - (width-1) + j) relative to the start:
    # from x when that is inside the sequence, else from the old state (shifted left by
    # len), else zero when the sequence has no past.
    seq = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    j = tl.arange(0, BLOCK_K)
    start = tl.load(qsl_ptr + seq)
    length = tl.load(qsl_ptr + seq + 1) - start
    slot = tl.load(sidx_ptr + seq).to(tl.int64)
    has_past = tl.load(init_ptr + seq) != 0
    rel = length - (WIDTH - 1) + j
    ok = (d < dim)[:, None] & (j < WIDTH - 1)[None, :]
    tok = start.to(tl.int64) + rel
    xv = tl.load(
        x_ptr + tok[None, :] * x_st + d[:, None] * x_sd,
        mask=ok & ((rel >= 0) & (tok < num_tokens))[None, :],  # never past x, even if
        other=0.0,  # query_start_loc claims more tokens than x has
    )
    st_row = st_ptr + slot * st_ss + d[:, None] * st_sd
    old = tl.load(
        st_row + (j + length)[None, :] * st_sk,
        mask=ok & ((rel < 0) & has_past)[None, :],
        other=0.0,
    )
    new = tl.where((rel >= 0)[None, :], xv.to(tl.float32), old.to(tl.float32))
    tl.store(st_row + j[None, :] * st_sk, new.to(st_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _conv_update_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    st_ptr,
    sidx_ptr,
    out_ptr,
    dim,
    x_sb,
    x_sd,
    w_sd,
    w_sk,
    st_ss,
    st_sd,
    st_sk,
    o_sb,
    o_sd,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    j = tl.arange(0, BLOCK_K)
    d_ok = d < dim
    ok = d_ok[:, None] & (j < WIDTH - 1)[None, :]
    slot = tl.load(sidx_ptr + b).to(tl.int64)
    st_row = st_ptr + slot * st_ss + d[:, None] * st_sd
    past = tl.load(st_row + j[None, :] * st_sk, mask=ok, other=0.0).to(tl.float32)
    # The same state shifted left by one, read before anything is written.
    shifted = tl.load(
        st_row + (j + 1)[None, :] * st_sk, mask=ok & (j + 1 < WIDTH - 1)[None, :], other=0.0
    )
    xv = tl.load(x_ptr + b * x_sb + d * x_sd, mask=d_ok, other=0.0).to(tl.float32)
    w_past = tl.load(w_ptr + d[:, None] * w_sd + j[None, :] * w_sk, mask=ok, other=0.0)
    w_last = tl.load(w_ptr + d * w_sd + (WIDTH - 1) * w_sk, mask=d_ok, other=0.0)
    acc = tl.sum(past * w_past.to(tl.float32), axis=1) + xv * w_last.to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(b_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    tl.store(out_ptr + b * o_sb + d * o_sd, acc.to(out_ptr.dtype.element_ty), mask=d_ok)
    new = tl.where((j == WIDTH - 2)[None, :], xv[:, None], shifted.to(tl.float32))
    tl.store(st_row + j[None, :] * st_sk, new.to(st_ptr.dtype.element_ty), mask=ok)


def launch_conv_varlen(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    silu: bool,
) -> torch.Tensor:
    """Launch on already validated arguments: outputs first, then the state rewrite."""
    num_seqs = state_indices.shape[0]
    num_tokens, dim = x.shape
    width = weight.shape[1]
    out = torch.empty((num_tokens, dim), dtype=x.dtype, device=x.device)
    if num_seqs == 0:
        return out
    block_d = min(128, triton.next_power_of_2(dim))
    if num_tokens > 0:
        block_t = 32 if num_tokens >= 32 else max(1, triton.next_power_of_2(num_tokens))
        grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(dim, block_d))
        _conv_varlen_out_kernel[grid](
            x,
            weight,
            bias if bias is not None else weight,
            conv_states,
            query_start_loc,
            state_indices,
            has_initial_state,
            out,
            num_tokens,
            num_seqs,
            dim,
            *x.stride(),
            *weight.stride(),
            *conv_states.stride(),
            *out.stride(),
            WIDTH=width,
            HAS_BIAS=bias is not None,
            SILU=silu,
            SEARCH_STEPS=max(1, num_seqs.bit_length()),
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            num_warps=4,
        )
    _conv_varlen_state_kernel[(num_seqs, triton.cdiv(dim, block_d))](
        x,
        conv_states,
        query_start_loc,
        state_indices,
        has_initial_state,
        num_tokens,
        dim,
        *x.stride(),
        *conv_states.stride(),
        WIDTH=width,
        BLOCK_K=triton.next_power_of_2(width - 1),
        BLOCK_D=block_d,
        num_warps=4,
    )
    return out


def launch_conv_update(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    state_indices: torch.Tensor,
    silu: bool,
) -> torch.Tensor:
    """Launch on already validated arguments: one program per (sequence, channel block)."""
    batch, dim = x.shape
    width = weight.shape[1]
    out = torch.empty((batch, dim), dtype=x.dtype, device=x.device)
    if batch == 0:
        return out
    block_d = min(256, triton.next_power_of_2(dim))
    _conv_update_kernel[(batch, triton.cdiv(dim, block_d))](
        x,
        weight,
        bias if bias is not None else weight,
        conv_states,
        state_indices,
        out,
        dim,
        *x.stride(),
        *weight.stride(),
        *conv_states.stride(),
        *out.stride(),
        WIDTH=width,
        HAS_BIAS=bias is not None,
        SILU=silu,
        BLOCK_K=triton.next_power_of_2(width - 1),
        BLOCK_D=block_d,
        num_warps=4,
    )
    return out
