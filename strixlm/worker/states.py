"""RequestStateTable: each live request owns a stable row in fixed-size device tables.

Persistent state is not the model input: rows hold token ids, computed counts and block
tables on the device for as long as a request lives; each step gathers the rows it schedules
into fresh input buffers (input_batch.py). The host keeps mirrors of the counts (it knows them
anyway from the scheduler) so it never reads a device value back to plan a step.

The last row is a dummy that is never assigned: CUDA-graph padding points at it.

Room for speculative decoding: a drafter's K proposals for a row are written into the token
table right after its known tokens (`write_drafts`), without counting them as known, so the
unchanged gather builds a verification step of 1 + K query tokens when the scheduler asks for
them. The verifier's result is applied on the device (`accept_tokens`): the accepted prefix
plus the correction/bonus token become known tokens and num_tokens grows by the per-row
count, with no host read; the host mirror catches up when the counts arrive with the step's
other results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from strixlm.engine.request import Request, SamplingParams
from strixlm.kernels.append_tokens import append_tokens
from strixlm.worker.host_copy import to_device


@dataclass
class RowInfo:
    """Per-row values the step needs on the host."""

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
        device: str,
    ) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.device = device
        n = max_num_reqs + 1  # + the dummy row
        self.dummy_row = max_num_reqs
        # +1 column: a request at max_model_len still gets its last sampled token stored.
        self.token_ids = torch.zeros(n, max_model_len + 1, dtype=torch.int32, device=device)
        self.num_computed = torch.zeros(n, dtype=torch.int32, device=device)
        self.num_tokens = torch.zeros(n, dtype=torch.int32, device=device)
        self.block_table = torch.zeros(
            num_groups, n, max_blocks_per_req, dtype=torch.int32, device=device
        )
        # Host mirrors.
        self.num_computed_cpu = np.zeros(n, dtype=np.int64)
        self.num_tokens_cpu = np.zeros(n, dtype=np.int64)
        self.num_blocks = np.zeros((num_groups, n), dtype=np.int64)
        self.rows: dict[str, int] = {}
        self.info: list[RowInfo | None] = [None] * n
        self._free_rows = list(range(max_num_reqs - 1, -1, -1))
        if self.block_table.numel() >= 2**31:
            raise ValueError("block table too large for int32 flat indices")
        # Block-table writes not yet on the device, by flat index into block_table (a later
        # write to an entry replaces an earlier one): sent with the next step's inputs
        # (take_block_writes) or applied by flush.
        self._pending_blocks: dict[int, int] = {}
        # Draft proposals per row (speculative decoding); they live in token_ids past
        # num_tokens, and num_drafts says how many are valid.
        self.num_drafts = torch.zeros(n, dtype=torch.int32, device=device)

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, request: Request, block_ids: list[list[int]], num_computed: int) -> int:
        if request.request_id in self.rows:
            raise RuntimeError(f"request {request.request_id} already has a row")
        row = self._free_rows.pop()
        self.rows[request.request_id] = row
        toks = request.all_token_ids
        self.token_ids[row, : len(toks)].copy_(
            to_device(toks, self.device, torch.int32), non_blocking=True
        )
        self.num_tokens_cpu[row] = len(toks)
        self.num_computed_cpu[row] = num_computed
        self.num_blocks[:, row] = 0
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
        n, m = self.block_table.shape[1:]
        pending = self._pending_blocks
        for g, ids in enumerate(block_ids):
            start = int(self.num_blocks[g, row])
            base = (g * n + row) * m + start
            for i, b in enumerate(ids):
                pending[base + i] = b
            self.num_blocks[g, row] = start + len(ids)

    def take_block_writes(
        self, rows: list[int], max_writes: int, num_padded: int | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The pending block-table writes for input preparation to apply, grouped by batch
        row: (offsets [B + 1], (flat index, block id) pairs [W, 2]), both int32, where B is
        num_padded (default len(rows); padded rows get none); row b's pairs are
        offsets[b]:offsets[b + 1]. None when nothing is pending, or when some write's row is
        not in `rows` (the real rows, distinct) or there are more than max_writes: then they
        are applied here (flush_blocks)."""
        if not self._pending_blocks:
            return None
        pairs = np.fromiter(
            (v for kv in self._pending_blocks.items() for v in kv),
            dtype=np.int64,
            count=2 * len(self._pending_blocks),
        ).reshape(-1, 2)
        n, m = self.block_table.shape[1:]
        batch_index = np.full(n, -1, dtype=np.int64)
        batch_index[rows] = np.arange(len(rows))
        b = batch_index[(pairs[:, 0] // m) % n]
        if len(pairs) > max_writes or (b < 0).any():
            self.flush_blocks()
            return None
        self._pending_blocks.clear()
        order = np.argsort(b, kind="stable")
        num_b = len(rows) if num_padded is None else num_padded
        offsets = np.searchsorted(b[order], np.arange(num_b + 1))
        return offsets.astype(np.int32), pairs[order].astype(np.int32)

    def flush_blocks(self) -> None:
        """Apply the pending block-table writes now (a copy and an indexed store)."""
        if not self._pending_blocks:
            return
        flat = to_device(np.fromiter(self._pending_blocks, dtype=np.int64), self.device)
        ids = to_device(np.fromiter(self._pending_blocks.values(), np.int32), self.device)
        self.block_table.view(-1)[flat] = ids
        self._pending_blocks.clear()

    def flush(self, new_rows: list[int], defer_blocks: bool = False) -> None:
        """Send this step's deltas: counts of new rows and (unless defer_blocks: the step's
        input preparation applies them, see take_block_writes) new block-table entries."""
        if new_rows:
            idx = to_device(new_rows, self.device, torch.int64)
            vals = np.stack([self.num_computed_cpu[new_rows], self.num_tokens_cpu[new_rows]])
            v = to_device(vals, self.device, torch.int32)
            self.num_computed.index_copy_(0, idx, v[0])
            self.num_tokens.index_copy_(0, idx, v[1])
        if not defer_blocks:
            self.flush_blocks()

    def remove(self, request_id: str) -> None:
        row = self.rows.pop(request_id, None)
        if row is None:
            return
        self.info[row] = None
        self._free_rows.append(row)

    def append_sampled(self, rows: list[int], rows_dev: torch.Tensor, sampled: torch.Tensor):
        """Store sampled tokens on the device, where the next step's gather reads them."""
        append_tokens(self.token_ids, self.num_tokens, rows_dev, sampled)
        self.num_tokens_cpu[rows] += 1

    def write_drafts(self, rows_dev: torch.Tensor, drafts: torch.Tensor, num: torch.Tensor):
        """Place each row's draft tokens after its known ones (not counted as known).

        rows_dev [B], drafts [B, K] (entries past num[b] are ignored), num [B] in [0, K].
        """
        r = rows_dev.long()
        k = drafts.shape[1]
        cols = self.num_tokens[r].long()[:, None] + torch.arange(k, device=drafts.device)
        valid = (torch.arange(k, device=drafts.device)[None, :] < num[:, None]) & (
            cols <= self.max_model_len
        )
        rr = r[:, None].expand(-1, k)
        self.token_ids[rr[valid], cols[valid]] = drafts[valid].to(torch.int32)
        self.num_drafts[r] = num.to(torch.int32)

    def accept_tokens(self, rows_dev: torch.Tensor, tokens: torch.Tensor, num: torch.Tensor):
        """Apply a verification result on the device: tokens [B, K + 1] holds each row's
        accepted drafts followed by the verifier's own token; the first num[b] (>= 1) become
        known tokens. Drafts are cleared. The host mirror is updated by `sync_counts`."""
        r = rows_dev.long()
        width = tokens.shape[1]
        cols = self.num_tokens[r].long()[:, None] + torch.arange(width, device=tokens.device)
        valid = (torch.arange(width, device=tokens.device)[None, :] < num[:, None]) & (
            cols <= self.max_model_len
        )
        rr = r[:, None].expand(-1, width)
        self.token_ids[rr[valid], cols[valid]] = tokens[valid].to(torch.int32)
        self.num_tokens[r] += num.to(torch.int32)
        self.num_drafts[r] = 0

    def sync_counts(self, rows: list[int], num_accepted: list[int]) -> None:
        """The host learns how many tokens each row gained (from the step's results)."""
        self.num_tokens_cpu[rows] += np.asarray(num_accepted, dtype=np.int64)
