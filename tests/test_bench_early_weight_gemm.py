"""The early-weight GEMM probe (benchmarks/gpu/bench_early_weight_gemm.py, Gluon): every
config compiles for sm90, with its weight TMA loads before griddepcontrol.wait when EARLY
and after it otherwise. Gluon has no interpreter; the probe checks values on the GPU."""

from __future__ import annotations

import pytest
from aot_compile import assert_compiles

pytest.importorskip("triton", reason="triton is not installed")

SCRIPT = r"""
import sys
sys.path.insert(0, "benchmarks/gpu")
import torch
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource
import bench_early_weight_gemm as b

target = GPUTarget("cuda", 90, 32)
for cfg in b.CONFIGS:
    x = torch.empty(64, 1024, dtype=torch.bfloat16)
    w = torch.empty(4096, 1024, dtype=torch.bfloat16)
    o = torch.empty(64, 4096, dtype=torch.bfloat16)
    descs = b.descriptors(x, w, o, cfg)
    sig = dict(zip(("x_desc", "w_desc", "out_desc"), map(mangle_type, descs)), K="i32")
    for early in (True, False):
        c = dict(STAGES=cfg.stages, EARLY=early, PDL=True, num_warps=cfg.num_warps)
        src = GluonASTSource(b._early_weight_gemm_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
        k = triton.compile(src, target=target, options=dict(num_warps=cfg.num_warps))
        ptx = k.asm["ptx"]
        assert "wgmma.mma_async" in ptx, cfg
        assert k.metadata.shared <= 227 * 1024, (cfg, k.metadata.shared)
        wait = ptx.find("griddepcontrol.wait")
        assert wait >= 0 and (ptx.find("cp.async.bulk.tensor") < wait) == early, (cfg, early)
print("compiled")
"""


def test_early_weight_gemm_compiles_for_sm90():
    assert_compiles(SCRIPT)
