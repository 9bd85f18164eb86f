"""Triton neox rotary embedding, applied in place to q and k.

Numerics follow strixlm/layers/rotary.py (HF): cos/sin come from the fp32 tables, the
rotation is computed in fp32, and the result is cast back to q's / k's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(base, heads, n_heads, head_stride, d, d_mask, half, cos, sin):
    # neox layout: the first and second halves of each head are the rotated pairs.
    mask = (heads < n_heads)[:, None] & d_mask[None, :]
    p1 = base + heads[:, None].to(tl.int64) * head_stride + d[None, :]
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p1 + half, mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    tl.store(p1, (x1f * cos - x2f * sin).to(x1.dtype), mask=mask)
    tl.store(p1 + half, (x2f * cos + x1f * sin).to(x1.dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,
    k_ptr,
    pos_ptr,
    cos_ptr,
    sin_ptr,
    n_q_heads,
    n_k_heads,
    q_s0,
    q_s1,
    k_s0,
    k_s1,
    pos_stride,
    cos_stride,
    sin_stride,
    half,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    # One program per token: its cos/sin row is loaded once and reused for every head.
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok * pos_stride).to(tl.int64)
    d = tl.arange(0, BLOCK_HALF)
    d_mask = d < half
    cos = tl.load(cos_ptr + pos * cos_stride + d, mask=d_mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + pos * sin_stride + d, mask=d_mask, other=0.0).to(tl.float32)
    cos = cos[None, :]
    sin = sin[None, :]
    h = tl.arange(0, BLOCK_H)
    q_base = q_ptr + tok * q_s0
    for h0 in range(0, n_q_heads, BLOCK_H):
        _rotate_heads(q_base, h0 + h, n_q_heads, q_s1, d, d_mask, half, cos, sin)
    k_base = k_ptr + tok * k_s0
    for h0 in range(0, n_k_heads, BLOCK_H):
        _rotate_heads(k_base, h0 + h, n_k_heads, k_s1, d, d_mask, half, cos, sin)


def check_rotary_inputs(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[int, int, int]:
    """(tokens, q heads, head_dim / 2) of an in-place rotation, or a ValueError naming the
    bad input (shared with the fused q/k norm + rotary kernel)."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"bad q/k shapes {tuple(q.shape)} / {tuple(k.shape)}")
    t, n_q_heads, head_dim = q.shape
    half = head_dim // 2
    if head_dim % 2 or cos.shape[-1] != half or sin.shape[-1] != half:
        raise ValueError(f"head_dim {head_dim} does not match the cos/sin tables")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride(-1) != 1:
        raise ValueError("q, k, cos and sin need a contiguous last dim (rotation is in place)")
    if positions.shape != (t,):
        raise ValueError(f"positions shape {tuple(positions.shape)} != ({t},)")
    return t, n_q_heads, half


def head_tiles(n_q_heads: int, n_k_heads: int, half: int) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_HALF): a [BLOCK_H, BLOCK_HALF] tile of ~1K elements per half, 8 per
    thread at 4 warps."""
    block_half = triton.next_power_of_2(half)
    block_h = max(1, min(triton.next_power_of_2(max(n_q_heads, n_k_heads)), 1024 // block_half))
    return block_h, block_half


def rotary_inplace(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> None:
    """Rotate q [T, Hq, D] and k [T, Hk, D] in place (views into a qkv buffer are fine).

    positions [T] (any integer dtype and stride) index the rows of cos/sin [max_pos, D/2];
    positions are not bounds-checked (checking would need a device sync).
    """
    t, n_q_heads, half = check_rotary_inputs(positions, q, k, cos, sin)
    if t == 0:
        return
    block_h, block_half = head_tiles(n_q_heads, k.shape[1], half)
    _rotary_kernel[(t,)](
        q,
        k,
        positions,
        cos,
        sin,
        n_q_heads,
        k.shape[1],
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        positions.stride(0),
        cos.stride(0),
        sin.stride(0),
        half,
        BLOCK_H=block_h,
        BLOCK_HALF=block_half,
        num_warps=4,
    )
