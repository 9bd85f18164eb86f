"""Triton helpers shared by the SSD chunk scan and the decode state update."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def softplus_clamp(dt, dt_min, dt_max, SOFTPLUS: tl.constexpr):
    """dt -> clamp(softplus(dt), dt_min, dt_max) in fp32, softplus as torch's (threshold 20).

    log1p(u) is taken with Kahan's trick, log(1+u) * u / ((1+u) - 1), which keeps full
    relative precision for small u = exp(dt) (dt around -7 is common: dt_bias init).
    """
    if SOFTPLUS:
        u = tl.exp(tl.minimum(dt, 20.0))
        v = 1.0 + u
        log1p_u = tl.where(v == 1.0, u, tl.log(v) * (u / (v - 1.0)))
        dt = tl.where(dt > 20.0, dt, log1p_u)
    return tl.minimum(tl.maximum(dt, dt_min), dt_max)


def dot_precision(dtype) -> str:
    """tl.dot input precision: exact fp32 for fp32 inputs (tests), tf32 otherwise.

    With bf16/fp16 inputs the raw operands are exact in tf32; only the fp32 products
    (decays times dt times x, states) get rounded to tf32's 10-bit mantissa, better than
    rounding them to the input dtype.
    """
    import torch

    return "ieee" if dtype == torch.float32 else "tf32"
