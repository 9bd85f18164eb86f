"""L2 prefetch of the KV tiles that the persistent decode grid reads first.

Every persistent attention launch starts with all of its programs waiting on their first
KV tile at once, and the ~40 us of GEMMs and small kernels between two attention launches
leave HBM mostly idle. The q/k norm + rotary launch that runs right before attention can
ask the memory system to start on those first tiles: program p of the grid (per kv head)
begins with item p of the longest-first order (the snake deal of paged_decode.py; an item
is a sequence, or one of its NUM_SEGS segments), so the first PF_TILES tiles of items
0..P-1, for every kv head, K and V, are known before attention starts.
`prefetch.global.L2` is a hint that nothing waits for: the launch does not get longer, and
results cannot change (the K/V written by the same launch are never among the prefetched
rows' values that matter: a prefetch moves no data into registers).

STRIXLM_ATTN_L2_PREFETCH (read at import) is the number of tiles per item (0 = off).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from strixlm.kernels.dispatch import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl

L2_PREFETCH_TILES = int(os.environ.get("STRIXLM_ATTN_L2_PREFETCH", "0"))
_LINE_BYTES = 128  # what one prefetch.global.L2 brings in


@dataclass(frozen=True)
class KVPrefetch:
    """Which KV rows to prefetch: the first `tiles` tiles of `tile` tokens of the first
    item of each of `num_programs` programs (per kv head) of a persistent decode grid
    with `num_segs` segments per sequence. record (tests): int64 [num_programs, tiles *
    tile, kv heads, lines] receives each row's element offset into the K cache (-1 where
    nothing is prefetched) instead of prefetching."""

    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    seq_order: torch.Tensor | None
    num_programs: int
    num_segs: int
    tile: int
    tiles: int
    record: torch.Tensor | None = None

    def kernel_args(self) -> tuple:
        order = self.seq_order if self.seq_order is not None else self.seq_lens
        rec = self.record if self.record is not None else self.seq_lens
        return (
            self.block_table, self.seq_lens, self.query_start_loc, order, rec,
            self.block_table.stride(0), self.num_programs,
        )  # fmt: skip

    def constexprs(self, kv_cache: torch.Tensor) -> dict:
        elem = kv_cache.element_size()
        d = kv_cache.shape[-1]
        return dict(
            PF_TILES=self.tiles,
            PF_TILE=self.tile,
            PF_SEGS=self.num_segs,
            PF_ORDER=self.seq_order is not None,
            PF_LINES=max(1, -(-(d * elem) // _LINE_BYTES)),
            PF_LINE_ELEMS=max(1, _LINE_BYTES // elem),
            PF_HKV=triton.next_power_of_2(kv_cache.shape[3]),
            PF_RECORD=self.record is not None,
        )


def prefetch_plan(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_order: torch.Tensor | None,
    num_programs: int,
    num_segs: int,
    tile: int,
) -> KVPrefetch | None:
    """The plan for a persistent decode launch, or None when prefetching is off (it also
    needs the compiled kernels: the interpreter has no inline PTX)."""
    if L2_PREFETCH_TILES <= 0 or block_table.device.type != "cuda":
        return None
    return KVPrefetch(
        block_table, seq_lens, query_start_loc, seq_order, num_programs, max(1, num_segs),
        tile, triton.next_power_of_2(L2_PREFETCH_TILES),
    )  # fmt: skip


def no_prefetch_args(dummy: torch.Tensor) -> tuple:
    """Pointer and int arguments of a launch without prefetching (never read)."""
    return (dummy,) * 5 + (0, 0)


NO_PREFETCH = dict(
    PF_TILES=0,
    PF_TILE=16,
    PF_SEGS=1,
    PF_ORDER=False,
    PF_LINES=1,
    PF_LINE_ELEMS=1,
    PF_HKV=1,
    PF_RECORD=False,
)


if HAS_TRITON:

    @triton.jit
    def _prefetch_l2(ptrs):
        # One hint per element; the dummy output keeps the asm (it has side effects).
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;",
            "=r,l",
            [ptrs],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )

    @triton.jit
    def prefetch_first_tiles(
        r, kc_ptr, vc_ptr, bt_ptr, lens_ptr, qsl_ptr, order_ptr, rec_ptr, stride_bt,
        stride_cb, stride_cs, stride_ch, n_kv_heads,
        PF_TILES: tl.constexpr, PF_TILE: tl.constexpr, PF_SEGS: tl.constexpr,
        PF_ORDER: tl.constexpr, PF_LINES: tl.constexpr, PF_LINE_ELEMS: tl.constexpr,
        PF_HKV: tl.constexpr, PF_RECORD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    ):  # fmt: skip
        # Item r of the longest-first order: sequence rank r // PF_SEGS, segment r % PF_SEGS.
        rank = r // PF_SEGS
        if PF_ORDER:
            seq = tl.load(order_ptr + rank)
        else:
            seq = rank
        q_lo = tl.load(qsl_ptr + seq)
        has_q = tl.load(qsl_ptr + seq + 1) > q_lo  # graph padding: nothing to read
        seq_len = tl.where(has_q, tl.load(lens_ptr + seq), 0)
        n_tiles = tl.cdiv(seq_len, PF_TILE)
        per_seg = tl.cdiv(n_tiles, PF_SEGS)
        lo = (r % PF_SEGS) * per_seg
        end = tl.minimum(seq_len, (lo + per_seg) * PF_TILE)  # within the item
        pos = lo * PF_TILE + tl.arange(0, PF_TILES * PF_TILE)
        ok = pos < end
        bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
        blk = tl.load(bt_row + pos // BLOCK_SIZE, mask=ok, other=0).to(tl.int64)
        row = blk * stride_cb + (pos % BLOCK_SIZE) * stride_cs
        h = tl.arange(0, PF_HKV)
        line = tl.arange(0, PF_LINES) * PF_LINE_ELEMS
        off = row[:, None, None] + (h.to(tl.int64) * stride_ch)[None, :, None]
        off = off + line[None, None, :]
        live = ok[:, None, None] & (h < n_kv_heads)[None, :, None]
        live = live & (line >= 0)[None, None, :]
        if PF_RECORD:  # tests: where the hints would go
            n: tl.constexpr = PF_TILES * PF_TILE * PF_HKV * PF_LINES
            idx = tl.arange(0, PF_TILES * PF_TILE)[:, None, None] * (PF_HKV * PF_LINES)
            idx = idx + (h * PF_LINES)[None, :, None] + tl.arange(0, PF_LINES)[None, None, :]
            tl.store(rec_ptr + r.to(tl.int64) * n + idx, tl.where(live, off, -1))
        else:
            off = tl.where(live, off, 0)  # masked lanes hint the cache's first line
            _prefetch_l2(kc_ptr + off)
            _prefetch_l2(vc_ptr + off)
