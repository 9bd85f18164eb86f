"""Attention metadata for model-level tests that run a layer or a model by hand."""

from __future__ import annotations

import torch

from strixlm.layers.attention.metadata import AttentionMetadata


def one_prompt_metadata(t: int, block: int = 16) -> AttentionMetadata:
    """One sequence's t-token prompt, all new, in cache blocks 1, 2, ... (slots block ..
    block + t - 1): the cache needs ceil(t / block) + 1 blocks of `block` slots."""
    blocks = -(-t // block)
    return AttentionMetadata(
        num_tokens=t,
        query_start_loc=torch.tensor([0, t], dtype=torch.int32),
        seq_lens=torch.tensor([t], dtype=torch.int32),
        block_table=torch.arange(1, blocks + 1, dtype=torch.int32)[None],
        slot_mapping=torch.arange(block, block + t),
        query_start_loc_cpu=[0, t],
        query_lens_cpu=[t],
        seq_lens_cpu=[t],
        max_query_len=t,
        max_seq_len=t,
    )
