"""ModelState for hybrid Mamba-2 / attention models: Mamba metadata beside the attention's.

The attention part is the default state's, on KV-cache group 0 (attention groups come
first). Each Mamba group g adds one state slot per request: the single block the request
holds in that group, read from column 0 of the group's block table. A request continues
its saved state when it has computed tokens before this step (chunked prefill, decode);
a new or preempted-and-restarted one starts from zeros.

Block-table columns past a request's own blocks still name blocks of the row's previous
owner; in a hybrid pool such a block may now hold Mamba state (NaN/Inf as K/V). Backends
that read whole padded rows (the torch backend batches decode rows up to the longest)
would multiply it by zero probabilities, so those columns are pointed at the null block 0.
"""

from __future__ import annotations

import torch

from strixlm.layers.mamba2 import HybridMetadata, MambaMetadata
from strixlm.worker.input_batch import InputBatch
from strixlm.worker.model_states.base import ModelState
from strixlm.worker.model_states.default import DefaultModelState
from strixlm.worker.states import RequestStateTable


class HybridModelState(ModelState):
    def __init__(
        self,
        block_size: int,
        device: str,
        mamba_groups: tuple[int, int],
        decode_rows: bool = True,
    ) -> None:
        self.attn_state = DefaultModelState(block_size, device, decode_rows)
        self.block_size = block_size
        self.device = device
        self.mamba_groups = mamba_groups  # [first, end) group indices

    def _to_device(self, values: list[bool]) -> torch.Tensor:
        t = torch.tensor(values, dtype=torch.bool)
        if self.device.startswith("cuda"):
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def prepare(self, table: RequestStateTable, batch: InputBatch) -> HybridMetadata:
        attn = self.attn_state.prepare(table, batch)
        bt = attn.block_table  # a fresh gather: safe to edit in place
        own = (batch.seq_lens_dev + self.block_size - 1) // self.block_size
        cols = torch.arange(bt.shape[1], device=bt.device)
        bt.masked_fill_(cols[None, :] >= own[:, None], 0)
        first, end = self.mamba_groups
        rows = batch.rows_dev.long()
        state_indices = table.block_table[first:end, :, 0].index_select(1, rows)
        has_state = [s > q for s, q in zip(batch.seq_lens, batch.query_lens, strict=True)]
        mamba = MambaMetadata(
            num_tokens=batch.num_tokens_padded,
            query_start_loc=batch.query_start_loc,
            state_indices=state_indices,
            has_initial_state=self._to_device(has_state),
            is_decode=all(has_state) and max(batch.query_lens, default=1) == 1,
        )
        return HybridMetadata(attn, mamba)
