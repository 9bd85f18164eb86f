"""The attention backend interface: write new K/V into the paged cache, attend over it."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from strixlm.layers.attention.metadata import AttentionMetadata


class AttentionBackend(ABC):
    """One instance per attention layer.

    kv_cache layout: [2, num_blocks, block_size, num_kv_heads, head_dim]; index 0 holds K.
    """

    name: str = "abstract"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,  # [T, Hq, D]
        k: torch.Tensor,  # [T, Hkv, D]
        v: torch.Tensor,  # [T, Hkv, D]
        kv_cache: torch.Tensor,
        md: AttentionMetadata,
    ) -> torch.Tensor:  # [T, Hq, D]
        ...


def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple:
    return (2, num_blocks, block_size, num_kv_heads, head_dim)
