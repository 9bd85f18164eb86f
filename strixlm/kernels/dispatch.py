"""Which path a kernel call takes: its Triton kernel on CUDA tensors, its torch reference
otherwise (CPU, no triton installed, or STRIXLM_DISABLE_TRITON=1 to force the references on
CUDA too, for A/B checks)."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def triton_disabled() -> bool:
    return os.environ.get("STRIXLM_DISABLE_TRITON", "0") != "0"


def use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda and HAS_TRITON and not triton_disabled()


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """The SM count of a CUDA device (an index-less device means the current one)."""
    return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _cuda_capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def capability_major(device: torch.device) -> int:
    """The compute capability's major version of a CUDA device (cached per device)."""
    return _cuda_capability_major(
        device.index if device.index is not None else torch.cuda.current_device()
    )


def persistent_sms(device: torch.device) -> int:
    """SMs a persistent kernel's grid is sized by (a few programs an SM); 3 off CUDA (the
    interpreter), so tests walk several tiles per program."""
    return sm_count(device) if device.type == "cuda" else 3
