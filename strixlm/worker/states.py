"""RequestStateTable: each live request owns a stable row in fixed-size tables.

Persistent state is not the model input: rows hold token ids, lengths, block tables and
sampling parameters for as long as a request lives; each step gathers the rows it schedules
into fresh input tensors (input_batch.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strixlm.engine.request import Request, SamplingParams


@dataclass
class RowInfo:
    """Per-row values the step needs on the host (small, never read back from a device)."""

    request_id: str
    params: SamplingParams
    seed: int
    prompt_len: int
    eos_token_id: int | None


class RequestStateTable:
    def __init__(
        self,
        max_num_reqs: int,
        max_model_len: int,
        max_blocks_per_req: int,
        num_groups: int,
    ) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        # Host tables; the step gathers from them and copies the gathered inputs once.
        self.token_ids = torch.zeros(max_num_reqs, max_model_len, dtype=torch.int64)
        self.num_tokens = torch.zeros(max_num_reqs, dtype=torch.int64)
        self.num_computed = torch.zeros(max_num_reqs, dtype=torch.int64)
        self.block_table = torch.zeros(
            num_groups, max_num_reqs, max_blocks_per_req, dtype=torch.int32
        )
        self.num_blocks = [[0] * max_num_reqs for _ in range(num_groups)]
        self.rows: dict[str, int] = {}
        self.info: list[RowInfo | None] = [None] * max_num_reqs
        self._free_rows = list(range(max_num_reqs - 1, -1, -1))

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, request: Request, block_ids: list[list[int]], num_computed: int) -> int:
        if request.request_id in self.rows:
            raise RuntimeError(f"request {request.request_id} already has a row")
        row = self._free_rows.pop()
        self.rows[request.request_id] = row
        toks = request.all_token_ids
        self.token_ids[row, : len(toks)] = torch.tensor(toks, dtype=torch.int64)
        self.num_tokens[row] = len(toks)
        self.num_computed[row] = num_computed
        for g in range(len(block_ids)):
            self.num_blocks[g][row] = 0
        self.append_blocks(row, block_ids)
        self.info[row] = RowInfo(
            request.request_id,
            request.sampling_params,
            request.sampling_seed,
            request.num_prompt_tokens,
            request.eos_token_id,
        )
        return row

    def append_blocks(self, row: int, block_ids: list[list[int]]) -> None:
        for g, ids in enumerate(block_ids):
            if not ids:
                continue
            start = self.num_blocks[g][row]
            self.block_table[g, row, start : start + len(ids)] = torch.tensor(
                ids, dtype=torch.int32
            )
            self.num_blocks[g][row] = start + len(ids)

    def remove(self, request_id: str) -> None:
        row = self.rows.pop(request_id, None)
        if row is None:
            return
        self.info[row] = None
        self._free_rows.append(row)

    def append_token(self, row: int, token_id: int) -> None:
        n = int(self.num_tokens[row])
        self.token_ids[row, n] = token_id
        self.num_tokens[row] = n + 1
