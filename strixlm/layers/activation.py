"""Gated activations."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# use_triton: the Triton kernel on CUDA; the torch code (HF's numerics) on CPU or disabled.
from strixlm.kernels.dispatch import use_triton


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x = [gate | up] along the last dim; returns silu(gate) * up."""
    if use_triton(x):
        from strixlm.kernels.activation import silu_and_mul as triton_silu_and_mul

        return triton_silu_and_mul(x)
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
