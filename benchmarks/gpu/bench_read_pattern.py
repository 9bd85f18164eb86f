"""Which part of the paged KV access keeps decode attention under the streaming-read rate?

python benchmarks/gpu/bench_read_pattern.py [--json PATH] [--pool-gib 64] [--read-gib 1]

bench_read_bw.py streams 4 GiB front to back at 4.57-4.60 TB/s (H200, session 29); decode
attention reads the standard workload's KV at 4.0-4.3 TB/s, with K / V double-buffered.
Between the two, the attention reads one kv head's 256-byte rows (stride: a token's heads,
2 KB) out of 16-token cache blocks (32 KB: all heads) that sit anywhere in a pool of tens of
GB, found through a block table. This reads bytes in those patterns, one difference at a
time, with a sum in place of the attention math:
- order: the blocks in pool order, or a random draw from the pool;
- span: one head's rows (a grid of programs per kv head, as the attention's grid runs),
  two or four adjacent heads' rows (512 B / 1 KB runs), or whole blocks (all heads);
- launch order: the heads' programs numbered head by head, or side by side (programs next
  to each other read the same blocks' other heads);
- kv: one pool half (K) or both (K and V, as attention reads them);
- layout: token-major blocks (the engine's: a token's heads side by side) or head-major
  (a head's 16 tokens side by side: one head's rows of a block are one 4 KB run);
- pool: the draw from a small pool or a large one (address-translation reach).
Session 30 (H200, 1 GiB a launch): whole blocks 4.42-4.51 TB/s, one head's rows 4.27-4.38,
attention-like 4.32-4.39; a 2 or 64 GiB pool read the same. Session 31 (another machine):
attention-like 4.38-4.47, two heads' rows 4.47-4.53, heads side by side no change. The
head-major patterns were added after that run.
Each kernel is a persistent grid (programs per SM x SMs in all); program p walks its
share of the block list a tile at a time, its block ids loaded a tile ahead (as the engine's
kernels do) so Triton can multi-buffer the tile loads. Times are CUDA-graph replays.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

BS, HEADS, D = 16, 8, 128  # Qwen3-0.6B's cache: 16-token blocks, 8 kv heads of 128
BLOCK_BYTES = BS * HEADS * D * 2  # bf16: 32 KB a block (one of K or V)


@triton.jit
def _read_blocks_kernel(
    pool_ptr,
    ids_ptr,
    out_ptr,
    tiles_per_prog,
    half_stride,
    GROUP: tl.constexpr,
    HEAD_FAST: tl.constexpr,
    KV: tl.constexpr,
    HEAD_MAJOR: tl.constexpr,
    TILE: tl.constexpr,
    BS: tl.constexpr,
    HEADS: tl.constexpr,
    D: tl.constexpr,
):
    # Program (p, g) reads tiles_per_prog tiles of TILE tokens (TILE // 16 blocks each) from
    # its share of ids: the rows of heads g * GROUP .. g * GROUP + GROUP - 1 of each token
    # (GROUP = HEADS: whole blocks). HEAD_FAST numbers the programs with g varying fastest,
    # so programs launched side by side read the same blocks' other heads.
    groups: tl.constexpr = HEADS // GROUP
    pid = tl.program_id(0)
    if HEAD_FAST:
        p = pid // groups
        g = pid % groups
    else:
        programs = tl.num_programs(0) // groups
        p = pid % programs
        g = pid // programs
    offs_t = tl.arange(0, TILE)
    if HEAD_MAJOR:  # a block is [HEADS, BS, D]
        tok_stride: tl.constexpr = D
        head_stride: tl.constexpr = BS * D
    else:  # [BS, HEADS, D], the engine's layout
        tok_stride: tl.constexpr = HEADS * D
        head_stride: tl.constexpr = D
    c = tl.arange(0, GROUP * D)
    cols = (g * GROUP + c // D) * head_stride + c % D
    acc = tl.zeros([16, GROUP * D], dtype=tl.float32)
    # The tiles feed a dot (as attention's V tiles do), so they go through shared memory
    # and Triton copies them there asynchronously, stages ahead; a plain sum would keep
    # them in registers, one tile in flight.
    ones = tl.full([16, TILE], 1.0, dtype=pool_ptr.dtype.element_ty)
    base = ids_ptr + p.to(tl.int64) * tiles_per_prog * (TILE // BS)
    nxt = tl.load(base + offs_t // BS).to(tl.int64)
    for i in range(tiles_per_prog):
        blk = nxt
        # The ids array has one spare tile at the end, so this read stays in bounds.
        nxt = tl.load(base + (i + 1) * (TILE // BS) + offs_t // BS).to(tl.int64)
        rows = blk * (BS * HEADS * D) + (offs_t % BS).to(tl.int64) * tok_stride
        ptrs = pool_ptr + rows[:, None] + cols[None, :]
        acc = tl.dot(ones, tl.load(ptrs), acc)
        if KV:
            acc = tl.dot(ones, tl.load(ptrs + half_stride), acc)
    # Every row of acc holds the column sums: their total / 16 is the sum read (exact).
    tl.store(out_ptr + p * groups + g, tl.sum(tl.sum(acc, axis=1), axis=0) / 16)


def read_blocks(
    pool: torch.Tensor,
    ids: torch.Tensor,
    programs: int,
    *,
    group: int,
    kv: bool,
    tile: int,
    warps: int,
    head_fast: bool = False,
    head_major: bool = False,
    stages: int = 3,
) -> torch.Tensor:
    """Per program and head group sums of the blocks ids names, read as the pattern says.

    pool: [2, num_blocks, BS, HEADS, D] (K then V; with head_major its memory holds each
    block as [HEADS, BS, D]); ids: int32 [programs * tiles * tile // BS
    + tile // BS] (a spare tile of ids at the end); each program reads a contiguous share of
    group heads' rows (HEADS: whole blocks). Returns [programs, HEADS // group] float32."""
    per_tile = tile // BS
    tiles = (ids.numel() - per_tile) // (programs * per_tile)
    groups = HEADS // group
    out = torch.empty((programs, groups), dtype=torch.float32, device=pool.device)
    _read_blocks_kernel[(programs * groups,)](
        pool, ids, out, tiles, pool.stride(0), GROUP=group, HEAD_FAST=head_fast, KV=kv,
        HEAD_MAJOR=head_major, TILE=tile, BS=BS, HEADS=HEADS, D=D, num_warps=warps,
        num_stages=stages,
    )  # fmt: skip
    return out


def read_blocks_ref(pool: torch.Tensor, ids: torch.Tensor, programs: int, *, group: int,
                    kv: bool, tile: int, head_major: bool = False) -> torch.Tensor:  # fmt: skip
    """read_blocks in torch."""
    if head_major:  # the same memory read as [2, blocks, HEADS, BS, D]
        pool = pool.view(pool.shape[0], pool.shape[1], HEADS, BS, D).transpose(2, 3)
    per_tile = tile // BS
    tiles = (ids.numel() - per_tile) // (programs * per_tile)
    used = ids[: programs * tiles * per_tile].long().view(programs, tiles * per_tile)
    halves = (pool[0], pool[1]) if kv else (pool[0],)
    sums = sum(half[used].float().sum(dim=(1, 2)) for half in halves)  # [programs, HEADS, D]
    return sums.sum(dim=2).view(programs, HEADS // group, group).sum(dim=2)


@dataclass
class Row:
    pattern: str
    pool_gib: float
    programs_per_sm: int
    warps: int
    us: float
    tb_s: float


def block_ids(pool_blocks: int, n: int, random: bool, tile: int, seed: int = 0) -> torch.Tensor:
    """n block ids, in pool order or a random draw, then one spare tile's ids (read as the
    last tile's lookahead, never as data)."""
    if random:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randperm(pool_blocks, generator=g)[:n]
    else:
        ids = torch.arange(n)
    return torch.cat([ids, ids[: tile // BS]]).to(torch.int32)


def main() -> int:
    from graph_timing import graph_time_us

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--pool-gib", type=float, nargs="+", default=[64.0])
    ap.add_argument("--read-gib", type=float, default=1.0, help="bytes read per launch")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[Row] = []
    # name, heads a program, K and V, random draw, tile tokens, heads numbered fastest,
    # head-major blocks
    patterns = [
        ("whole blocks, pool order", HEADS, False, False, 16, False, False),
        ("whole blocks, random", HEADS, False, True, 16, False, False),
        ("one head's rows, pool order", 1, False, False, 64, False, False),
        ("one head's rows, random", 1, False, True, 64, False, False),
        ("one head's rows, random, heads side by side", 1, False, True, 64, True, False),
        ("two heads' rows, random", 2, False, True, 32, False, False),
        ("four heads' rows, random", 4, False, True, 16, False, False),
        ("one head's rows, K and V, random (attention-like)", 1, True, True, 32, False, False),
        ("one head's rows, K and V, random, heads side by side", 1, True, True, 32, True, False),
        ("two heads' rows, K and V, random", 2, True, True, 16, False, False),
        ("one head's 4 KB runs (head-major), random", 1, False, True, 64, False, True),
        ("one head's 4 KB runs (head-major), K and V, random", 1, True, True, 32, False, True),
    ]
    # (programs an SM, warps) per heads a program: whole blocks take 64 KB of shared memory
    # a program (two 32 KB buffers) and a [16, 1024] fp32 accumulator (4+ warps).
    shapes = {1: ((4, 2), (6, 2), (4, 8)), 2: ((2, 4), (4, 4)), 4: ((2, 4), (4, 4)),
              HEADS: ((2, 8), (3, 4))}  # fmt: skip
    for pool_gib in args.pool_gib:
        pool_blocks = int(pool_gib * 2**30) // (2 * BLOCK_BYTES)
        pool = torch.ones((2, pool_blocks, BS, HEADS, D), dtype=torch.bfloat16, device="cuda")
        for name, group, kv, random, tile, head_fast, head_major in patterns:
            # Bytes read: every head group's programs read the whole block list.
            n_blocks = int(args.read_gib * 2**30) // (BLOCK_BYTES * (2 if kv else 1))
            for per_sm, warps in shapes[group]:
                programs = max(1, sms * per_sm * group // HEADS)
                per_prog = max(1, n_blocks // programs // (tile // BS)) * (tile // BS)
                ids = block_ids(pool_blocks, programs * per_prog, random, tile).cuda()
                read = programs * per_prog * BLOCK_BYTES * (2 if kv else 1)
                call = functools.partial(
                    read_blocks, pool, ids, programs, group=group, kv=kv, tile=tile,
                    warps=warps, head_fast=head_fast, head_major=head_major,
                )  # fmt: skip
                try:
                    us = graph_time_us(call)
                except Exception as e:  # e.g. out of shared memory at this shape
                    print(f"pool {pool_gib:5.1f} GiB  {name:54s} {per_sm}/SM x {warps} "
                          f"warps: skipped ({type(e).__name__})")  # fmt: skip
                    continue
                row = Row(name, pool_gib, per_sm, warps, us, read / us / 1e6)
                rows.append(row)
                print(
                    f"pool {pool_gib:5.1f} GiB  {name:54s} {per_sm}/SM x {warps} warps: "
                    f"{us:8.1f} us, {row.tb_s:.2f} TB/s"
                )
        del pool
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
