"""Gated activations."""

from __future__ import annotations

import importlib.util
import os

import torch
import torch.nn.functional as F

_HAS_TRITON = importlib.util.find_spec("triton") is not None


def _use_triton(x: torch.Tensor) -> bool:
    # The Triton kernel on CUDA; the torch code (HF's numerics) on CPU or when disabled.
    return x.is_cuda and _HAS_TRITON and os.environ.get("STRIXLM_DISABLE_TRITON", "0") == "0"


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x = [gate | up] along the last dim; returns silu(gate) * up."""
    if _use_triton(x):
        from strixlm.kernels.activation import silu_and_mul as triton_silu_and_mul

        return triton_silu_and_mul(x)
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
