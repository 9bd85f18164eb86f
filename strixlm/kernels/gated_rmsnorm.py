"""Gated group RMSNorm of the Mamba-2 mixer output, in one Triton launch.

y = weight * rmsnorm_per_group(x * silu(z)): in torch this is about ten small kernels
(casts, silu, multiply, square, mean, rsqrt, ...) per Mamba layer, which at batch 1 cost more
than the math. Numerics follow the torch reference (strixlm/layers/mamba2.py, after HF's
MambaRMSNormGated): the gate and the norm in fp32, the normed value cast to the input dtype,
then multiplied by the weight in fp32 and rounded once to the promoted output dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from strixlm.kernels.kv_write import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl


def gated_rmsnorm_ref(
    x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group_size: int, eps: float
) -> torch.Tensor:
    """x, z [T, H]; weight [H]; groups of group_size consecutive channels."""
    dtype = x.dtype
    h = x.float() * F.silu(z.float())
    g = h.view(*h.shape[:-1], -1, group_size)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return weight * g.view(h.shape).to(dtype)


if HAS_TRITON:

    @triton.jit
    def _gated_rmsnorm_kernel(
        out_ptr,
        x_ptr,
        z_ptr,
        w_ptr,
        stride_xt,
        stride_zt,
        stride_ot,
        group_size,
        eps,
        BLOCK: tl.constexpr,
    ):
        # One program per (token, group): the group's channels fit one block.
        tok = tl.program_id(0).to(tl.int64)
        g = tl.program_id(1)
        cols = g * group_size + tl.arange(0, BLOCK)
        mask = tl.arange(0, BLOCK) < group_size
        x = tl.load(x_ptr + tok * stride_xt + cols, mask=mask, other=0.0)
        z = tl.load(z_ptr + tok * stride_zt + cols, mask=mask, other=0.0).to(tl.float32)
        h = x.to(tl.float32) * (z * tl.sigmoid(z))
        var = tl.sum(h * h, axis=0) / group_size
        hn = (h * tl.rsqrt(var + eps)).to(x.dtype)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        y = hn.to(tl.float32) * w.to(tl.float32)
        tl.store(out_ptr + tok * stride_ot + cols, y, mask=mask)


def gated_rmsnorm(
    x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group_size: int, eps: float
) -> torch.Tensor:
    """The Triton kernel (CUDA, or CPU tensors under TRITON_INTERPRET=1)."""
    if x.dim() != 2 or z.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(
            f"bad shapes: x {tuple(x.shape)}, z {tuple(z.shape)}, weight {tuple(weight.shape)}"
        )
    hidden = x.shape[1]
    if group_size <= 0 or hidden % group_size:
        raise ValueError(f"hidden size {hidden} is not a multiple of group size {group_size}")
    if x.stride(1) != 1 or z.stride(1) != 1 or weight.stride(0) != 1:
        raise ValueError("x, z and weight need a contiguous last dim")
    out = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    if x.shape[0] == 0:
        return out
    block = triton.next_power_of_2(group_size)
    _gated_rmsnorm_kernel[(x.shape[0], hidden // group_size)](
        out,
        x,
        z,
        weight,
        x.stride(0),
        z.stride(0),
        out.stride(0),
        group_size,
        eps,
        BLOCK=block,
        num_warps=4 if block >= 512 else 2,
    )
    return out
