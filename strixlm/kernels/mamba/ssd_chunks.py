"""How a varlen batch is cut into SSD chunks: each chunk lies inside one sequence.

Chunks restart at every sequence start, so a sequence's result does not depend on where it
sits in the packed batch (nor on its neighbours). The table is built with a handful of small
torch ops on the device (no host reads, so it can be captured in a CUDA graph); a model can
build it once per step and pass it to every Mamba layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SSDChunks:
    """Chunk table of one varlen batch (all int32, on the batch's device).

    Rows past the real chunk count (the table has a fixed, shape-derived length) have
    chunk_len 0 and are skipped by the kernels.
    """

    chunk_size: int
    chunk_start: torch.Tensor  # [max_chunks] first token of the chunk
    chunk_len: torch.Tensor  # [max_chunks] tokens in the chunk, 0 for unused rows
    seq_chunk_start: torch.Tensor  # [num_seqs + 1] chunks of seq i: [start[i], start[i+1])

    @property
    def max_chunks(self) -> int:
        return self.chunk_len.shape[0]


def max_num_chunks(num_tokens: int, num_seqs: int, chunk_size: int) -> int:
    """An upper bound of sum_i ceil(len_i / chunk_size) given only the shapes."""
    return (num_tokens + num_seqs * (chunk_size - 1)) // chunk_size


def prepare_ssd_chunks(
    query_start_loc: torch.Tensor, num_tokens: int, chunk_size: int
) -> SSDChunks:
    """Chunk table for sequences packed as query_start_loc (int [num_seqs+1])."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    dev = query_start_loc.device
    qsl = query_start_loc.to(torch.int32)
    num_seqs = qsl.shape[0] - 1
    n_max = max_num_chunks(num_tokens, max(num_seqs, 0), chunk_size)
    seq_chunk_start = torch.zeros(max(num_seqs, 0) + 1, dtype=torch.int32, device=dev)
    if num_seqs <= 0 or n_max == 0:
        empty = torch.zeros(0, dtype=torch.int32, device=dev)
        return SSDChunks(chunk_size, empty, empty, seq_chunk_start)
    lens = (qsl[1:] - qsl[:-1]).clamp_min(0)
    counts = (lens + (chunk_size - 1)) // chunk_size
    # Clamped so a query_start_loc that overruns num_tokens cannot index past the table.
    seq_chunk_start[1:] = torch.cumsum(counts, 0, dtype=torch.int32).clamp_max(n_max)
    c = torch.arange(n_max, dtype=torch.int32, device=dev)
    seq = torch.searchsorted(seq_chunk_start[1:], c, right=True).clamp_max(num_seqs - 1)
    start = qsl[seq] + (c - seq_chunk_start[seq]) * chunk_size
    # Tokens past num_tokens are never read, even if query_start_loc claims them.
    end = qsl[seq + 1].clamp_max(num_tokens)
    length = (end - start).clamp(0, chunk_size).to(torch.int32)
    return SSDChunks(chunk_size, start.to(torch.int32), length, seq_chunk_start)
