"""Per-step model inputs gathered from the RequestStateTable, in scheduled order.

This is the torch reference of the gather; on CUDA the next step moves it into Triton
kernels over device-resident tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strixlm.worker.states import RequestStateTable


@dataclass
class InputBatch:
    request_ids: list[str]
    rows: list[int]
    query_lens: list[int]
    seq_lens: list[int]  # context length after this step
    input_ids: torch.Tensor  # [T] on device
    positions: torch.Tensor  # [T] on device
    positions_cpu: torch.Tensor  # [T] host
    query_start_loc_cpu: list[int]
    rows_t: torch.Tensor  # [B] int64 host
    # Rows whose last scheduled token is the last known token: they sample this step.
    sample_mask: list[bool]

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc_cpu[-1]

    @property
    def logits_indices(self) -> list[int]:
        return [self.query_start_loc_cpu[i + 1] - 1 for i, s in enumerate(self.sample_mask) if s]


def gather_inputs(
    table: RequestStateTable,
    request_ids: list[str],
    num_scheduled: list[int],
    device: str,
) -> InputBatch:
    rows = [table.rows[r] for r in request_ids]
    rows_t = torch.tensor(rows, dtype=torch.int64)
    counts = torch.tensor(num_scheduled, dtype=torch.int64)
    start = table.num_computed[rows_t]
    qsl = [0]
    for n in num_scheduled:
        qsl.append(qsl[-1] + n)
    total = qsl[-1]
    # Position of each token: its row's first new position plus its offset in the row.
    row_of_tok = torch.repeat_interleave(torch.arange(len(rows)), counts)
    offs = torch.arange(total) - torch.tensor(qsl[:-1], dtype=torch.int64)[row_of_tok]
    positions = start[row_of_tok] + offs
    input_ids = table.token_ids[rows_t[row_of_tok], positions]
    seq_lens = (start + counts).tolist()
    num_tokens = table.num_tokens[rows_t].tolist()
    return InputBatch(
        request_ids=request_ids,
        rows=rows,
        query_lens=list(num_scheduled),
        seq_lens=seq_lens,
        input_ids=input_ids.to(device, non_blocking=True),
        positions=positions.to(device, non_blocking=True),
        positions_cpu=positions,
        query_start_loc_cpu=qsl,
        rows_t=rows_t,
        sample_mask=[s >= n for s, n in zip(seq_lens, num_tokens, strict=True)],
    )


def slot_mapping(
    table: RequestStateTable, group: int, batch: InputBatch, block_size: int
) -> torch.Tensor:
    """Cache slot of each new token: block_table[row, pos // bs] * bs + pos % bs (host)."""
    counts = torch.tensor(batch.query_lens, dtype=torch.int64)
    rows_tok = torch.repeat_interleave(batch.rows_t, counts)
    pos = batch.positions_cpu
    blocks = table.block_table[group][rows_tok, pos // block_size].long()
    return blocks * block_size + pos % block_size
