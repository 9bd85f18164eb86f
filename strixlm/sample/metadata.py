"""Per-step sampling inputs: one row per request being sampled, as batched tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

# Temperatures below this are greedy (same threshold as SamplingParams.greedy and vLLM).
SAMPLING_EPS = 1e-5


@dataclass
class SamplingRow:
    """One request's sampling inputs for this step, as plain Python values."""

    temperature: float = 1.0
    top_k: int = 0  # 0 or -1 disables
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0  # any Python int; only its low 64 bits matter
    position: int = 0  # index of the token being sampled (= current sequence length)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # Prompt then output token ids; only read when the batch has penalties.
    token_ids: Sequence[int] = ()
    prompt_len: int = 0
    suppress_token_ids: Sequence[int] = ()
    logit_bias: Mapping[int, float] | None = None  # token id -> added to its logit
    num_logprobs: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )

    def has_filters(self, vocab_size: int) -> bool:
        return 0 < self.top_k < vocab_size or self.top_p < 1.0 or self.min_p > 0.0


def _to_int64(seed: int) -> int:
    """Map any Python int onto the signed int64 with the same low 64 bits."""
    return ((seed + (1 << 63)) % (1 << 64)) - (1 << 63)


@dataclass
class SamplingMetadata:
    """One row per request being sampled this step, B rows."""

    temperature: torch.Tensor  # [B] float32; < SAMPLING_EPS => greedy for that row
    top_k: torch.Tensor  # [B] int32; 0 => disabled
    top_p: torch.Tensor  # [B] float32; 1.0 => disabled
    min_p: torch.Tensor  # [B] float32; 0 => disabled
    seeds: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64
    presence_penalty: torch.Tensor  # [B] float32
    frequency_penalty: torch.Tensor  # [B] float32
    repetition_penalty: torch.Tensor  # [B] float32 (1.0 = off)
    token_ids: torch.Tensor | None  # [B, L] int64 history (prompt then outputs), padded
    prompt_lens: torch.Tensor | None  # [B] int64
    seq_lens: torch.Tensor | None  # [B] int64 valid length of each token_ids row
    suppress_token_ids: list[tuple[int, list[int]]] = field(default_factory=list)
    # (batch index, token ids, biases): rows with a logit bias, added before penalties.
    logit_bias: list[tuple[int, list[int], list[float]]] = field(default_factory=list)
    max_num_logprobs: int | None = None
    all_greedy: bool = False
    no_penalties: bool = True
    no_top_k_top_p_min_p: bool = True
    # [B] int64 tokens to emit instead of sampling (-1: sample); thinking budgets set it.
    forced_token_ids: torch.Tensor | None = None

    def apply_forced(self, sampled: torch.Tensor) -> torch.Tensor:
        """Substitute forced tokens for sampled ones (before logprobs are gathered, so a
        forced token gets the logprob the model gave it)."""
        if self.forced_token_ids is None:
            return sampled
        forced = self.forced_token_ids.to(sampled.dtype)
        return torch.where(forced >= 0, forced, sampled)

    @classmethod
    def build(
        cls,
        rows: Sequence[SamplingRow],
        device: torch.device | str,
        vocab_size: int,
    ) -> SamplingMetadata:
        """Batch per-request records into tensors on `device`, and set the skip flags."""
        f32, i64 = torch.float32, torch.int64

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        top_ks = [r.top_k if 0 < r.top_k < vocab_size else 0 for r in rows]
        no_penalties = not any(r.has_penalties for r in rows)
        token_ids = prompt_lens = seq_lens = None
        if not no_penalties:
            hist = [list(r.token_ids) for r in rows]
            width = max((len(h) for h in hist), default=0)
            # Padding is never read: seq_lens bounds each row.
            padded = [h + [0] * (width - len(h)) for h in hist]
            token_ids = torch.tensor(padded, dtype=i64, device=device).reshape(len(rows), width)
            prompt_lens = tensor(
                [min(r.prompt_len, len(h)) for r, h in zip(rows, hist, strict=True)], i64
            )
            seq_lens = tensor([len(h) for h in hist], i64)
        requested = [r.num_logprobs for r in rows if r.num_logprobs is not None]
        return cls(
            temperature=tensor([r.temperature for r in rows], f32),
            top_k=tensor(top_ks, torch.int32),
            top_p=tensor([r.top_p for r in rows], f32),
            min_p=tensor([r.min_p for r in rows], f32),
            seeds=tensor([_to_int64(r.seed) for r in rows], i64),
            positions=tensor([r.position for r in rows], i64),
            presence_penalty=tensor([r.presence_penalty for r in rows], f32),
            frequency_penalty=tensor([r.frequency_penalty for r in rows], f32),
            repetition_penalty=tensor([r.repetition_penalty for r in rows], f32),
            token_ids=token_ids,
            prompt_lens=prompt_lens,
            seq_lens=seq_lens,
            suppress_token_ids=[
                (i, list(r.suppress_token_ids)) for i, r in enumerate(rows) if r.suppress_token_ids
            ],
            logit_bias=[
                (i, list(r.logit_bias), list(r.logit_bias.values()))
                for i, r in enumerate(rows)
                if r.logit_bias
            ],
            max_num_logprobs=max(requested) if requested else None,
            all_greedy=all(r.greedy for r in rows),
            no_penalties=no_penalties,
            # Filters on greedy rows are ignored, so they need no work.
            no_top_k_top_p_min_p=not any(r.has_filters(vocab_size) for r in rows if not r.greedy),
        )
