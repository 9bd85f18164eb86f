"""Thinking budgets on the device: per-row columns and the per-step forced-token decision.

The semantics and the reasons for deciding on the device are in
strixlm/engine/thinking_budget.py; `ThinkingBudgetTracker` there is the plain-Python
reference of `decide_forced_tokens`. Columns are written once when a request gets its row
(its state rebuilt from its token history) and then only updated on the device, by the
decision itself, once per sampled token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from strixlm.engine.request import Request
from strixlm.engine.thinking_budget import MAX_MARKER_TOKENS, ThinkingBudgetTracker
from strixlm.worker.host_copy import to_device

T = MAX_MARKER_TOKENS
# Scalar columns, in this order, in `ThinkingBudgetTable.cols`.
_COLS = (
    "budget",  # -1: no budget
    "prompt_len",
    "starts",  # 1: the prompt left reasoning open
    "start_len",
    "end_len",
    "forced_len",
    "closed",  # state: reasoning over, or never began
    "forced",  # state: forced tokens emitted so far, -1 before forcing
)
BUDGET, PROMPT_LEN, STARTS, START_LEN, END_LEN, FORCED_LEN, CLOSED, FORCED = range(len(_COLS))
START_IDS, END_IDS, FORCED_IDS = range(3)


@dataclass
class BudgetRows:
    """The columns of this step's B rows, gathered: cols [C, B], ids [3, B, T]."""

    cols: torch.Tensor
    ids: torch.Tensor


def decide_forced_tokens(
    token_ids: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, g: BudgetRows
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For B rows about to sample position `pos` (their current length) given the state
    table's token_ids [R, W]: (forced token or -1, new `closed`, new `forced`), all [B].
    Fixed shapes and no host reads; rows without a budget get -1 and keep their state."""
    dev = token_ids.device
    width = token_ids.shape[1]
    budget, prompt_len, starts, start_len, end_len, forced_len, closed, forced = g.cols
    start_ids, end_ids, forced_ids = g.ids
    starts, closed = starts.bool(), closed.bool()
    j = torch.arange(T, device=dev)
    r2 = rows[:, None]

    def window(first: torch.Tensor) -> torch.Tensor:
        """[B, T] tokens at first + j; out-of-range reads are clamped and masked by callers."""
        return token_ids[r2, (first[:, None] + j).clamp(0, width - 1)]

    out_len = pos - prompt_len
    # Does the output open with the start tag (complete, or so far)?
    k = torch.minimum(out_len, start_len)
    head_ok = ((window(prompt_len) == start_ids) | (j >= k[:, None])).all(1)
    has_tag = start_len > 0
    opened = has_tag & head_ok & (out_len >= start_len)
    in_tag = has_tag & head_ok & (out_len < start_len)
    answer = ~starts & ~opened & ~in_tag
    waiting = in_tag & ((out_len > 0) | ~starts)
    n = out_len - torch.where(opened, start_len, 0)  # reasoning tokens so far
    # Did the last tokens complete the model's own closing tag?
    tail_ok = ((window(pos - end_len) == end_ids) | (j >= end_len[:, None])).all(1)
    closed_itself = tail_ok & (n >= end_len) & (forced < 0)
    # Forcing continues a closing sequence the model already began: the longest k < len,
    # k <= n, whose last k tokens are the forced sequence's first k.
    ks = j[1:]
    idx = (pos[:, None, None] - ks[None, :, None] + j).clamp(0, width - 1)  # [B, T-1, T]
    match = (token_ids[rows[:, None, None], idx] == forced_ids[:, None, :]) | (j >= ks[:, None])
    ok = match.all(2) & (ks < forced_len[:, None]) & (ks <= n[:, None])
    partial = (ok * ks).amax(1)

    act = (budget >= 0) & ~closed
    go = act & ~answer & ~waiting
    live = go & ~closed_itself
    cur = torch.where(forced >= 0, forced, torch.where(live & (n >= budget), partial, -1))
    emit = live & (cur >= 0) & (cur < forced_len)
    token = forced_ids.gather(1, cur.clamp(0, T - 1)[:, None])[:, 0]
    token = torch.where(emit, token, -1)
    new_closed = closed | (act & answer) | (go & closed_itself) | (live & (cur >= forced_len))
    new_forced = torch.where(emit, cur + 1, forced)
    return token, new_closed, new_forced


class ThinkingBudgetTable:
    """Per-row budget columns on the device, with host mirrors for writing new rows."""

    def __init__(self, num_rows: int, device: str) -> None:
        self.device = device
        self.cols_cpu = np.zeros((len(_COLS), num_rows), dtype=np.int64)
        self.cols_cpu[BUDGET] = -1
        self.ids_cpu = np.full((3, num_rows, T), -1, dtype=np.int64)
        # Copies: on CPU the device columns must not alias the host mirrors.
        self.cols = torch.tensor(self.cols_cpu, device=device)
        self.ids = torch.tensor(self.ids_cpu, device=device)
        self._pending: list[int] = []

    def add(self, row: int, request: Request) -> None:
        """Write a row's columns; its state is replayed from the tokens it already has."""
        sp = request.sampling_params
        self._pending.append(row)
        self.ids_cpu[:, row] = -1
        if sp.thinking_token_budget is None or sp.reasoning_markers is None:
            self.cols_cpu[:, row] = 0
            self.cols_cpu[BUDGET, row] = -1
            return
        m = sp.reasoning_markers
        tracker = ThinkingBudgetTracker(sp.thinking_token_budget, m, request.num_prompt_tokens)
        tracker.replay(request.all_token_ids)
        seqs = (m.start_token_ids, m.end_token_ids, m.forced_token_ids)
        self.cols_cpu[:, row] = (
            sp.thinking_token_budget,
            request.num_prompt_tokens,
            int(m.starts_in_reasoning),
            *(len(s) for s in seqs),
            int(tracker.closed),
            tracker.forced,
        )
        for i, s in enumerate(seqs):
            self.ids_cpu[i, row, : len(s)] = s

    def flush(self) -> None:
        if not self._pending:
            return
        rows = np.asarray(self._pending)
        self._pending.clear()
        idx = to_device(rows, self.device)
        self.cols.index_copy_(1, idx, to_device(self.cols_cpu[:, rows], self.device))
        self.ids.index_copy_(1, idx, to_device(self.ids_cpu[:, rows], self.device))

    def any_budget(self, rows: np.ndarray) -> bool:
        """Host-side check (mirrors only): does any of these rows have a budget?"""
        return bool((self.cols_cpu[BUDGET, rows] >= 0).any())

    def forced_tokens(
        self, token_ids: torch.Tensor, rows_dev: torch.Tensor, pos: torch.Tensor
    ) -> torch.Tensor:
        """[B] int64 tokens to force at `pos` (-1: sample); advances the rows' state."""
        r = rows_dev.long()
        g = BudgetRows(self.cols[:, r], self.ids[:, r])
        token, closed, forced = decide_forced_tokens(token_ids, r, pos.long(), g)
        self.cols[CLOSED, r] = closed.to(torch.int64)
        self.cols[FORCED, r] = forced
        return token
