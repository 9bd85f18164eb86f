"""Triton silu_and_mul: x = [gate | up] along the last dim -> silu(gate) * up.

Numerics follow strixlm/layers/activation.py in torch: silu computed in fp32 and rounded to
the input dtype (F.silu's output), then the product computed in fp32 and rounded again.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strixlm.kernels.pdl import pdl_enabled, pdl_prologue


@triton.jit
def silu_mul(g, u):
    """silu(g) * u in g's dtype, rounded as the torch ops round it; shared with the GEMV,
    which applies it to its input as it loads it."""
    gf = g.to(tl.float32)
    s = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)
    return (s.to(tl.float32) * u.to(tl.float32)).to(g.dtype)


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr, n_cols, x_stride, o_stride, BLOCK: tl.constexpr, PDL: tl.constexpr
):
    pdl_prologue(PDL)
    # Grid (rows, column blocks): wide intermediates keep many SMs busy even at T = 1.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x_row = x_ptr + row * x_stride
    g = tl.load(x_row + cols, mask=mask, other=0.0)
    u = tl.load(x_row + n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * o_stride + cols, silu_mul(g, u), mask=mask)


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x: [..., 2 * I] -> [..., I]."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim {x.shape[-1]} is not even")
    n_cols = x.shape[-1] // 2
    out_shape = (*x.shape[:-1], n_cols)
    if out is None:
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != out_shape or out.dtype != x.dtype or out.stride(-1) != 1:
        raise ValueError("out has the wrong shape, dtype or layout")
    x2 = x.reshape(-1, x.shape[-1])  # a view for the usual [T, 2I] linear output
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    o2 = out.view(-1, n_cols) if out.dim() != 2 else out
    n_rows = x2.shape[0]
    if n_rows == 0 or n_cols == 0:
        return out
    block = min(1024, triton.next_power_of_2(n_cols))
    grid = (n_rows, triton.cdiv(n_cols, block))
    pdl = pdl_enabled(x2)
    _silu_and_mul_kernel[grid](
        x2, o2, n_cols, x2.stride(0), o2.stride(0), BLOCK=block, PDL=pdl, num_warps=4,
        launch_pdl=pdl,
    )  # fmt: skip
    return out
