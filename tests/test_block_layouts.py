"""The attention probes' block placements keep each sequence's K / V (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

from block_layouts import (  # noqa: E402
    contiguous_order,
    engine_order,
    prompt_lengths,
    relayout,
)

BS = 4


def _gather(cache: torch.Tensor, bt: torch.Tensor, i: int, ctx: int) -> torch.Tensor:
    pos = torch.arange(ctx)
    blocks = bt[i, pos // BS].long()
    return cache[:, blocks, pos % BS]


def test_engine_order_runs_prompts_then_interleaves_decode_blocks():
    ctxs, prompts = [10, 7, 13], [5, 7, 2]
    ids = engine_order(ctxs, prompts, BS)
    assert [len(r) for r in ids] == [-(-c // BS) for c in ctxs]
    flat = [b for r in ids for b in r]
    assert sorted(flat) == list(range(1, len(flat) + 1))  # each id once, from 1
    # Prompt blocks: one run a sequence, in admission order.
    assert ids[0][:2] == [1, 2] and ids[1][:2] == [3, 4] and ids[2][:1] == [5]
    # Decode blocks by position: sequence 2 reaches position 4 before sequence 0 reaches 8.
    assert ids[2][1] < ids[0][2]


def test_relayout_keeps_every_position():
    g = torch.Generator().manual_seed(0)
    ctxs = [9, 16, 3, 12]
    nblk = [-(-c // BS) for c in ctxs]
    perm = torch.randperm(sum(nblk) + 2, generator=g)[: sum(nblk)] + 1
    bt = torch.zeros((len(ctxs), max(nblk)), dtype=torch.int32)
    off = 0
    for i, n in enumerate(nblk):
        bt[i, :n] = perm[off : off + n]
        off += n
    cache = torch.randn((2, sum(nblk) + 3, BS, 2, 8), generator=g)
    for ids in (engine_order(ctxs, prompt_lengths(ctxs, 2, 10), BS), contiguous_order(ctxs, BS)):
        c2, bt2 = relayout(cache, bt, ids)
        for i, c in enumerate(ctxs):
            assert torch.equal(_gather(c2, bt2, i, c), _gather(cache, bt, i, c))
        assert bt2.dtype == bt.dtype


def test_contiguous_order_is_one_run_a_sequence():
    ids = contiguous_order([5, 8, 1], BS)
    assert ids == [[1, 2], [3, 4], [5]]
