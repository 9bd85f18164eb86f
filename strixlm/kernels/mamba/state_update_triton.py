"""Triton kernel of the Mamba-2 decode step (selective_state_update), one token per sequence.

One program per (sequence, head, block of head_dim rows): it reads that [rows, dstate] tile
of the fp32 state once, decays it, adds dt * x * B, writes it back and contracts it with C.
The step is memory-bound on the state (about 2 MB per layer at Nemotron 3 Nano shapes), so
small row blocks keep enough programs in flight at batch 1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strixlm.kernels.mamba.triton_common import softplus_clamp


@triton.jit
def _state_update_kernel(
    ssm_ptr,
    x_ptr,
    dt_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    dtb_ptr,
    sidx_ptr,
    y_ptr,
    heads_per_group,
    headdim,
    dstate,
    dt_min,
    dt_max,
    ss_s,
    ss_h,
    ss_p,
    ss_n,
    x_sb,
    x_sh,
    x_sp,
    dt_sb,
    dt_sh,
    b_sb,
    b_sg,
    b_sn,
    c_sb,
    c_sg,
    c_sn,
    y_sb,
    y_sh,
    y_sp,
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_ok = p < headdim
    n_ok = n < dstate
    g = h // heads_per_group
    slot = tl.load(sidx_ptr + b).to(tl.int64)
    dt = tl.load(dt_ptr + b * dt_sb + h * dt_sh).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dtb_ptr + h).to(tl.float32)
    dt = softplus_clamp(dt, dt_min, dt_max, SOFTPLUS)
    decay = tl.exp(dt * tl.load(a_ptr + h).to(tl.float32))
    xv = tl.load(x_ptr + b * x_sb + h * x_sh + p * x_sp, mask=p_ok, other=0.0).to(tl.float32)
    bv = tl.load(b_ptr + b * b_sb + g * b_sg + n * b_sn, mask=n_ok, other=0.0).to(tl.float32)
    cv = tl.load(c_ptr + b * c_sb + g * c_sg + n * c_sn, mask=n_ok, other=0.0).to(tl.float32)
    ptrs = ssm_ptr + slot * ss_s + h * ss_h + p[:, None] * ss_p + n[None, :] * ss_n
    ok = p_ok[:, None] & n_ok[None, :]
    state = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    state = state * decay + (dt * xv)[:, None] * bv[None, :]
    tl.store(ptrs, state.to(ssm_ptr.dtype.element_ty), mask=ok)
    y = tl.sum(state * cv[None, :], axis=1)
    if HAS_D:
        y += tl.load(d_ptr + h).to(tl.float32) * xv
    tl.store(y_ptr + b * y_sb + h * y_sh + p * y_sp, y.to(y_ptr.dtype.element_ty), mask=p_ok)


def launch_state_update(
    ssm_states: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    state_indices: torch.Tensor,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """Launch on already validated arguments; returns y [batch, nheads, headdim]."""
    batch, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1], B.shape[2]
    y = torch.empty((batch, nheads, headdim), dtype=x.dtype, device=x.device)
    if batch == 0:
        return y
    block_n = triton.next_power_of_2(dstate)
    # ~2k state elements per program: 256 programs per layer at batch 1 with 64 heads of 64.
    block_p = max(1, min(triton.next_power_of_2(headdim), 2048 // block_n))
    grid = (batch, nheads, triton.cdiv(headdim, block_p))
    _state_update_kernel[grid](
        ssm_states,
        x,
        dt,
        A,
        B,
        C,
        D if D is not None else A,
        dt_bias if dt_bias is not None else A,
        state_indices,
        y,
        nheads // ngroups,
        headdim,
        dstate,
        float(dt_limit[0]),
        float(dt_limit[1]),
        *ssm_states.stride(),
        *x.stride(),
        *dt.stride(),
        *B.stride(),
        *C.stride(),
        *y.stride(),
        HAS_DT_BIAS=dt_bias is not None,
        HAS_D=D is not None,
        SOFTPLUS=dt_softplus,
        BLOCK_P=block_p,
        BLOCK_N=block_n,
        num_warps=4 if block_p * block_n >= 2048 else 2,
    )
    return y
