"""Default ModelState for pure-attention models: one full-attention KV-cache group."""

from __future__ import annotations

import torch

from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.worker.host_copy import to_device
from strixlm.worker.input_batch import InputBatch
from strixlm.worker.model_states.base import ModelState
from strixlm.worker.states import RequestStateTable


class DefaultModelState(ModelState):
    def __init__(self, block_size: int, device: str, decode_rows: bool = True) -> None:
        self.block_size = block_size
        self.device = device
        # Only the torch backend batches decode rows by index; others skip the copy.
        self.decode_rows = decode_rows

    def prepare(
        self,
        table: RequestStateTable,
        batch: InputBatch,
        max_seq_len: int | None = None,
    ) -> AttentionMetadata:
        """max_seq_len lets CUDA graphs pass the upper bound (then the block table is the
        input buffers' whole static one); otherwise the step's own sizes are used."""
        max_seq = max_seq_len or max(batch.seq_lens)
        nblk = -(-max_seq // self.block_size)
        block_table = batch.block_table[:, :nblk]  # gathered by the input-prep launch
        decode = [i for i, n in enumerate(batch.query_lens) if n == 1] if self.decode_rows else []
        return AttentionMetadata(
            num_tokens=batch.num_tokens_padded,
            query_start_loc=batch.query_start_loc,
            seq_lens=batch.seq_lens_dev,
            block_table=block_table,
            slot_mapping=batch.slot_mapping,
            query_start_loc_cpu=batch.query_start_loc_cpu,
            query_lens_cpu=batch.query_lens,
            seq_lens_cpu=batch.seq_lens,
            max_query_len=max(batch.query_lens, default=1),
            max_seq_len=max_seq,
            decode_rows=to_device(decode, self.device, torch.int64) if decode else None,
            max_decode_seq_len=max((batch.seq_lens[i] for i in decode), default=0),
            seq_order=batch.seq_order,
        )
