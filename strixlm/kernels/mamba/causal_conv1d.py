"""Depthwise causal conv1d of the Mamba-2 mixer, over packed sequences and for decode.

Each channel d of a token t sees the inputs t-width+1 .. t of its own sequence:
    out[t, d] = act(bias[d] + sum_k weight[d, k] * in[t - (width-1) + k, d])
where positions before the sequence start come from the cached conv state (the last
width-1 inputs seen so far, oldest first) or are zero for a sequence without a past.
Computation is in fp32; the output has x's dtype and the state keeps its own dtype.
Triton kernels: causal_conv1d_triton.py (imported only when they run).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from strixlm.kernels.mamba.dispatch import (
    activation_flag,
    check_dim,
    check_seq_args,
    check_shape,
    use_triton,
)

# ---- torch references --------------------------------------------------------------------


def causal_conv1d_varlen_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Torch reference of causal_conv1d_varlen: one F.conv1d per sequence."""
    _check_conv(x, weight, bias, conv_states)
    check_seq_args(query_start_loc, state_indices, has_initial_state)
    silu = activation_flag(activation)
    dim, width = weight.shape
    w = weight.float().unsqueeze(1)  # [dim, 1, width]: one filter per channel
    b = bias.float() if bias is not None else None
    out = torch.empty_like(x)
    bounds = query_start_loc.tolist()  # host reads are fine here: this path never runs in a graph
    has_past = has_initial_state.tolist()
    for i, slot in enumerate(state_indices.tolist()):
        start, end = bounds[i], bounds[i + 1]
        if has_past[i]:
            past = conv_states[slot].float()
        else:
            past = x.new_zeros(dim, width - 1, dtype=torch.float32)
        full = torch.cat([past, x[start:end].float().t()], dim=1)  # [dim, width-1 + len]
        if end > start:
            y = F.conv1d(full.unsqueeze(0), w, b, groups=dim)[0]  # [dim, len]
            out[start:end] = (F.silu(y) if silu else y).t().to(x.dtype)
        conv_states[slot] = full[:, full.shape[1] - (width - 1) :].to(conv_states.dtype)
    return out


def causal_conv1d_update_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    state_indices: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Torch reference of causal_conv1d_update (one new token per sequence)."""
    _check_conv(x, weight, bias, conv_states)
    check_shape("state_indices", state_indices, (x.shape[0],))
    silu = activation_flag(activation)
    idx = state_indices.long()
    full = torch.cat([conv_states[idx].float(), x.float().unsqueeze(-1)], dim=-1)  # [B, dim, w]
    y = (full * weight.float()).sum(-1)
    if bias is not None:
        y = y + bias.float()
    conv_states[idx] = full[..., 1:].to(conv_states.dtype)
    return (F.silu(y) if silu else y).to(x.dtype)


def _check_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_states: torch.Tensor
) -> None:
    check_dim("x", x, 2)
    check_dim("weight", weight, 2)
    check_dim("conv_states", conv_states, 3)
    dim, width = weight.shape
    if width < 2:
        raise ValueError(f"conv width must be at least 2, got {width}")
    if x.shape[1] != dim:
        raise ValueError(f"x has {x.shape[1]} channels, weight has {dim}")
    check_shape("bias", bias, (dim,))
    if tuple(conv_states.shape[1:]) != (dim, width - 1):
        raise ValueError(
            f"conv_states has shape {tuple(conv_states.shape)}, "
            f"expected [slots, {dim}, {width - 1}]"
        )


# ---- Triton launchers with the same checks ----------------------------------------------


def causal_conv1d_varlen_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Triton causal_conv1d_varlen; graph-safe (no host reads of tensor values)."""
    from strixlm.kernels.mamba.causal_conv1d_triton import launch_conv_varlen

    _check_conv(x, weight, bias, conv_states)
    check_seq_args(query_start_loc, state_indices, has_initial_state)
    silu = activation_flag(activation)
    return launch_conv_varlen(
        x, weight, bias, conv_states, query_start_loc, state_indices, has_initial_state, silu
    )


def causal_conv1d_update_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    state_indices: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Triton causal_conv1d_update; graph-safe."""
    from strixlm.kernels.mamba.causal_conv1d_triton import launch_conv_update

    _check_conv(x, weight, bias, conv_states)
    check_shape("state_indices", state_indices, (x.shape[0],))
    silu = activation_flag(activation)
    return launch_conv_update(x, weight, bias, conv_states, state_indices, silu)


# ---- public entry points -----------------------------------------------------------------


def causal_conv1d_varlen(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Causal depthwise conv over packed sequences; updates conv_states in place.

    x: [total_tokens, dim]; weight: [dim, width]; bias: [dim] or None;
    conv_states: [num_slots, dim, width-1] (any strides); query_start_loc: int32
    [num_seqs+1]; state_indices: int32 [num_seqs]; has_initial_state: bool [num_seqs].
    After the call conv_states[state_indices[i]] holds sequence i's last width-1 inputs.
    Returns [total_tokens, dim] in x's dtype.
    """
    fn = causal_conv1d_varlen_triton if use_triton(x) else causal_conv1d_varlen_ref
    return fn(
        x, weight, bias, conv_states, query_start_loc, state_indices, has_initial_state, activation
    )


def causal_conv1d_update(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    state_indices: torch.Tensor,
    activation: str | None = "silu",
) -> torch.Tensor:
    """One decode token per sequence: x [batch, dim]; rolls conv_states[state_indices]."""
    fn = causal_conv1d_update_triton if use_triton(x) else causal_conv1d_update_ref
    return fn(x, weight, bias, conv_states, state_indices, activation)
