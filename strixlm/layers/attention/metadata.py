"""Per-step attention inputs shared by every attention layer of a KV-cache group."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    num_tokens: int
    query_start_loc: torch.Tensor  # [B+1] int32, device
    seq_lens: torch.Tensor  # [B] int32, device: tokens in context after this step
    block_table: torch.Tensor  # [B, max_blocks] int32, device
    slot_mapping: torch.Tensor  # [T] int64, device: cache slot of each new token
    # Host copies, known to the scheduler anyway, so reading them never syncs.
    query_start_loc_cpu: list[int]
    query_lens_cpu: list[int]
    seq_lens_cpu: list[int]
    max_query_len: int
    max_seq_len: int
    # Rows with a single query token (decodes), batched together by the torch backend.
    decode_rows: torch.Tensor | None = None  # [Bd] int64, device
    max_decode_seq_len: int = 0
    # [B] int32, device: a permutation of the rows, longest context first. The Triton
    # decode grid takes sequences in this order (scheduling only; results do not depend on it).
    seq_order: torch.Tensor | None = None

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1
