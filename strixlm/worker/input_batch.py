"""Per-step model inputs gathered from the RequestStateTable, in scheduled order.

The host sends two small arrays (the rows scheduled and their query start offsets, padded
for CUDA graphs); kernels/input_prep.py builds token ids, positions, slot mappings and
sequence lengths on the device into persistent buffers that CUDA graphs replay from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from strixlm.kernels.input_prep import prepare_inputs
from strixlm.worker.host_copy import PinnedStaging
from strixlm.worker.states import RequestStateTable


class InputBuffers:
    """Persistent device buffers, sized for the largest step."""

    def __init__(self, max_tokens: int, max_reqs: int, device: str) -> None:
        self.input_ids = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.slot_mapping = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(max_reqs, dtype=torch.int32, device=device)
        # The host's per-step arrays, in one buffer so that one copy sends them all:
        # rows | query_start_loc | seq_order.
        self.meta = torch.zeros(3 * max_reqs + 1, dtype=torch.int32, device=device)
        self.rows = self.meta[:max_reqs]
        self.query_start_loc = self.meta[max_reqs : 2 * max_reqs + 1]
        self.seq_order = self.meta[2 * max_reqs + 1 :]
        self.max_reqs = max_reqs
        self.staging = PinnedStaging(self.meta.numel(), torch.int32, device)
        self.device = device

    def upload(self, rows: list[int], qsl: np.ndarray, order: np.ndarray) -> None:
        """This step's rows, query start offsets and sequence order, in one copy."""
        b, m = len(rows), self.max_reqs
        host = self.staging.buffer()
        host[:b] = rows
        host[m : m + b + 1] = qsl
        host[2 * m + 1 : 2 * m + 1 + b] = order
        self.staging.upload(self.meta, 2 * m + 1 + b)


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
    bufs.upload(rows_padded, qsl, order)
    t_pad = int(qsl[-1])
    if num_tokens_padded is not None:
        if num_tokens_padded < t_pad:
            raise ValueError(f"{t_pad} tokens do not fit a graph of {num_tokens_padded}")
        bufs.slot_mapping[t_pad:num_tokens_padded].fill_(-1)
        t_pad = num_tokens_padded
    rows_dev = bufs.rows[:b_pad]
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
    )
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
    )
