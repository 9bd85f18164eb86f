"""Logit edits applied before sampling: logit biases, forbidden tokens and repetition
penalties."""

from __future__ import annotations

import torch

from strixlm.sample.metadata import SamplingMetadata


def apply_logit_bias(
    logits: torch.Tensor, logit_bias: list[tuple[int, list[int], list[float]]]
) -> torch.Tensor:
    """Add each row's biases to its float32 logits in place, with one indexed add (token
    ids are distinct within a row; ids outside the vocabulary are skipped)."""
    if not logit_bias:
        return logits
    vocab_size = logits.shape[-1]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for row, ids, biases in logit_bias:
        for t, b in zip(ids, biases, strict=True):
            if 0 <= t < vocab_size:
                rows.append(row)
                cols.append(t)
                vals.append(b)
    if rows:
        # Pinned + non_blocking: a pageable host-to-device copy would wait for the GPU.
        pin = logits.is_cuda
        idx = torch.tensor([rows, cols], dtype=torch.int64, pin_memory=pin)
        values = torch.tensor(vals, dtype=logits.dtype, pin_memory=pin)
        r, c = idx.to(logits.device, non_blocking=True)
        logits.index_put_((r, c), values.to(logits.device, non_blocking=True), accumulate=True)
    return logits


def apply_suppress_tokens(
    logits: torch.Tensor, suppress_token_ids: list[tuple[int, list[int]]]
) -> torch.Tensor:
    """Set forbidden (row, token) entries to -inf in place, with one indexed write."""
    if not suppress_token_ids:
        return logits
    vocab_size = logits.shape[-1]
    rows: list[int] = []
    cols: list[int] = []
    for row, ids in suppress_token_ids:
        kept = [t for t in ids if 0 <= t < vocab_size]
        rows.extend([row] * len(kept))
        cols.extend(kept)
    if rows:
        r = torch.tensor(rows, dtype=torch.int64, device=logits.device)
        c = torch.tensor(cols, dtype=torch.int64, device=logits.device)
        logits[r, c] = float("-inf")
    return logits


def token_stats(
    token_ids: torch.Tensor,
    prompt_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: a [B, V] bool mask of prompt tokens and [B, V] float32 output-token counts."""
    num_rows, width = token_ids.shape
    device = token_ids.device
    idx = torch.arange(width, device=device)[None, :]
    valid = (idx < seq_lens[:, None]) & (token_ids >= 0) & (token_ids < vocab_size)
    in_prompt = valid & (idx < prompt_lens[:, None])
    in_output = valid & ~in_prompt
    # Entries that do not count are sent to a spare column V, then dropped.
    spare = torch.full_like(token_ids, vocab_size)
    prompt_idx = torch.where(in_prompt, token_ids, spare)
    output_idx = torch.where(in_output, token_ids, spare)
    prompt_mask = torch.zeros(num_rows, vocab_size + 1, dtype=torch.bool, device=device)
    prompt_mask.scatter_(1, prompt_idx, torch.ones_like(prompt_idx, dtype=torch.bool))
    counts = torch.zeros(num_rows, vocab_size + 1, dtype=torch.float32, device=device)
    counts.scatter_add_(1, output_idx, torch.ones_like(output_idx, dtype=torch.float32))
    return prompt_mask[:, :vocab_size], counts[:, :vocab_size]


def apply_penalties(logits: torch.Tensor, md: SamplingMetadata) -> torch.Tensor:
    """vLLM / HF penalties on float32 logits [B, V]; returns a new tensor.

    repetition (tokens seen in prompt or output): logit > 0 -> logit / p, else logit * p.
    frequency: logit -= f * (count in output).  presence: logit -= p * (count in output > 0).
    """
    if md.token_ids is None or md.prompt_lens is None or md.seq_lens is None:
        raise ValueError("penalties need token_ids, prompt_lens and seq_lens")
    prompt_mask, counts = token_stats(md.token_ids, md.prompt_lens, md.seq_lens, logits.shape[-1])
    seen = prompt_mask | (counts > 0)
    rep = md.repetition_penalty.to(logits.dtype)[:, None]
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(seen, penalized, logits)
    freq = md.frequency_penalty.to(logits.dtype)[:, None]
    pres = md.presence_penalty.to(logits.dtype)[:, None]
    return logits - freq * counts - pres * (counts > 0).to(logits.dtype)
