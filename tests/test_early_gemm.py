"""The early-weight Gluon GEMM (strixlm/kernels/early_gemm.py): its plan (off unless
STRIXLM_EARLY_GEMM=1), Linear's dispatch to it, and an sm90 compile of every config in the
probe's list with its weight TMA loads before griddepcontrol.wait when EARLY and after it
otherwise. Gluon has no interpreter; bench_early_weight_gemm.py checks its values against
early_gemm_ref on the GPU."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

from strixlm.kernels import early_gemm as early
from strixlm.layers import linear

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = pytest.mark.skipif(not early.HAS_GLUON, reason="this triton has no Gluon")

QKV = (4096, 1024)


def test_plan_is_off_by_default():
    assert not early.ENABLED
    assert early.plan(64, *QKV, torch.bfloat16) is None


def test_plan_when_enabled(monkeypatch):
    monkeypatch.setattr(early, "ENABLED", True)
    cfg = early.plan(64, *QKV, torch.bfloat16)
    assert cfg is not None and QKV[1] % cfg.block_k == 0
    assert early.plan(1, *QKV, torch.bfloat16) is None  # the GEMV's rows
    assert early.plan(257, *QKV, torch.bfloat16) is None  # past the table
    assert early.plan(64, *QKV, torch.float32) is None
    assert early.plan(64, 4096, 1000, torch.bfloat16) is None  # a shape it has no config for


def test_linear_dispatches_planned_products(monkeypatch):
    """With the switch on, Linear's plain product goes to early_gemm where plan has a config
    and both operands suit TMA (the kernel itself needs an sm90 GPU: its reference stands in
    for it here, to check the dispatch only)."""
    calls = []

    def record(x, w, cfg):
        calls.append(cfg)
        return early.early_gemm_ref(x, w)

    monkeypatch.setattr(early, "ENABLED", True)
    monkeypatch.setattr(early, "early_gemm", record)
    monkeypatch.setattr(early, "device_ok", lambda x: True)  # an sm90 GPU, for the dispatch
    x = torch.randn(64, QKV[1], dtype=torch.bfloat16)
    w = torch.randn(*QKV, dtype=torch.bfloat16) * 0.02
    out = linear._tile_gemm(x, w, None)
    assert len(calls) == 1 and torch.equal(out, early.early_gemm_ref(x, w))
    linear._tile_gemm(x[:, :1000].contiguous(), w[:, :1000].contiguous(), None)  # no config
    linear._tile_gemm(x, w, torch.zeros(QKV[0], dtype=torch.bfloat16))  # a bias: not here
    assert len(calls) == 1


def test_no_dispatch_off_sm90(monkeypatch):
    """A planned product on a device without wgmma / TMA (here the CPU) keeps its old path."""
    calls = []
    monkeypatch.setattr(early, "ENABLED", True)
    monkeypatch.setattr(early, "early_gemm", lambda *a: calls.append(a))
    x = torch.randn(64, QKV[1], dtype=torch.bfloat16)
    w = torch.randn(*QKV, dtype=torch.bfloat16)
    assert early.plan(64, *QKV, torch.bfloat16) is not None and not early.device_ok(x)
    linear._tile_gemm(x, w, None)
    assert calls == []


SCRIPT = r"""
import torch
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource
from strixlm.kernels import early_gemm as e

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
