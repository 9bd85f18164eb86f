"""The fused gate_up + SiLU-and-mul kernel (strixlm/kernels/gate_up_silu.py) under the Triton
interpreter against its torch reference and the two-launch path, when Linear / the Llama MLP
take it, and sm90 compiles of the engine's configs.

fp32 and fp16 in the interpreter (it is not a reference for bf16 dots); bf16 gets the sm90
compile.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from aot_compile import TMA_COMPILE, assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

_MODULES = (
    "strixlm.kernels.activation",
    "strixlm.kernels.splitk_linear",
    "strixlm.kernels.tma_linear",
    "strixlm.kernels.gate_up_silu",
)
reimport_interpreted(*_MODULES)
pytest.importorskip("triton", reason="triton is not installed")
k_act, ksplit, ktma, kgu = (importlib.import_module(n) for n in _MODULES)

from strixlm.layers import linear  # noqa: E402

Cfg = ksplit.SplitKConfig
SMALL = Cfg(16, 16, 16, 1, 4, 1)


def _operands(m: int, inter: int, k: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(2 * inter, k, generator=g) / k**0.5).to(dtype)
    return x, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,inter,k", [(5, 24, 32), (33, 40, 64), (16, 16, 128)])
def test_kernel_matches_reference_and_the_two_launch_path(dtype, m, inter, k):
    x, w = _operands(m, inter, k, dtype, m * inter + k)
    got = kgu.gate_up_silu(x, w, SMALL)
    assert got.shape == (m, inter) and got.dtype == dtype
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-3, "atol": 2e-3}
    torch.testing.assert_close(got, kgu.gate_up_silu_ref(x, w), **tol)
    # The path it replaces: the dense tile GEMM, then the silu_and_mul kernel.
    two_step = k_act.silu_and_mul(ksplit.dense_linear(x, w, SMALL))
    torch.testing.assert_close(got, two_step, **tol)
    want = (
        F.silu(F.linear(x.float(), w.float())[:, :inter]) * (x.float() @ w.float().t())[:, inter:]
    )
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


def test_kernel_strided_rows_and_bad_shapes():
    base, w = _operands(6, 16, 64, torch.float32, 1)
    x = torch.cat([base, base], dim=1)[:, :64]  # rows 128 apart
    torch.testing.assert_close(kgu.gate_up_silu(x, w, SMALL), kgu.gate_up_silu_ref(base, w))
    with pytest.raises(ValueError, match="matching K"):
        kgu.gate_up_silu(base[:, :48], w, SMALL)
    with pytest.raises(ValueError, match="BLOCK_K"):
        kgu.gate_up_silu(base[:, :40].contiguous(), w[:, :40].contiguous(), SMALL)
    assert kgu.gate_up_silu(base[:0], w, SMALL).shape == (0, 16)


def test_plan_follows_the_table():
    half = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)
    rows = kgu.GEMV_MAX_ROWS
    assert kgu.plan(rows, 3072, 1024, **half) is None  # the GEMV fuses the activation there
    assert kgu.plan(rows + 1, 3072, 1024, **half).block_m == 16
    assert kgu.plan(64, 3072, 1024, **half).block_m == 64
    assert kgu.plan(65, 3072, 1024, **half) is None  # past the table: cuBLAS, then SiLU
    assert kgu.plan(64, 3072, 2048, **half) is None  # an unmeasured shape
    assert kgu.plan(64, 3072, 1024, **{**half, "has_bias": True}) is None
    assert kgu.plan(64, 3072, 1024, **{**half, "x_dtype": torch.float16}) is None
    every = [c for table in kgu._CONFIGS.values() for _, c in table]
    assert all(c.split == 1 for c in every)


def test_llama_mlp_takes_the_fused_kernel(monkeypatch):
    """As on CUDA (use_triton true; the table shrunk to the test's shape): the MLP's output
    equals the two-launch path's, and falls back to it past the table's rows."""
    from strixlm.models.llama import MLP

    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(linear, "gate_up_kernel", kgu)
    monkeypatch.setattr(kgu, "_CONFIGS", {(32, 64): [(16, SMALL)]})
    seen = []
    real = kgu.gate_up_silu
    monkeypatch.setattr(kgu, "gate_up_silu", lambda *a: seen.append(a[2]) or real(*a))
    torch.manual_seed(0)
    mlp = MLP(64, 32).to(torch.float16)
    x = torch.randn(12, 64).to(torch.float16)
    with torch.no_grad():
        got = mlp(x)
        assert seen == [SMALL]
        h = kgu.gate_up_silu_ref(x, mlp.gate_up_proj.weight)
        torch.testing.assert_close(got, mlp.down_proj(h), rtol=2e-3, atol=2e-3)
        mlp(torch.randn(17, 64).to(torch.float16))  # 17 rows: past the table
        assert len(seen) == 1
        monkeypatch.setattr(kgu, "ENABLED", False)
        mlp(x)
        assert len(seen) == 1


@pytest.mark.parametrize("m", [5, 40])
def test_tma_kernel_matches_reference(m):
    """The TMA variant (fp16: the interpreter's descriptor loads of bf16 are wrong), with a
    partial last row tile and two column tiles per half."""
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 64, generator=g).to(torch.float16)
    w = (torch.randn(128, 64, generator=g) * 0.5).to(torch.float16)
    got = kgu.tma_gate_up_silu(x, w, ktma.TmaConfig(16, 32, 32, 4, 2))
    assert got.shape == (m, 64)
    torch.testing.assert_close(got, kgu.gate_up_silu_ref(x, w), rtol=4e-3, atol=4e-3)
    with pytest.raises(ValueError, match="TMA tiles"):  # I = 64 is not a multiple of 48
        kgu.tma_gate_up_silu(x, w, ktma.TmaConfig(16, 48, 32, 4, 2))


def test_linear_takes_the_tma_kernel_at_prefill_rows(monkeypatch):
    """Where plan_tma gives a config, Linear.forward_gate_up_silu runs the TMA kernel (its
    decode table has no row count this large); plan_tma itself wants CUDA, sm90+ and the
    row threshold."""
    lin = linear.Linear(64, 128, bias=False).to(torch.float16)
    x = torch.randn(40, 64).to(torch.float16)
    assert kgu.plan_tma(x, lin.weight, False) is None  # a CPU tensor
    small = ktma.TmaConfig(16, 32, 32, 4, 2)
    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(kgu, "plan_tma", lambda x, w, b: small if x.shape[0] >= 32 else None)
    seen = []
    real = kgu.tma_gate_up_silu
    monkeypatch.setattr(kgu, "tma_gate_up_silu", lambda *a: seen.append(a[2]) or real(*a))
    with torch.no_grad():
        got = lin.forward_gate_up_silu(x)
        torch.testing.assert_close(got, kgu.gate_up_silu_ref(x, lin.weight), rtol=4e-3, atol=4e-3)
        assert seen == [small]
        assert lin.forward_gate_up_silu(x[:20]) is None  # neither table: the two-step path
    assert seen == [small]


AOT = (
    TMA_COMPILE
    + r"""
from strixlm.kernels import gate_up_silu as g
for dt in ("bf16", "fp16"):
    sig = dict(x_ptr=f"*{dt}", w_ptr=f"*{dt}", out_ptr=f"*{dt}", M="i32", INTER="i32", K="i32",
               stride_xm="i32", stride_wn="i32", stride_om="i32")
    for cfg in {c for table in g._CONFIGS.values() for _, c in table}:
        c = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PDL=True)
        src = ASTSource(g._gate_up_silu_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
        triton.compile(src, target=target,
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    compile_tma(g._tma_gate_up_silu_kernel, g.PREFILL_CONFIG, dt, INTER="i32", K="i32")
print("compiled")
"""
)


def test_kernel_compiles_for_sm90():
    """Every config of the engine's table, bf16 and fp16."""
    assert_compiles(AOT)
