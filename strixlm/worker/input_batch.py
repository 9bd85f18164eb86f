"""Per-step model inputs gathered from the RequestStateTable, in scheduled order.

The host sends small arrays (the rows scheduled, their query start offsets and order,
padded for CUDA graphs, and the step's new block-table entries); kernels/input_prep.py
builds token ids, positions, slot mappings, sequence lengths and the attention's block table
on the device into persistent buffers that CUDA graphs replay from, and applies the block
writes, all in one launch.

On CUDA the kernel reads the host's arrays straight from pinned memory and writes their
device copies itself, so no copy sits between the previous step's graphs and this step's
(STRIXLM_PREP_HOST_READ=0, read at import: copy them first, for A/B runs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from strixlm.kernels.input_prep import StagedMeta, pack_step_meta, prepare_inputs
from strixlm.worker.host_copy import PinnedStaging
from strixlm.worker.states import RequestStateTable

HOST_READ = os.environ.get("STRIXLM_PREP_HOST_READ", "1") != "0"


class InputBuffers:
    """Persistent device buffers, sized for the largest step; max_blocks is the state
    table's block-table width (the attention's block table of the scheduled rows is one)."""

    def __init__(self, max_tokens: int, max_reqs: int, device: str, max_blocks: int) -> None:
        self.input_ids = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.slot_mapping = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(max_reqs, dtype=torch.int32, device=device)
        # Static: CUDA graphs capture it and every step's input prep refills it.
        self.block_table = torch.zeros(max_reqs, max_blocks, dtype=torch.int32, device=device)
        # More new blocks than this in one step (a step of T tokens allocates at most
        # T + B in a group at block size 1) are written by the table's own copy instead.
        self.max_writes = max_tokens + max_reqs
        m = max_reqs
        self.rows = torch.zeros(m, dtype=torch.int32, device=device)
        self.query_start_loc = torch.zeros(m + 1, dtype=torch.int32, device=device)
        self.seq_order = torch.zeros(m, dtype=torch.int32, device=device)
        # The host's per-step arrays, packed (input_prep.StagedMeta) in one buffer that one
        # copy sends, or that the input-prep kernel reads in place: the batch rows' structs,
        # then the block writes from _entries_at.
        self._entries_at = 4 * (m + 1)
        size = self._entries_at + 2 * self.max_writes
        self.staged = torch.zeros(size, dtype=torch.int32, device=device)
        self.max_reqs = max_reqs
        self.staging = PinnedStaging(size, torch.int32, device)
        self.device = device
        self.host_read = HOST_READ and device.startswith("cuda")

    def stage(
        self,
        rows: list[int],
        qsl: np.ndarray,
        order: np.ndarray,
        writes: tuple[np.ndarray, np.ndarray] | None,
        table: torch.Tensor,
    ) -> StagedMeta:
        """Pack this step's rows, query start offsets, sequence order and block writes into
        the next pinned buffer, then copy it to the device, or (host_read) leave it for the
        input-prep kernel to read in place: call `release` once that kernel is launched.
        table: the state table's whole block table, which the writes index."""
        b, e0 = len(rows), self._entries_at
        host = self.staging.buffer()
        nw = pack_step_meta(host, rows, qsl, order, writes, e0)
        if self.host_read:
            src = self.staging.pinned()
        else:
            src = self.staged
            self.staging.upload(src, e0 + 2 * nw if nw else 4 * (b + 1))
        return StagedMeta(src[: 4 * (b + 1)], src[e0 : e0 + 2 * nw], nw, table, self.seq_order[:b])

    def release(self) -> None:
        """The kernel reading the staged buffer in place is launched."""
        if self.host_read:
            self.staging.commit()


