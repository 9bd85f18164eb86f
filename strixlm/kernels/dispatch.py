"""Which path a kernel call takes: its Triton kernel on CUDA tensors, its torch reference
otherwise (CPU, no triton installed, or STRIXLM_DISABLE_TRITON=1 to force the references on
CUDA too, for A/B checks)."""

from __future__ import annotations

import importlib.util
import os

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def triton_disabled() -> bool:
    return os.environ.get("STRIXLM_DISABLE_TRITON", "0") != "0"


def use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda and HAS_TRITON and not triton_disabled()
