"""The TMA tile GEMM (strixlm/kernels/tma_linear.py): against its torch reference under the
Triton interpreter, its measured table, when Linear takes it, and an sm90 compile.

fp16 only in the interpreter (its descriptor loads of bf16 come back wrong there); bf16 gets
the sm90 compile.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from aot_compile import TMA_COMPILE, assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)
reimport_interpreted("strixlm.kernels.tma_linear")

import strixlm.kernels.tma_linear as tma  # noqa: E402
from strixlm.layers import linear  # noqa: E402

SMALL = tma.TmaConfig(16, 32, 32, 4, 2)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("m", [1, 16, 37])
def test_tma_linear_matches_reference(m):
    x = torch.randn(m, 64, generator=_gen(m)).to(torch.float16)
    w = torch.randn(96, 64, generator=_gen(100 + m)).to(torch.float16)
    got = tma.tma_linear(x, w, SMALL)
    assert got.shape == (m, 96) and got.dtype == torch.float16
    # One rounding of an fp32 sum: at most an ulp apart where the summation orders differ.
    torch.testing.assert_close(got, tma.tma_linear_ref(x, w), rtol=2e-3, atol=2e-3)


def test_tma_linear_rejects_what_tma_cannot_describe():
    w = torch.randn(96, 64).to(torch.float16)
    with pytest.raises(ValueError, match="TMA tiles"):
        tma.tma_linear(torch.randn(8, 48).to(torch.float16), w[:, :48], SMALL)  # K % block_k
    x = torch.randn(8, 65).to(torch.float16)[:, 1:]  # base 2 bytes off 16-byte alignment
    assert not tma.tma_ready(x)
    with pytest.raises(ValueError, match="TMA tiles"):
        tma.tma_linear(x, w, SMALL)
    assert tma.tma_ready(torch.randn(8, 64).to(torch.float16))
    assert not tma.tma_ready(torch.randn(8, 64).to(torch.float16).t())
    assert tma.tma_linear(torch.empty(0, 64, dtype=torch.float16), w, SMALL).shape == (0, 96)


def test_plan_follows_the_table():
    kw = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)
    assert tma.plan(128, 4096, 1024, **kw) is None  # qkv: the pointer-load GEMM's rows
    assert tma.plan(129, 4096, 1024, **kw).block_m == 64
    assert tma.plan(193, 4096, 1024, **kw).block_m == 128
    assert tma.plan(257, 4096, 1024, **kw) is None  # past the measured rows: cuBLAS
    assert tma.plan(64, 6144, 1024, **kw) is None and tma.plan(65, 6144, 1024, **kw)
    assert tma.plan(129, 6144, 1024, **kw) is None
    assert tma.plan(200, 1024, 2048, **kw) is None  # o_proj / down: not a win
    assert tma.plan(200, 4096, 1024, **{**kw, "has_bias": True}) is None
    assert tma.plan(200, 4096, 1024, **{**kw, "x_dtype": torch.float32}) is None


def test_forward_takes_the_tma_kernel_at_measured_shapes(monkeypatch):
    # As on CUDA: use_triton true; the table shrunk to this test's shape and tile.
    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(linear, "tma", tma)
    monkeypatch.setattr(tma, "_TABLE", {(96, 64): [(9, 40, SMALL)]})
    seen = []
    real = tma.tma_linear
    monkeypatch.setattr(tma, "tma_linear", lambda *a: seen.append(a[2]) or real(*a))
    lin = linear.Linear(64, 96, bias=False).to(torch.float16)
    x = torch.randn(20, 64, generator=_gen(4)).to(torch.float16)
    got = lin(x)
    assert seen == [SMALL]
    torch.testing.assert_close(
        got, F.linear(x.float(), lin.weight.float()).half(), rtol=2e-3, atol=2e-3
    )
    lin(torch.randn(41, 64).to(torch.float16))  # past the table's rows: cuBLAS's path
    lin(torch.randn(20, 65).to(torch.float16)[:, 1:])  # misaligned x: the plain path
    assert len(seen) == 1
    monkeypatch.setattr(tma, "ENABLED", False)
    lin(x)
    assert len(seen) == 1


AOT = (
    TMA_COMPILE
    + r"""
from strixlm.kernels import tma_linear as t
for dt in ("bf16", "fp16"):
    for cfg in {c for rows in t._TABLE.values() for _, _, c in rows}:
        compile_tma(t._tma_linear_kernel, cfg, dt, K="i32")
print("compiled")
"""
)


def test_kernels_compile_for_sm90_with_tma_and_wgmma():
    """The table's configs, bf16 and fp16, within the H200's shared memory."""
    assert_compiles(AOT)
