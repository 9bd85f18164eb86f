"""Default ModelState for pure-attention models: one full-attention KV-cache group."""

from __future__ import annotations

import torch

from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.worker.input_batch import InputBatch, slot_mapping
from strixlm.worker.model_states.base import ModelState
from strixlm.worker.states import RequestStateTable


class DefaultModelState(ModelState):
    def __init__(self, block_size: int, device: str) -> None:
        self.block_size = block_size
        self.device = device

    def prepare(self, table: RequestStateTable, batch: InputBatch) -> AttentionMetadata:
        dev = self.device
        max_seq = max(batch.seq_lens)
        nblk = -(-max_seq // self.block_size)
        block_table = table.block_table[0][batch.rows_t, :nblk]
        decode = [i for i, n in enumerate(batch.query_lens) if n == 1]
        return AttentionMetadata(
            num_tokens=batch.num_tokens,
            query_start_loc=torch.tensor(batch.query_start_loc_cpu, dtype=torch.int32).to(
                dev, non_blocking=True
            ),
            seq_lens=torch.tensor(batch.seq_lens, dtype=torch.int32).to(dev, non_blocking=True),
            block_table=block_table.to(dev, non_blocking=True),
            slot_mapping=slot_mapping(table, 0, batch, self.block_size).to(dev, non_blocking=True),
            query_start_loc_cpu=batch.query_start_loc_cpu,
            query_lens_cpu=batch.query_lens,
            seq_lens_cpu=batch.seq_lens,
            max_query_len=max(batch.query_lens),
            max_seq_len=max_seq,
            decode_rows=torch.tensor(decode, dtype=torch.int64).to(dev, non_blocking=True)
            if decode
            else None,
            max_decode_seq_len=max((batch.seq_lens[i] for i in decode), default=0),
        )
