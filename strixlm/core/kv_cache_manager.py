"""KV-cache allocation per request, per KV-cache group, with prefix caching.

Every layer belongs to a KV-cache group; layers of one group share a block table. A pure
attention model has one group. All groups draw from one BlockPool and use one block size, so
a request's chained block hashes are computed once and serve every group.

A hybrid model adds "mamba" groups: a request holds exactly one block of each (its running
conv + SSM state), however long it grows. Prefix caching is off for hybrid models: a Mamba
state summarises a whole prefix and is overwritten in place every step, so a cached
attention prefix has no matching state to resume from (docs/hybrid_models.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strixlm.core.block_pool import BlockPool
from strixlm.engine.request import Request

logger = logging.getLogger(__name__)

FULL_ATTENTION = "full_attention"
MAMBA = "mamba"


@dataclass(frozen=True)
class KVCacheGroupSpec:
    kind: str  # FULL_ATTENTION or MAMBA
    layer_names: tuple[str, ...]
    # Tokens per block when the runner chose it (hybrid models raise it); None: the config's.
    block_size: int | None = None


def hash_block_tokens(parent_hash: int | None, tokens: tuple[int, ...]) -> int:
    """Chained hash: a block's identity is its tokens and everything before them."""
    return hash((parent_hash, tokens))


def update_block_hashes(request: Request, block_size: int) -> None:
    """Extend request.block_hashes to cover every full block of its known tokens."""
    hashes = request.block_hashes
    tokens = request.all_token_ids
    while (len(hashes) + 1) * block_size <= len(tokens):
        start = len(hashes) * block_size
        parent = hashes[-1] if hashes else None
        hashes.append(hash_block_tokens(parent, tuple(tokens[start : start + block_size])))


class KVCacheManager:
    # allocate_slots' answer when the new tokens fit in the blocks a request already has
    # (truthy, and distinct from True, which means blocks were added).
    FITS = "fits"

    def __init__(
        self,
        groups: list[KVCacheGroupSpec],
        num_blocks: int,
        block_size: int,
        enable_caching: bool,
    ) -> None:
        self.groups = groups
        sizes = {g.block_size for g in groups if g.block_size is not None}
        if len(sizes) > 1:
            raise ValueError(f"KV-cache groups disagree on the block size: {sorted(sizes)}")
        self.block_size = sizes.pop() if sizes else block_size
        # Groups whose block count grows with the tokens (attention); the others (Mamba
        # state) hold one block per request.
        self._token_groups = [i for i, g in enumerate(groups) if g.kind != MAMBA]
        self.is_hybrid = len(self._token_groups) != len(groups)
        if self.is_hybrid and enable_caching:
            logger.info("prefix caching is disabled for hybrid (Mamba) models")
            enable_caching = False
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        # request id -> block ids per group
        self.req_blocks: dict[str, list[list[int]]] = {}
        # request id -> number of its blocks already registered in the prefix cache
        self.num_cached_blocks: dict[str, int] = {}

    @property
    def usage(self) -> float:
        return self.pool.usage

    def num_blocks_of(self, request_id: str) -> list[int]:
        blocks = self.req_blocks.get(request_id)
        return [len(b) for b in blocks] if blocks else [0] * len(self.groups)

    def blocks_of(self, request_id: str) -> list[list[int]]:
        return self.req_blocks.get(request_id) or [[] for _ in self.groups]

    def get_computed_blocks(self, request: Request) -> tuple[list[list[int]], int]:
        """Longest cached prefix of full blocks, as (blocks per group, tokens covered).

        At least one token is always left to compute, so the model produces logits.
        """
        if not self.enable_caching:
            return [[] for _ in self.groups], 0
        update_block_hashes(request, self.block_size)
        if request.sampling_params.prompt_logprobs is not None and not (
            request.prompt_logprobs_sent
        ):
            # Prompt logprobs need every prompt position's logits: no hits (its blocks are
            # still cached for others).
            return [[] for _ in self.groups], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[list[int]] = []
        for gid, _ in enumerate(self.groups):
            found = []
            for h in request.block_hashes[:max_blocks]:
                bid = self.pool.get_cached_block(gid, h)
                if bid is None:
                    break
                found.append(bid)
            hits.append(found)
        n = min(len(h) for h in hits)
        hits = [h[:n] for h in hits]
        self.pool.record_hits(max_blocks, n)
        return hits, n * self.block_size

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[list[int]] | None = None,
    ) -> bool | str:
        """Make room for num_new_tokens more tokens; False (and no change) if the pool is short.

        new_computed_blocks are prefix-cache hits the scheduler is adding for a new request.
        """
        rid = request.request_id
        cur = self.req_blocks.get(rid)
        if cur is None:
            cur = [[] for _ in self.groups]
        elif new_computed_blocks is None:
            # Decode fast path: the new tokens fit in the blocks the request already has.
            total = request.num_computed_tokens + num_new_tokens
            if all(len(cur[g]) * self.block_size >= total for g in self._token_groups):
                self._cache_full_blocks(request, total)
                return self.FITS
        hit_blocks = new_computed_blocks or [[] for _ in self.groups]
        num_hit_tokens = len(hit_blocks[0]) * self.block_size
        total_tokens = request.num_computed_tokens + num_hit_tokens + num_new_tokens
        need = self._blocks_needed(-(-total_tokens // self.block_size))
        num_new_blocks = sum(
            max(0, n - len(c) - len(h)) for n, c, h in zip(need, cur, hit_blocks, strict=True)
        )
        # Hits sitting in the free queue stop being free once touched.
        num_reclaimed = sum(1 for h in hit_blocks for b in h if self.pool.blocks[b].ref_cnt == 0)
        if num_new_blocks + num_reclaimed > self.pool.num_free_blocks:
            return False
        for n, c, h in zip(need, cur, hit_blocks, strict=True):
            if h:
                self.pool.touch(h)
                c.extend(h)
            extra = n - len(c)
            if extra > 0:
                c.extend(self.pool.allocate(extra))
        self.req_blocks[rid] = cur
        self._cache_full_blocks(
            request, request.num_computed_tokens + num_hit_tokens + num_new_tokens
        )
        return True

    def _blocks_needed(self, num_token_blocks: int) -> list[int]:
        """Blocks each group needs for a request spanning num_token_blocks attention blocks."""
        if not self.is_hybrid:
            return [num_token_blocks] * len(self.groups)
        return [1 if g.kind == MAMBA else num_token_blocks for g in self.groups]

    def _cache_full_blocks(self, request: Request, num_known_tokens: int) -> None:
        if not self.enable_caching:
            return
        rid = request.request_id
        done = self.num_cached_blocks.get(rid, 0)
        if min(num_known_tokens, request.num_tokens) // self.block_size <= done:
            return  # no block has filled up since the last call
        update_block_hashes(request, self.block_size)
        upto = min(num_known_tokens // self.block_size, len(request.block_hashes))
        for gid, blocks in enumerate(self.req_blocks[rid]):
            for i in range(done, upto):
                self.pool.cache_full_block(gid, blocks[i], request.block_hashes[i])
        self.num_cached_blocks[rid] = max(done, upto)

    def free(self, request: Request) -> None:
        blocks = self.req_blocks.pop(request.request_id, None)
        self.num_cached_blocks.pop(request.request_id, None)
        if blocks is None:
            return
        for group_blocks in blocks:
            self.pool.free(list(reversed(group_blocks)))

    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def prefix_cache_hit_rate(self) -> float:
        q = self.pool.num_queried_blocks
        return self.pool.num_hit_blocks / q if q else 0.0
