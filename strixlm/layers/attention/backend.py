"""The attention backend interface: write new K/V into the paged cache, attend over it."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from strixlm.layers.attention.metadata import AttentionMetadata


class AttentionBackend(ABC):
    """One instance per attention layer: write_kv puts a step's K/V into the paged cache,
    attend reads it; forward does both.

    kv_cache layout: [2, num_blocks, block_size, num_kv_heads, head_dim]; index 0 holds K.
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


def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple:
    return (2, num_blocks, block_size, num_kv_heads, head_dim)
