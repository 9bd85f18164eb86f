"""The block pool: one per device, shared by every KV-cache group.

Free blocks sit in an LRU queue. A freed block keeps its content hash, so a later request
with the same prefix can take it back ("cached free"); when a fresh block is needed, the
least recently freed one is evicted and its hash forgotten.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class KVBlock:
    block_id: int
    ref_cnt: int = 0
    # (group id, content hash), set once the block is full and registered in the prefix cache.
    cache_key: tuple[int, int] | None = None


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if num_blocks < 2:
            raise ValueError(f"the KV cache needs at least 2 blocks, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        # Block 0 is a null block never handed out: padded block-table entries point at it.
        self.free_queue: OrderedDict[int, None] = OrderedDict(
            (i, None) for i in range(1, num_blocks)
        )
        # (group id, block hash) -> block id of a full block whose KV is known.
        self.cached: dict[tuple[int, int], int] = {}
        self.num_hit_queries = 0
        self.num_hit_blocks = 0
        self.num_queried_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by live requests (cached-free blocks count as free)."""
        usable = self.num_blocks - 1
        return 1.0 - self.num_free_blocks / usable

    def get_cached_block(self, group_id: int, block_hash: int) -> int | None:
        return self.cached.get((group_id, block_hash))

    def touch(self, block_ids: list[int]) -> None:
        """Take references on blocks found in the prefix cache."""
        for bid in block_ids:
            blk = self.blocks[bid]
            if blk.ref_cnt == 0:
                del self.free_queue[bid]
            blk.ref_cnt += 1

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks with {len(self.free_queue)} free")
        out = []
        for _ in range(n):
            bid, _ = self.free_queue.popitem(last=False)
            blk = self.blocks[bid]
            self._evict(blk)
            blk.ref_cnt = 1
            out.append(bid)
        return out

    def _evict(self, blk: KVBlock) -> None:
        if blk.cache_key is not None:
            del self.cached[blk.cache_key]
            blk.cache_key = None

    def cache_full_block(self, group_id: int, block_id: int, block_hash: int) -> None:
        """Register a block whose tokens are all known (its KV is written this step or was)."""
        if not self.enable_caching:
            return
        blk = self.blocks[block_id]
        if blk.cache_key is not None:
            return
        key = (group_id, block_hash)
        if key in self.cached:
            return  # an identical block is already cached; this one stays private
        blk.cache_key = key
        self.cached[key] = block_id

    def free(self, block_ids: list[int]) -> None:
        """Drop references; blocks reaching zero go to the LRU tail (last freed, last evicted).

        Callers pass a request's blocks in reverse order so that the tail of a sequence,
        the least likely to be shared, is evicted first.
        """
        for bid in block_ids:
            blk = self.blocks[bid]
            blk.ref_cnt -= 1
            if blk.ref_cnt < 0:
                raise RuntimeError(f"block {bid} freed twice")
            if blk.ref_cnt == 0:
                if blk.cache_key is None:
                    # Uncached blocks are reused first: put them at the head.
                    self.free_queue[bid] = None
                    self.free_queue.move_to_end(bid, last=False)
                else:
                    self.free_queue[bid] = None

    def reset_prefix_cache(self) -> bool:
        if any(b.ref_cnt for b in self.blocks[1:]):
            return False
        for blk in self.blocks:
            self._evict(blk)
        return True

    def record_hits(self, queried: int, hit: int) -> None:
        self.num_hit_queries += 1
        self.num_queried_blocks += queried
        self.num_hit_blocks += hit
