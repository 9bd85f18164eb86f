"""Triton RMSNorm, plain and fused with the residual add that precedes it.

Numerics follow the torch reference in strixlm/layers/norm.py (which follows HF): the sum
x + residual is rounded to the input dtype, the norm is computed in fp32, the normed row is
cast back to the input dtype and only then multiplied by the weight (in fp32, rounded once
to the promoted output dtype, as torch's elementwise multiply does).

fused_add_rmsnorm also takes a linear layer's output as split-K partials
(strixlm/kernels/splitk_linear.py): the kernel first sums the fp32 partials of its row in a
fixed order and rounds the sum to the activation dtype, which is what F.linear would have
returned, then adds and normalizes exactly as for a plain x.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strixlm.kernels.pdl import EARLY_LOADS, EARLY_RESIDUAL, pdl_enabled, pdl_prologue
from strixlm.layers.splitk_partials import SplitKPartials


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    n_inner,
    x_s0,
    x_s1,
    r_s0,
    r_s1,
    o_s0,
    o_s1,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    NUM_PARTS: tl.constexpr,
    PDL: tl.constexpr,
    EARLY: tl.constexpr = False,
    EARLY_RES: tl.constexpr = False,
):
    # EARLY: the weight (no kernel of the step writes it) is loaded before the PDL wait, so
    # its HBM latency overlaps the predecessor's drain instead of following it. EARLY_RES:
    # the residual row too (pdl.EARLY_RESIDUAL: written by the norm before the attention or
    # MLP block, never by this kernel's direct predecessor, in the decoders that use it).
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # One program per row; rows are addressed by two strides so a [T, H, D] view into a
    # wider buffer (q/k norm on a slice of the qkv output) needs no copy.
    row = tl.program_id(0).to(tl.int64)
    outer = row // n_inner
    inner = row % n_inner
    if EARLY:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r_ptrs = res_ptr + outer * r_s0 + inner * r_s1 + cols
        if EARLY_RES:
            r = tl.load(r_ptrs, mask=mask, other=0.0)
    pdl_prologue(PDL)
    if NUM_PARTS > 1:
        # x is fp32 split-K partials [NUM_PARTS, rows, n_cols], contiguous, so part s of
        # this row lies s * rows * x_s0 further on. Deriving that stride from the grid keeps
        # the plain path's argument list (and so its compiled code) as it was.
        tl.static_assert(HAS_RESIDUAL, "partials need the residual's dtype")
        x_row = x_ptr + outer * x_s0 + inner * x_s1 + cols
        part_stride = tl.num_programs(0).to(tl.int64) * x_s0
        acc = tl.load(x_row, mask=mask, other=0.0)
        for s in tl.static_range(1, NUM_PARTS):  # fixed order: s = 0, 1, ...
            acc += tl.load(x_row + s * part_stride, mask=mask, other=0.0)
        # Rounded to the activation dtype, as F.linear's output would have been.
        x = acc.to(res_ptr.dtype.element_ty)
    else:
        x = tl.load(x_ptr + outer * x_s0 + inner * x_s1 + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        if not EARLY_RES:
            r = tl.load(r_ptrs, mask=mask, other=0.0)
        # Rounded to the input dtype before the norm, like `x = x + residual` in torch.
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(r_ptrs, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / n_cols
    xn = (xf * tl.rsqrt(var + eps)).to(x.dtype)
    if not EARLY:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = xn.to(tl.float32) * w.to(tl.float32)
    tl.store(out_ptr + outer * o_s0 + inner * o_s1 + cols, y, mask=mask)


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(tensor, n_inner, stride_outer, stride_inner) addressing every row of t by two strides."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 1:
        return t, 1, 0, 0
    if t.dim() == 2:
        return t, 1, t.stride(0), 0
    if t.dim() == 3:
        return t, t.shape[1], t.stride(0), t.stride(1)
    t2 = t.reshape(-1, t.shape[-1])  # rare: more leading dims; a view whenever possible
    return t2, 1, t2.stride(0), 0


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor | None,
    num_parts: int = 0,
    act_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """num_parts > 1: x is part 0 of contiguous fp32 partials and act_dtype the dtype their
    sum rounds to (residual's); otherwise x is the plain input."""
    n_cols = x.shape[-1]
    if weight.shape != (n_cols,):
        raise ValueError(f"weight shape {tuple(weight.shape)} does not match hidden {n_cols}")
    act_dtype = act_dtype or x.dtype
    out_dtype = torch.promote_types(weight.dtype, act_dtype)  # as `weight * xn` in torch
    if out is None:
        out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != out_dtype:
        raise ValueError("out has the wrong shape or dtype")
    n_rows = x.numel() // n_cols if n_cols else 0
    if n_rows == 0:
        return out
    xv, n_inner, x_s0, x_s1 = _rows(x)
    ov, o_inner, o_s0, o_s1 = _rows(out)
    if ov.data_ptr() != out.data_ptr() or o_inner != n_inner:
        raise ValueError("out must be addressable like x (last dim contiguous)")
    r_s0 = r_s1 = 0
    if residual is not None:
        rv, r_inner, r_s0, r_s1 = _rows(residual)
        # The sum is written back into residual, so it must be x's layout, in place.
        if rv.data_ptr() != residual.data_ptr() or r_inner != n_inner:
            raise ValueError("residual must be addressable like x (last dim contiguous)")
    block = triton.next_power_of_2(n_cols)
    # ~8 elements (16 bytes of bf16) per thread: vector loads, and one warp for head_dim rows.
    num_warps = max(1, min(16, block // 256))
    pdl = pdl_enabled(xv)
    _rmsnorm_kernel[(n_rows,)](
        xv,
        residual if residual is not None else xv,
        weight if weight.is_contiguous() else weight.contiguous(),
        ov,
        n_inner,
        x_s0,
        x_s1,
        r_s0,
        r_s1,
        o_s0,
        o_s1,
        n_cols,
        eps,
        HAS_RESIDUAL=residual is not None,
        BLOCK=block,
        NUM_PARTS=num_parts,
        PDL=pdl,
        EARLY=pdl and EARLY_LOADS,
        EARLY_RES=pdl and EARLY_RESIDUAL and residual is not None,
        num_warps=num_warps,
        launch_pdl=pdl,
    )
    return out


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """weight * rmsnorm(x) over the last dim; x is [..., H] with a contiguous last dim."""
    return _launch(x, None, weight, eps, out)


def fused_add_rmsnorm(
    x: torch.Tensor | SplitKPartials,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (rmsnorm(x + residual), x + residual); the sum is written INTO residual.

    One read of x and residual, two writes (the sum and the normed output). x may be
    SplitKPartials: then x is their sum in x.dtype (one read of each part instead of x).
    """
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError("x and residual must have the same shape and dtype")
    if not isinstance(x, SplitKPartials):
        return _launch(x, residual, weight, eps, out), residual
    parts = x.parts
    if parts.dtype != torch.float32 or parts.dim() != 3 or not parts.is_contiguous():
        raise ValueError("partials must be contiguous fp32 [S, M, N]")
    if parts.shape[0] < 2:  # nothing to reduce; the plain path needs x in the act dtype
        return _launch(x.materialize(), residual, weight, eps, out), residual
    y = _launch(parts[0], residual, weight, eps, out, parts.shape[0], x.dtype)
    return y, residual
