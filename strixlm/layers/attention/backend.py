"""The attention backend interface: write new K/V into the paged cache, attend over it."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

import torch

from strixlm.layers.attention.metadata import AttentionMetadata


class AttentionBackend(ABC):
    """One instance per attention layer: write_kv puts a step's K/V into the paged cache,
    attend reads it; forward does both.

    kv_cache layout: [2, num_blocks, block_size, num_kv_heads, head_dim]; index 0 holds K.
    Its memory may be head-major within a block (allocate_kv_cache): use its strides.
    """

    name: str = "abstract"
    # True when this backend's cache write is exactly strixlm.kernels.kv_write's (layout,
    # fp8 rounding and scales), so a fused kernel may do the write: attend() then takes the
    # Qwen3 q/k norm + rotary + write as qk_prologue (a kernels.qk_norm_rope.QKNormRopeWrite,
    # still to run on q and the step's K/V) and runs it first (see models/llama.py).
    kv_write_is_kernel_compatible: bool = False

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale

    @abstractmethod
    def write_kv(
        self,
        k: torch.Tensor,  # [T, Hkv, D]
        v: torch.Tensor,  # [T, Hkv, D]
        kv_cache: torch.Tensor,
        md: AttentionMetadata,
    ) -> None: ...

    @abstractmethod
    def attend(
        self,
        q: torch.Tensor,  # [T, Hq, D]
        kv_cache: torch.Tensor,
        md: AttentionMetadata,
    ) -> torch.Tensor:  # [T, Hq, D]
        ...

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        md: AttentionMetadata,
    ) -> torch.Tensor:
        self.write_kv(k, v, kv_cache, md)
        return self.attend(q, kv_cache, md)


# Opt-in (STRIXLM_KV_HEAD_MAJOR=1, read at import): each block's memory head-major,
# [heads, block_size, head_dim], under the same logical view, so one kv head's tokens of a
# block are one run (4 KB at Qwen3-0.6B's shape), not one 256-byte row a token with the
# token's other heads between (2 KB apart). Decode attention reads one head a program.
# sweep_decode_attn.py saw no gain with single-buffered K / V (sessions 5, 13); not yet
# measured with the double-buffered kernels.
KV_HEAD_MAJOR = os.environ.get("STRIXLM_KV_HEAD_MAJOR", "0") == "1"


def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple:
    return (2, num_blocks, block_size, num_kv_heads, head_dim)


def allocate_kv_cache(
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
    head_major: bool | None = None,
) -> torch.Tensor:
    """A zeroed cache of kv_cache_shape's logical shape; head-major blocks in memory when
    head_major (None: KV_HEAD_MAJOR)."""
    if not (KV_HEAD_MAJOR if head_major is None else head_major):
        shape = kv_cache_shape(num_blocks, block_size, num_kv_heads, head_dim)
        return torch.zeros(shape, dtype=dtype, device=device)
    shape = (2, num_blocks, num_kv_heads, block_size, head_dim)
    return torch.zeros(shape, dtype=dtype, device=device).transpose(2, 3)
