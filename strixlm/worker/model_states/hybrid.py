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

CUDA-graph decode steps (worker/cuda_graphs.py) take their Mamba metadata from static
buffers (MambaGraphBuffers) refreshed before each replay. Padded rows sit on the state
table's dummy row, whose block-table entries are all the null block 0: their state slot is
block 0 in every Mamba group, a block the pool never hands out, so no request ever reads
what they write. A captured step always runs the one-token recurrent kernels; a row that
has no state yet (a one-token prompt) gets its slots zeroed first, which is what the
varlen kernels' has_initial_state = False means.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strixlm.layers.mamba2 import HybridMetadata, Mamba2Mixer, MambaMetadata
from strixlm.worker.host_copy import to_device
from strixlm.worker.input_batch import InputBatch
from strixlm.worker.model_states.base import ModelState
from strixlm.worker.model_states.default import DefaultModelState
from strixlm.worker.states import RequestStateTable


@dataclass
class MambaGraphBuffers:
    """Device buffers a captured decode step reads its Mamba metadata from."""

    # [num_mamba_groups, max_reqs] int32; a step of b rows uses [:, :b] (rows contiguous).
    state_indices: torch.Tensor
    # [max_reqs] bool, all True: the recurrent kernels always continue a state.
    has_initial_state: torch.Tensor


def fresh_rows(batch: InputBatch) -> list[int]:
    """Real rows of the step with no computed tokens before it (no Mamba state yet)."""
    pairs = zip(batch.seq_lens, batch.query_lens, strict=True)
    return [i for i, (seq_len, query_len) in enumerate(pairs) if seq_len <= query_len]


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

    def _state_source(self, table: RequestStateTable) -> torch.Tensor:
        """[num_mamba_groups, rows] view: each row's state block in each Mamba group."""
        first, end = self.mamba_groups
        return table.block_table[first:end, :, 0]

    def prepare(self, table: RequestStateTable, batch: InputBatch) -> HybridMetadata:
        attn = self.attn_state.prepare(table, batch)
        bt = attn.block_table  # the input buffers' gather, rewritten every step: editable
        own = (batch.seq_lens_dev + self.block_size - 1) // self.block_size
        cols = torch.arange(bt.shape[1], device=bt.device)
        bt.masked_fill_(cols[None, :] >= own[:, None], 0)
        rows = batch.rows_dev.long()
        state_indices = self._state_source(table).index_select(1, rows)
        has_state = [s > q for s, q in zip(batch.seq_lens, batch.query_lens, strict=True)]
        mamba = MambaMetadata(
            num_tokens=batch.num_tokens_padded,
            query_start_loc=batch.query_start_loc,
            state_indices=state_indices,
            has_initial_state=to_device(has_state, self.device, torch.bool),
            is_decode=all(has_state) and max(batch.query_lens, default=1) == 1,
        )
        return HybridMetadata(attn, mamba)

    # ---- CUDA-graph decode steps ---------------------------------------------------------
    def graph_buffers(self, max_reqs: int) -> MambaGraphBuffers:
        first, end = self.mamba_groups
        return MambaGraphBuffers(
            state_indices=torch.zeros(end - first, max_reqs, dtype=torch.int32, device=self.device),
            has_initial_state=torch.ones(max_reqs, dtype=torch.bool, device=self.device),
        )

    def prepare_graph(
        self,
        table: RequestStateTable,
        batch: InputBatch,
        max_seq_len: int,
        buffers: MambaGraphBuffers,
    ) -> HybridMetadata:
        """Metadata of a one-token-per-row step (padded to batch.num_reqs_padded) whose every
        tensor lives in a static buffer, refreshed in place: what a graph captured with it
        reads on replay. No host reads of device values.

        The block table keeps stale columns past each row's own blocks: graphs run only
        with a graph-safe backend (Triton), which never reads past a row's length."""
        attn = self.attn_state.prepare(table, batch, max_seq_len=max_seq_len)
        b = batch.num_reqs_padded
        state_indices = buffers.state_indices[:, :b]
        state_indices.copy_(self._state_source(table).index_select(1, batch.rows_dev.long()))
        mamba = MambaMetadata(
            num_tokens=batch.num_tokens_padded,
            query_start_loc=batch.query_start_loc,
            state_indices=state_indices,
            has_initial_state=buffers.has_initial_state[:b],
            is_decode=True,
        )
        return HybridMetadata(attn, mamba)

    def zero_fresh_states(
        self, batch: InputBatch, md: HybridMetadata, layers: list[Mamba2Mixer]
    ) -> int:
        """Zero the state slots of rows that have no state yet, so the recurrent kernels
        start them from zeros; returns how many rows that was (usually none)."""
        fresh = fresh_rows(batch)
        if not fresh:
            return 0
        cols = to_device(fresh, self.device, torch.int64)
        slots = md.mamba.state_indices.index_select(1, cols).long()  # [groups, fresh]
        for layer in layers:
            idx = slots[layer.state_group]
            layer.conv_states.index_fill_(0, idx, 0)
            layer.ssm_states.index_fill_(0, idx, 0)
        return len(fresh)
