"""Zero blocks newly handed to attention layers of a hybrid model, before the forward.

A block's bytes outlive its owner: one that last held fp32 Mamba state reads as NaN/Inf
when viewed as bf16/fp8 K/V, and attention's masked positions still multiply those values
by zero probabilities (0 x NaN = NaN). So every step, the attention blocks the scheduler
allocated since the last step are zeroed in one batched kernel launch, on the step's
stream, before the forward. Only newly allocated attention blocks: prefix-cache hits hold
valid K/V, and Mamba blocks are never read before being written (has_initial_state).

Debug settings (environment):
  STRIXLM_DEBUG_NO_ZERO_BLOCKS=1       skip the zeroing
  STRIXLM_DEBUG_POISON_FREED_BLOCKS=1  fill every freed block with NaN bytes (0xFF)
Together they show what the zeroing prevents.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from strixlm.core.scheduler import SchedulerOutput
from strixlm.kernels.zero_blocks import zero_blocks
from strixlm.worker.model_states.hybrid_layout import HybridCacheLayout

logger = logging.getLogger(__name__)

NO_ZERO_ENV = "STRIXLM_DEBUG_NO_ZERO_BLOCKS"
POISON_ENV = "STRIXLM_DEBUG_POISON_FREED_BLOCKS"


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0")


class PinnedIds:
    """Host -> device copies of block-id lists through reused pinned buffers.

    Two host buffers alternate; before one is refilled, the copy that last read it is
    waited for (it was enqueued a step ago, so the wait is normally free)."""

    def __init__(self, capacity: int, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.dev = torch.empty(capacity, dtype=torch.int32, device=device)
        if self.cuda:
            self.host = [torch.empty(capacity, dtype=torch.int32).pin_memory() for _ in range(2)]
            self.events: list[torch.cuda.Event | None] = [None, None]
            self.turn = 0

    def to_device(self, ids: list[int]) -> torch.Tensor:
        n = len(ids)
        if not self.cuda:
            self.dev[:n] = torch.as_tensor(ids, dtype=torch.int32)
            return self.dev[:n]
        i, self.turn = self.turn, self.turn ^ 1
        if self.events[i] is not None:
            self.events[i].synchronize()
        self.host[i].numpy()[:n] = np.asarray(ids, dtype=np.int32)
        self.dev[:n].copy_(self.host[i][:n], non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        self.events[i] = ev
        return self.dev[:n]


def new_blocks_of_groups(sched: SchedulerOutput, groups: list[int], block_size: int) -> list[int]:
    """Blocks of the given groups that this step's scheduler output newly allocated.

    A new request's leading num_computed_tokens // block_size blocks are prefix-cache hits
    (they hold valid K/V) and are left alone."""
    out: list[int] = []
    for new in sched.new_reqs:
        hits = new.num_computed_tokens // block_size
        for g in groups:
            out.extend(new.block_ids[g][hits:])
    for cached in sched.cached_reqs:
        for g in groups:
            out.extend(cached.new_block_ids[g])
    return out


class BlockZeroer:
    def __init__(self, pool: torch.Tensor, layout: HybridCacheLayout, device: str) -> None:
        self.pool = pool
        self.block_size = layout.block_size
        num_blocks = pool.shape[2]
        wpb = layout.half_page_bytes // 8
        self.words_per_block = wpb
        self.words = pool.view(-1).view(torch.int64)
        # Region r = slot * 2 + half starts at word r * num_blocks * wpb.
        offsets = [r * num_blocks * wpb for r in layout.attention_regions()]
        self.region_offsets = torch.tensor(offsets, dtype=torch.int64, device=device)
        self.attn_groups = sorted({p.group for p in layout.attention})
        self.num_groups = len(layout.groups)
        self.ids = PinnedIds(num_blocks, device)
        self.zero_enabled = not _flag(NO_ZERO_ENV)
        self.poison = _flag(POISON_ENV)
        if not self.zero_enabled:
            logger.warning("%s is set: new attention blocks are NOT zeroed", NO_ZERO_ENV)
        if self.poison:
            logger.warning("%s is set: freed blocks are filled with NaN", POISON_ENV)
        # Blocks each live request holds (only tracked for poisoning).
        self._req_blocks: dict[str, list[int]] = {}
        self.num_zeroed = 0  # blocks zeroed so far (for tests and stats)

    def before_forward(self, sched: SchedulerOutput) -> None:
        """Poison what was freed (debug), then zero the new attention blocks."""
        if self.poison:
            self._poison_freed(sched)
        if not self.zero_enabled:
            return
        ids = new_blocks_of_groups(sched, self.attn_groups, self.block_size)
        if ids:
            zero_blocks(
                self.words, self.region_offsets, self.ids.to_device(ids), self.words_per_block
            )
            self.num_zeroed += len(ids)

    def _poison_freed(self, sched: SchedulerOutput) -> None:
        freed: list[int] = []
        for rid in sched.finished_req_ids:
            freed.extend(self._req_blocks.pop(rid, []))
        if freed:
            regions = self.pool.view(-1, self.pool.shape[2], self.pool.shape[3])
            idx = torch.as_tensor(freed, dtype=torch.int64).to(self.pool.device)
            regions.index_fill_(1, idx, 0xFF)
        every = list(range(self.num_groups))
        for new in sched.new_reqs:
            blocks = self._req_blocks.setdefault(new.request.request_id, [])
            blocks.extend(b for g in every for b in new.block_ids[g])
        for cached in sched.cached_reqs:
            blocks = self._req_blocks.setdefault(cached.request_id, [])
            blocks.extend(b for g in every for b in cached.new_block_ids[g])
