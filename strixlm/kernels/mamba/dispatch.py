"""Shared plumbing of the Mamba-2 kernels: which path runs, and cheap shape checks.

Every public function runs its Triton kernel on CUDA tensors and its torch reference
otherwise (CPU, or STRIXLM_DISABLE_TRITON=1, or no triton installed). The checks only read
shapes and dtypes, never tensor values, so they cost no device sync and are graph-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from strixlm.kernels.dispatch import HAS_TRITON, use_triton  # noqa: F401 (the kernels' API)


def check_shape(name: str, t: torch.Tensor | None, shape: Sequence[int]) -> None:
    """Raise a ValueError naming the argument when t's shape is not `shape`."""
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def check_dim(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")


def check_seq_args(
    query_start_loc: torch.Tensor, state_indices: torch.Tensor, has_initial_state: torch.Tensor
) -> int:
    """Validate the per-sequence arguments of the varlen calls; returns num_seqs."""
    check_dim("query_start_loc", query_start_loc, 1)
    num_seqs = query_start_loc.shape[0] - 1
    if num_seqs < 0:
        raise ValueError("query_start_loc must hold num_seqs + 1 offsets")
    check_shape("state_indices", state_indices, (num_seqs,))
    check_shape("has_initial_state", has_initial_state, (num_seqs,))
    for name, t in (("query_start_loc", query_start_loc), ("state_indices", state_indices)):
        if t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name} must be an integer tensor, got {t.dtype}")
    return num_seqs


def activation_flag(activation: str | None) -> bool:
    """True for silu, False for no activation; anything else is an error."""
    if activation not in ("silu", "swish", None):
        raise ValueError(f"activation must be 'silu' or None, got {activation!r}")
    return activation is not None
