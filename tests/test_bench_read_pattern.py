"""The read-pattern probe's kernel (benchmarks/gpu/bench_read_pattern.py) against its torch
sum under the Triton interpreter, for every pattern it times."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_read_pattern as bench  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize(
    ("group", "kv", "random", "tile", "head_fast", "head_major"),
    [(bench.HEADS, False, False, 16, False, False), (bench.HEADS, True, True, 16, False, False),
     (1, False, True, 64, False, False), (1, True, True, 32, False, False),
     (1, True, False, 32, True, False), (2, False, True, 32, True, False),
     (4, True, True, 16, False, False), (1, False, True, 64, False, True),
     (1, True, True, 32, False, True), (2, True, False, 16, True, True)],
)  # fmt: skip
def test_read_blocks_sums_what_the_pattern_names(group, kv, random, tile, head_fast, head_major):
    g = torch.Generator().manual_seed(tile + group + kv)
    pool_blocks, programs = 24, 3
    pool = torch.randn((2, pool_blocks, bench.BS, bench.HEADS, bench.D), generator=g)
    per_prog = 2 * (tile // bench.BS)  # two tiles a program
    ids = bench.block_ids(pool_blocks, programs * per_prog, random, tile, seed=1)
    assert ids.numel() == programs * per_prog + tile // bench.BS
    got = bench.read_blocks(
        pool, ids, programs, group=group, kv=kv, tile=tile, warps=4, head_fast=head_fast,
        head_major=head_major,
    )  # fmt: skip
    ref = bench.read_blocks_ref(
        pool, ids, programs, group=group, kv=kv, tile=tile, head_major=head_major
    )
    assert got.shape == (programs, bench.HEADS // group)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)


AOT = r"""
import sys
sys.path.insert(0, "benchmarks/gpu")
import bench_read_pattern as bench

shapes = ((8, False, 16, 8, False), (1, True, 32, 2, False), (1, False, 64, 2, False),
          (2, True, 16, 4, False), (1, True, 32, 2, True))
for group, kv, tile, warps, head_major in shapes:
    sig = dict(pool_ptr="*bf16", ids_ptr="*i32", out_ptr="*fp32", tiles_per_prog="i32",
               half_stride="i32")
    c = dict(GROUP=group, HEAD_FAST=False, KV=kv, HEAD_MAJOR=head_major, TILE=tile,
             BS=bench.BS, HEADS=bench.HEADS, D=bench.D)
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    src = ASTSource(bench._read_blocks_kernel, {**sig, **{k: "constexpr" for k in c}}, c, attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=3))
    # The ids a tile ahead let the pipeliner copy the tiles asynchronously.
    assert "cp.async" in k.asm["ptx"], (group, kv, tile)
print("compiled")
"""


def test_compiles_for_sm90() -> None:
    from aot_compile import assert_compiles

    assert_compiles(AOT)