@dataclass
class InputBatch:
    request_ids: list[str]
    rows: list[int]  # real rows, scheduled order
    query_lens: list[int]
    seq_lens: list[int]  # context length after this step
    query_start_loc_cpu: list[int]
    num_reqs_padded: int
    num_tokens_padded: int
    # Device views of the persistent buffers, padded sizes.
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens_dev: torch.Tensor
    query_start_loc: torch.Tensor
    rows_dev: torch.Tensor
    # Batch rows longest context first, then the padded rows: attention starts the longest
    # decode programs first, so the grid does not end on a long straggler.
    seq_order: torch.Tensor
    # Rows whose last scheduled token is the last known token: they sample this step.
    sample_mask: list[bool]
    # [num_reqs_padded, max_blocks] int32: row b's block table (the columns its sequence
    # uses are current, the rest stale).
    block_table: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc_cpu[-1]

    @property
    def num_reqs(self) -> int:
        return len(self.rows)

    @property
    def logits_indices(self) -> list[int]:
        return [self.query_start_loc_cpu[i + 1] - 1 for i, s in enumerate(self.sample_mask) if s]


def gather_inputs(
    table: RequestStateTable,
    bufs: InputBuffers,
    request_ids: list[str],
    num_scheduled: list[int],
    block_size: int,
    num_reqs_padded: int | None = None,
    num_tokens_padded: int | None = None,
) -> InputBatch:
    """Padding for CUDA graphs. Decode graphs (num_reqs_padded only): the extra rows are
    one-token rows on the dummy row. Mixed graphs (num_tokens_padded too): the extra rows are
    zero-length sequences on the dummy row, and the tokens past the real ones belong to no
    sequence (slot -1: nothing is written to the cache; attention leaves their rows)."""
    rows = [table.rows[r] for r in request_ids]
    n = len(rows)
    b_pad = num_reqs_padded or n
    pad = b_pad - n
    qsl = np.zeros(b_pad + 1, dtype=np.int64)
    pad_len = 0 if num_tokens_padded is not None else 1
    np.cumsum(num_scheduled + [pad_len] * pad, out=qsl[1:])
    rows_padded = rows + [table.dummy_row] * pad
    start = table.num_computed_cpu[rows]
    seq_lens_np = start + np.asarray(num_scheduled, dtype=start.dtype)
    order = np.concatenate([np.argsort(-seq_lens_np, kind="stable"), np.arange(n, b_pad)])
    t_pad = int(qsl[-1])
    if num_tokens_padded is not None and num_tokens_padded < t_pad:
        # Before the block writes are taken from the table: they must not be lost.
        raise ValueError(f"{t_pad} tokens do not fit a graph of {num_tokens_padded}")
    writes = table.take_block_writes(rows, bufs.max_writes, b_pad)
    staged = bufs.stage(rows_padded, qsl, order, writes, table.block_table)
    if num_tokens_padded is not None:
        bufs.slot_mapping[t_pad:num_tokens_padded].fill_(-1)
        t_pad = num_tokens_padded
    rows_dev = bufs.rows[:b_pad]
    block_table = bufs.block_table[:b_pad]
    prepare_inputs(
        table.token_ids,
        table.num_computed,
        table.block_table[0],
        rows_dev,
        bufs.query_start_loc[: b_pad + 1],
        block_size,
        bufs.input_ids[:t_pad],
        bufs.positions[:t_pad],
        bufs.slot_mapping[:t_pad],
        bufs.seq_lens[:b_pad],
        max_query_len=max(num_scheduled, default=1),
        num_real=n,  # advances the device view of progress by what this step computes
        block_table_out=block_table,
        staged=staged,
    )
    bufs.release()
    seq_lens = seq_lens_np.tolist()
    table.num_computed_cpu[rows] = seq_lens
    num_tokens = table.num_tokens_cpu[rows].tolist()
    return InputBatch(
        request_ids=request_ids,
        rows=rows,
        query_lens=list(num_scheduled),
        seq_lens=seq_lens,
        query_start_loc_cpu=qsl[: n + 1].tolist(),
        num_reqs_padded=b_pad,
        num_tokens_padded=t_pad,
        input_ids=bufs.input_ids[:t_pad],
        positions=bufs.positions[:t_pad],
        slot_mapping=bufs.slot_mapping[:t_pad],
        seq_lens_dev=bufs.seq_lens[:b_pad],
        query_start_loc=bufs.query_start_loc[: b_pad + 1],
        rows_dev=rows_dev,
        seq_order=bufs.seq_order[:b_pad],
        sample_mask=[s >= t for s, t in zip(seq_lens, num_tokens, strict=True)],
        block_table=block_table,
    )
