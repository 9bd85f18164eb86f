"""The early-weight Gluon GEMM of the probe bench_early_weight_gemm.py
(benchmarks/gpu/early_weight_gemm.py): an sm90 compile of every config in the probe's list,
with its weight TMA loads before griddepcontrol.wait when EARLY and after it otherwise, and
its guard on shapes that do not fit a config. Gluon has no interpreter; the probe checks its
values against fp32 torch on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from aot_compile import assert_compiles

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

import early_weight_gemm as early  # noqa: E402

pytestmark = pytest.mark.skipif(not early.HAS_GLUON, reason="this triton has no Gluon")


def test_rejects_a_k_that_does_not_fit_the_config():
    x = torch.zeros(4, 1000, dtype=torch.bfloat16)
    w = torch.zeros(64, 1000, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="do not fit"):
        early.early_gemm(x, w, early.EarlyConfig(64, 64, 128, 4))
    with pytest.raises(ValueError, match="split 1"):
        early.early_gemm(x, w, early.EarlyConfig(64, 64, 128, 4, split=4))


SCRIPT = r"""
import torch
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource
import sys
sys.path.insert(0, "benchmarks/gpu")
import early_weight_gemm as e

configs = [e.EarlyConfig(64, 64, 128, 4), e.EarlyConfig(64, 32, 128, 4),
           e.EarlyConfig(64, 128, 64, 4), e.EarlyConfig(64, 64, 64, 6),
           e.EarlyConfig(128, 64, 128, 3), e.EarlyConfig(64, 64, 128, 4, split=4)]
target = GPUTarget("cuda", 90, 32)
for cfg in configs:
    x = torch.empty(64, 1024, dtype=torch.bfloat16)
    w = torch.empty(4096, 1024, dtype=torch.bfloat16)
    if cfg.split == 1:
        o = torch.empty(64, 4096, dtype=torch.bfloat16)
    else:
        o = torch.empty(cfg.split * 64, 4096, dtype=torch.float32)
    descs = e.descriptors(x, w, o, cfg)
    sig = dict(zip(("x_desc", "w_desc", "out_desc"), map(mangle_type, descs)))
    sig.update(part_ptr="*bf16" if cfg.split == 1 else "*fp32", M="i32", N="i32", K="i32")
    for early in (True, False):
        c = dict(STAGES=cfg.stages, EARLY=early, PDL=True, SPLIT=cfg.split,
                 num_warps=cfg.num_warps)
        src = GluonASTSource(e._early_weight_gemm_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
        k = triton.compile(src, target=target, options=dict(num_warps=cfg.num_warps))
        ptx = k.asm["ptx"]
        assert "wgmma.mma_async" in ptx, cfg
        assert k.metadata.shared <= 227 * 1024, (cfg, k.metadata.shared)
        wait = ptx.find("griddepcontrol.wait")
        assert wait >= 0 and (ptx.find("cp.async.bulk.tensor") < wait) == early, (cfg, early)
print("compiled")
"""


def test_compiles_for_sm90():
    assert_compiles(SCRIPT)
