"""Where a decode batch's KV blocks sit in the pool, for attention probes.

check_attention.make_batch shuffles every block over the pool. The engine's block pool
hands blocks out in the order requests ask for them: a prompt's blocks come as one
contiguous run, then each decode block is the next free one when its sequence crosses a
block boundary, so the decode blocks of different sequences interleave. `relayout` moves a
batch's cache into another placement with the same logical content (same outputs), so a
probe can time the same batch under each:
- "contiguous": every sequence's blocks one run, sequences one after another;
- "engine": prompts first, each a run, then the decode blocks in step order.
"""

from __future__ import annotations

import random

import torch


def engine_order(ctxs: list[int], prompts: list[int], block_size: int) -> list[list[int]]:
    """Block ids (from 1) each sequence gets from a fresh pool in allocation order: every
    prompt's blocks in admission order, then one block a sequence each time a decode step
    reaches a new block (sequences in batch order within a step)."""
    ids: list[list[int]] = []
    nxt = 1
    for c, p in zip(ctxs, prompts, strict=True):
        n = -(-min(p, c) // block_size)
        ids.append(list(range(nxt, nxt + n)))
        nxt += n
    for pos in range(min(prompts), max(ctxs)):
        for i, c in enumerate(ctxs):
            if prompts[i] <= pos < c and pos % block_size == 0:
                ids[i].append(nxt)
                nxt += 1
    return ids


def contiguous_order(ctxs: list[int], block_size: int) -> list[list[int]]:
    ids, nxt = [], 1
    for c in ctxs:
        n = -(-c // block_size)
        ids.append(list(range(nxt, nxt + n)))
        nxt += n
    return ids


def prompt_lengths(ctxs: list[int], lo: int = 100, hi: int = 1024, seed: int = 0) -> list[int]:
    """Prompt lengths like the standard workload's (uniform in [lo, hi]), at most each
    context (a context shorter than its draw is all prompt)."""
    rng = random.Random(seed)
    return [min(c, rng.randint(lo, hi)) for c in ctxs]


def relayout(
    cache: torch.Tensor, block_table: torch.Tensor, ids: list[list[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's cache [2, blocks, bs, heads, d] and block table moved so that sequence
    i's j-th block is ids[i][j]: a new cache (same dtype, blocks for the largest id + 1)
    and table, with the same K / V at every (sequence, position)."""
    n_blocks = 1 + max(max(r) for r in ids if r)
    out = torch.zeros((cache.shape[0], n_blocks, *cache.shape[2:]), dtype=cache.dtype,
                      device=cache.device)  # fmt: skip
    bt = torch.zeros_like(block_table)
    for i, row in enumerate(ids):
        if not row:
            continue
        new = torch.tensor(row, dtype=block_table.dtype, device=block_table.device)
        bt[i, : len(row)] = new
        out[:, new.long()] = cache[:, block_table[i, : len(row)].long()]
    return out, bt
