"""Logprobs of sampled tokens and the top-K alternatives, from the raw logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LogprobsTensors:
    sampled_logprobs: torch.Tensor  # [B] float32 logprob of the chosen token
    sampled_ranks: torch.Tensor  # [B] int64 rank of chosen token (1 = most likely)
    top_ids: torch.Tensor  # [B, K] int64
    top_logprobs: torch.Tensor  # [B, K] float32


def raw_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """float32 log-softmax of the model's raw logits (before penalties or temperature)."""
    return torch.log_softmax(logits.to(torch.float32), dim=-1)


def gather_logprobs(logprobs: torch.Tensor, sampled: torch.Tensor, k: int) -> LogprobsTensors:
    """Sampled token's logprob and rank, and the K most likely tokens (K may be 0)."""
    sampled = sampled.to(torch.int64)
    chosen = logprobs.gather(1, sampled[:, None])
    # Rank = 1 + number of tokens strictly more likely than the chosen one.
    ranks = (logprobs > chosen).sum(dim=-1, dtype=torch.int64) + 1
    k = min(k, logprobs.shape[-1])
    if k > 0:
        top_logprobs, top_ids = logprobs.topk(k, dim=-1)
    else:
        top_logprobs = logprobs.new_empty(logprobs.shape[0], 0)
        top_ids = torch.empty(logprobs.shape[0], 0, dtype=torch.int64, device=logprobs.device)
    return LogprobsTensors(
        sampled_logprobs=chosen.squeeze(1),
        sampled_ranks=ranks,
        top_ids=top_ids,
        top_logprobs=top_logprobs,
    )
