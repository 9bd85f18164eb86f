"""The torch sampler: penalties, greedy / Gumbel-max sampling, top-k/top-p/min-p, logprobs.

This is the reference the Triton sampler is tested against, and the CPU path. It avoids
host syncs (no `.item()`, no boolean indexing), so it also runs unchanged on CUDA tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strixlm.sample.logprobs import LogprobsTensors, gather_logprobs, raw_logprobs
from strixlm.sample.metadata import SAMPLING_EPS, SamplingMetadata
from strixlm.sample.penalties import apply_logit_bias, apply_penalties, apply_suppress_tokens
from strixlm.sample.random import gumbel_noise


@dataclass
class SamplerOutput:
    sampled_token_ids: torch.Tensor  # [B] int64
    logprobs: LogprobsTensors | None


def apply_top_k_top_p_min_p(
    logits: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
) -> torch.Tensor:
    """Set filtered tokens of float32 logits [B, V] to -inf (returns a new tensor).

    Applied in order top-k, top-p (on the top-k-renormalized distribution), min-p. Each
    filter reduces to a per-row logit threshold, so ties at a boundary are all kept and the
    result does not depend on sort stability. min-p compares each prob with min_p * max prob,
    a ratio that renormalization does not change, so it is `logit < max + log(min_p)`.
    """
    vocab_size = logits.shape[-1]
    neg_inf = float("-inf")
    sorted_logits = logits.sort(dim=-1, descending=True).values
    # top-k: keep logits >= the k-th largest; 0 (or >= V) keeps all.
    k = top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k > vocab_size), vocab_size, k)
    kth = sorted_logits.gather(1, (k - 1)[:, None])
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, neg_inf)
    # top-p: keep the smallest prefix whose probability reaches p (at least one token).
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
    p = torch.where(top_p < 1.0, top_p, 2.0).to(torch.float32)  # 2.0: row keeps everything
    keep = (before < p[:, None]).sum(dim=-1).clamp(min=1)
    cutoff_p = sorted_logits.gather(1, (keep - 1)[:, None])
    # min-p: relative to the row's most likely token.
    cutoff_min_p = sorted_logits[:, :1] + torch.log(min_p.to(torch.float32))[:, None]
    threshold = torch.maximum(torch.maximum(kth, cutoff_p), cutoff_min_p)
    return logits.masked_fill(logits < threshold, neg_inf)


class Sampler(torch.nn.Module):
    """Samples one token per row from logits [B, V] (any float dtype)."""

    def forward(self, logits: torch.Tensor, md: SamplingMetadata) -> SamplerOutput:
        # Logprobs come from the raw logits, as vLLM V1 does by default.
        logprobs = raw_logprobs(logits) if md.max_num_logprobs is not None else None
        # Work on a float32 copy: the caller's logits are never modified.
        logits = logits.to(torch.float32, copy=True)
        logits = apply_logit_bias(logits, md.logit_bias)
        logits = apply_suppress_tokens(logits, md.suppress_token_ids)
        if not md.no_penalties:
            logits = apply_penalties(logits, md)
        sampled = md.apply_forced(self._sample(logits, md))
        lp = None
        if logprobs is not None:
            assert md.max_num_logprobs is not None
            lp = gather_logprobs(logprobs, sampled, md.max_num_logprobs)
        return SamplerOutput(sampled_token_ids=sampled, logprobs=lp)

    @staticmethod
    def _sample(logits: torch.Tensor, md: SamplingMetadata) -> torch.Tensor:
        greedy_tokens = logits.argmax(dim=-1)
        if md.all_greedy:
            return greedy_tokens
        temperature = md.temperature.to(torch.float32)
        is_greedy = temperature < SAMPLING_EPS
        # Greedy rows get T=1 so the division stays finite; their result is discarded.
        temperature = torch.where(is_greedy, 1.0, temperature)
        scaled = logits / temperature[:, None]
        if not md.no_top_k_top_p_min_p:
            scaled = apply_top_k_top_p_min_p(scaled, md.top_k, md.top_p, md.min_p)
        # Gumbel-max: argmax(logits/T + G) is an exact draw from softmax(logits/T).
        noise = gumbel_noise(md.seeds, md.positions, logits.shape[-1])
        random_tokens = (scaled + noise).argmax(dim=-1)
        return torch.where(is_greedy, greedy_tokens, random_tokens)
