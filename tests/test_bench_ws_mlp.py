"""The warp-specialized persistent MLP of the probe bench_ws_mlp.py
(benchmarks/gpu/ws_mlp.py): an sm90 compile of every config in the probe's list (a producer
warp with TMA loads, a warpgroup with wgmma, the slice counters released once a program and
acquired before down's loads, shared memory within the H200's 227 KB), and its guards on
shapes it does not take. Gluon has no interpreter; the probe checks its values and counters
against torch on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from aot_compile import assert_compiles

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

import ws_mlp  # noqa: E402

pytestmark = pytest.mark.skipif(not ws_mlp.HAS_GLUON, reason="this triton has no Gluon")


def test_rejects_shapes_it_does_not_take():
    cfg = ws_mlp.WsConfig(block_n=16, block_k=128, split=4, stages=8)
    with pytest.raises(ValueError, match="at most 64 rows"):
        ws_mlp.WsMLP(cfg, 1024, 3072, 65, "cpu", torch.bfloat16, 132)
    with pytest.raises(ValueError, match="do not fit"):
        ws_mlp.WsMLP(cfg, 1000, 3072, 8, "cpu", torch.bfloat16, 132)
    with pytest.raises(ValueError, match="K slice"):
        ws_mlp.WsMLP(ws_mlp.WsConfig(16, 128, 8, 8), 1024, 3200, 8, "cpu", torch.bfloat16, 132)
    with pytest.raises(ValueError, match="K slice"):  # 1536 wide: more than x's buffer holds
        ws_mlp.WsMLP(ws_mlp.WsConfig(16, 128, 2, 8), 1024, 3072, 8, "cpu", torch.bfloat16, 132)
    mlp = ws_mlp.WsMLP(cfg, 1024, 3072, 8, "cpu", torch.bfloat16, 132)
    with pytest.raises(ValueError, match="built for"):
        mlp(torch.zeros(4, 1024, dtype=torch.bfloat16), None, None)


def test_expected_counters():
    cfg = ws_mlp.WsConfig(block_n=16, block_k=128, split=4, stages=8)
    mlp = ws_mlp.WsMLP(cfg, 1024, 3072, 8, "cpu", torch.bfloat16, 132)
    want = [0] * (1 + 4 * 32)
    want[0] = 132  # 192 gate_up + 128 down tasks, one program an SM
    for s in range(4):
        want[1 + 32 * s] = 48  # 192 gate_up tasks over 4 slices
    assert mlp.expected_counters() == want


SCRIPT = r"""
import torch
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource
import sys
sys.path.insert(0, "benchmarks/gpu")
import bench_ws_mlp as b
import ws_mlp as w

target = GPUTarget("cuda", 90, 32)
for cfg in b.CONFIGS:
    x = torch.empty(64, 1024, dtype=torch.bfloat16)
    gu = torch.empty(6144, 1024, dtype=torch.bfloat16)
    d = torch.empty(1024, 3072, dtype=torch.bfloat16)
    descs = w.descriptors(x, gu, d, cfg)
    sig = dict(zip(("x_desc", "wgu_desc", "wd_desc"), map(mangle_type, descs)))
    sig.update(act_ptr="*bf16", part_ptr="*fp32", sync_ptr="*i32", M="i32", NUM_PROGRAMS="i32")
    c = dict(H=1024, I=3072, SPLIT=cfg.split, STAGES=cfg.stages, FLAG_STRIDE=cfg.flag_stride,
             PDL=True, RESET=True, STREAM_ONLY=False,
             NO_WAIT=False, LAG=cfg.lag)
    names = list(sig) + list(c)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")}
    src = GluonASTSource(w._ws_mlp_kernel, {**sig, **{k: "constexpr" for k in c}}, c, attrs)
    k = triton.compile(src, target=target, options=dict(num_warps=4))
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, cfg
    assert ptx.count("griddepcontrol.wait") == 1, cfg  # the compute warps only
    assert "atom.global.gpu.release.add" in ptx and "ld.global.gpu.acquire" in ptx, cfg
    assert k.metadata.shared <= 227 * 1024, (cfg, k.metadata.shared)
print("compiled")
"""


def test_compiles_for_sm90():
    assert_compiles(SCRIPT)
