"""Sampling parameters as persistent per-row columns, on the device and mirrored on the host.

A request's parameters are written once, when it gets its row; each step gathers the rows
it samples with device indexing, so no per-step host tensors are built. The host mirrors
(numpy) decide the skip flags with vectorized checks instead of per-request Python.
"""

from __future__ import annotations

import numpy as np
import torch

from strixlm.sample.metadata import SAMPLING_EPS, SamplingMetadata
from strixlm.worker.host_copy import to_device
from strixlm.worker.states import RowInfo

_FLOAT_COLS = ("temperature", "top_p", "min_p", "presence", "frequency", "repetition")
_INT_COLS = ("top_k", "seed", "prompt_len")


class SamplingTable:
    def __init__(self, num_rows: int, vocab_size: int, device: str) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.f = torch.zeros(len(_FLOAT_COLS), num_rows, dtype=torch.float32, device=device)
        self.i = torch.zeros(len(_INT_COLS), num_rows, dtype=torch.int64, device=device)
        self.f_cpu = np.zeros((len(_FLOAT_COLS), num_rows), dtype=np.float32)
        self.i_cpu = np.zeros((len(_INT_COLS), num_rows), dtype=np.int64)
        self.min_tokens = np.zeros(num_rows, dtype=np.int64)
        self.num_logprobs = np.full(num_rows, -1, dtype=np.int64)
        # Per row: (token ids, biases) of its logit_bias, None for most rows; the rows that
        # have one, so a step without any skips the per-row scan.
        self.logit_bias: list[tuple[list[int], list[float]] | None] = [None] * num_rows
        self._biased_rows: set[int] = set()
        self._pending: list[int] = []

    def add(self, row: int, info: RowInfo) -> None:
        sp = info.params
        top_k = sp.top_k if 0 < sp.top_k < self.vocab_size else 0
        # Any Python int seed maps onto the int64 with the same low 64 bits.
        seed = ((info.seed + (1 << 63)) % (1 << 64)) - (1 << 63)
        self.f_cpu[:, row] = (
            sp.temperature,
            sp.top_p,
            sp.min_p,
            sp.presence_penalty,
            sp.frequency_penalty,
            sp.repetition_penalty,
        )
        self.i_cpu[:, row] = (top_k, seed, info.prompt_len)
        self.min_tokens[row] = sp.min_tokens
        self.num_logprobs[row] = -1 if sp.logprobs is None else sp.logprobs
        self.release(row)  # a reused row starts without its last request's bias
        if bias := sp.logit_bias:
            self.logit_bias[row] = (list(bias), list(bias.values()))
            self._biased_rows.add(row)
        self._pending.append(row)

    def release(self, row: int) -> None:
        """The row's request left: forget its logit bias, so later steps skip the scan."""
        if row in self._biased_rows:
            self._biased_rows.discard(row)
            self.logit_bias[row] = None

    def flush(self) -> None:
        if not self._pending:
            return
        rows = np.asarray(self._pending)
        self._pending.clear()
        idx = to_device(rows, self.device)
        self.f.index_copy_(1, idx, to_device(self.f_cpu[:, rows], self.device))
        self.i.index_copy_(1, idx, to_device(self.i_cpu[:, rows], self.device))

    def flags(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: greedy, has penalties, has filters (which greedy rows ignore)."""
        fc = self.f_cpu[:, rows]
        ic = self.i_cpu[:, rows]
        greedy = fc[0] < SAMPLING_EPS
        penalties = (fc[3] != 0) | (fc[4] != 0) | (fc[5] != 1.0)
        filters = ((ic[0] > 0) | (fc[1] < 1.0) | (fc[2] > 0)) & ~greedy
        return greedy, penalties, filters

    def plain_kind(self, rows: np.ndarray, flags: tuple | None = None) -> bool | None:
        """For rows that need only temperature sampling (no penalties, filters or
        logprobs): whether all are greedy; None when some row needs more. flags: this
        step's flags(rows), when the caller has them already."""
        greedy, penalties, filters = flags if flags is not None else self.flags(rows)
        if penalties.any() or filters.any() or (self.num_logprobs[rows] >= 0).any():
            return None
        return bool(greedy.all())

    def gather(
        self, rows_dev: torch.Tensor, num_tokens_dev: torch.Tensor, **flags
    ) -> SamplingMetadata:
        """The rows' parameters gathered on the device, no host work (a sampling graph
        replays this). num_tokens are the sequence lengths before sampling: the positions
        the noise is keyed by. flags: SamplingMetadata's host-side fields."""
        r = rows_dev.long()
        f = self.f[:, r]
        i = self.i[:, r]
        return SamplingMetadata(
            temperature=f[0],
            top_k=i[0].to(torch.int32),
            top_p=f[1],
            min_p=f[2],
            seeds=i[1],
            positions=num_tokens_dev[r].long(),
            presence_penalty=f[3],
            frequency_penalty=f[4],
            repetition_penalty=f[5],
            token_ids=None,
            prompt_lens=None,
            seq_lens=None,
            **flags,
        )

    def metadata(
        self,
        rows: np.ndarray,
        rows_dev: torch.Tensor,
        num_tokens_dev: torch.Tensor,
        num_tokens_cpu: np.ndarray,
        token_ids: torch.Tensor,
        suppress: list[tuple[int, list[int]]],
        flags: tuple | None = None,
        logit_bias: list[tuple[int, list[int], list[float]]] | None = None,
    ) -> SamplingMetadata:
        """Gather this step's rows and decide the skip flags on the host mirrors (flags:
        flags(rows), when the caller has them already). token_ids is the state table's
        token tensor (history for penalties)."""
        greedy, penalties, filters = flags if flags is not None else self.flags(rows)
        n_lp = self.num_logprobs[rows]
        md = self.gather(
            rows_dev,
            num_tokens_dev,
            suppress_token_ids=suppress,
            logit_bias=logit_bias or [],
            max_num_logprobs=int(n_lp.max()) if (n_lp >= 0).any() else None,
            all_greedy=bool(greedy.all()),
            no_penalties=not penalties.any(),
            no_top_k_top_p_min_p=not filters.any(),
        )
        if penalties.any():
            r = rows_dev.long()
            width = int(num_tokens_cpu[rows].max())
            md.token_ids = token_ids[r, :width].long()
            md.seq_lens = md.positions
            md.prompt_lens = self.i[2, r]
        return md

    def biased(self, rows: np.ndarray) -> list[tuple[int, list[int], list[float]]]:
        """(batch index, token ids, biases) for the rows with a logit bias."""
        if not self._biased_rows:
            return []  # the common case: no per-row loop on the step path
        bias = self.logit_bias
        return [(b, *bias[r]) for b, r in enumerate(rows.tolist()) if bias[r] is not None]

    def suppressed(
        self, rows: np.ndarray, num_tokens_cpu: np.ndarray, infos: list[RowInfo]
    ) -> list[tuple[int, list[int]]]:
        """(batch index, token ids to forbid) for rows still below min_tokens."""
        out = []
        below = (num_tokens_cpu[rows] - self.i_cpu[2, rows]) < self.min_tokens[rows]
        for b in np.flatnonzero(below):
            info = infos[rows[b]]
            ids = list(info.params.stop_token_ids)
            if info.eos_token_id is not None and not info.params.ignore_eos:
                ids.append(info.eos_token_id)
            if ids:
                out.append((int(b), ids))
        return out
