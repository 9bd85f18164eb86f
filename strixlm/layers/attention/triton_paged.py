"""Paged attention with the Triton kernels: KV write + unified (optionally split-K) attention.

On CUDA (or on CPU under TRITON_INTERPRET=1) the kernels run; on a plain CPU install, or
with STRIXLM_DISABLE_TRITON=1, the torch references run instead.
Graph-safe on CUDA: no host reads of device tensors, grids from host ints only.
"""

from __future__ import annotations

import torch

from strixlm.kernels.dispatch import triton_disabled
from strixlm.kernels.kv_write import HAS_TRITON, write_kv, write_kv_ref
from strixlm.kernels.paged_attention import (
    interpreter_active,
    paged_attention,
    paged_attention_ref,
)
from strixlm.layers.attention.backend import AttentionBackend
from strixlm.layers.attention.metadata import AttentionMetadata


class TritonPagedAttention(AttentionBackend):
    name = "triton"
    # Reads only device metadata and host upper bounds: safe to capture in a CUDA graph.
    graph_safe = True
    kv_write_is_kernel_compatible = True  # it runs strixlm.kernels.kv_write itself
    # Overridable per instance or class: None = heuristic, 1 = never split, n = n segments.
    num_splits: int | None = None

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, scale)
        # Per-layer dequantization scales of an fp8 (float8_e4m3fn) cache; unused otherwise.
        self.k_scale = 1.0
        self.v_scale = 1.0

    @staticmethod
    def use_triton(device: torch.device) -> bool:
        if not HAS_TRITON or triton_disabled():
            return False
        return device.type == "cuda" or interpreter_active()

    def write_kv(self, k, v, kv_cache, md: AttentionMetadata) -> None:
        if self.use_triton(k.device):
            write_kv(kv_cache, k, v, md.slot_mapping, self.k_scale, self.v_scale)
        else:
            write_kv_ref(kv_cache, k, v, md.slot_mapping, self.k_scale, self.v_scale)

    def forward(self, q, k, v, kv_cache, md: AttentionMetadata) -> torch.Tensor:
        self.write_kv(k, v, kv_cache, md)
        return self.attend(q, kv_cache, md, k_new=k, v_new=v)

    def attend(self, q, kv_cache, md: AttentionMetadata, qk_prologue=None, k_new=None, v_new=None):
        """k_new / v_new: the step's K / V as just written, which the kernels may read in
        place of the cache for the step's own tokens (paged_attention)."""
        if not self.use_triton(q.device):
            if qk_prologue is not None:
                qk_prologue.run(q, kv_cache)
            return paged_attention_ref(
                q,
                kv_cache,
                md.query_lens_cpu,
                md.seq_lens_cpu,
                md.block_table,
                self.scale,
                self.k_scale,
                self.v_scale,
            )
        return paged_attention(
            q,
            kv_cache,
            md.query_start_loc,
            md.seq_lens,
            md.block_table,
            self.scale,
            max_query_len=md.max_query_len,
            max_seq_len=md.max_seq_len,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
            num_splits=self.num_splits,
            seq_order=md.seq_order,
            qk_prologue=qk_prologue,
            k_new=k_new,
            v_new=v_new,
        )
