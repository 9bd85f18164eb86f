"""Triton GEMV (small-batch linear) against its torch reference, under the interpreter on CPU."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

from strixlm.kernels import gemv as gk


@pytest.mark.parametrize("m", [1, 2, 3, 8])
@pytest.mark.parametrize("n,k", [(48, 64), (20, 96), (64, 40)])
@pytest.mark.parametrize("bias", [False, True])
def test_gemv_matches_reference(m, n, k, bias):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    out = gk.gemv(x, w, b, block_k=32)
    ref = gk.gemv_ref(x, w, b)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_gemv_fp16_and_strided_rows():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(4, 130, generator=g).half()
    x = big[:, :128]  # rows strided by 130: only the inner dim must be contiguous
    w = torch.randn(72, 128, generator=g).half()
    out = gk.gemv(x, w)
    torch.testing.assert_close(out.float(), gk.gemv_ref(x, w, None).float(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("m", [1, 3])
def test_gemv_relu2_epilogue(m):
    """relu(y)^2 in the store, each step rounded to bf16 like torch.square(relu(linear))."""
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 64, generator=g).bfloat16()
    w = torch.randn(40, 64, generator=g).bfloat16()
    out = gk.gemv(x, w, block_k=32, relu2=True)
    ref = gk.gemv_ref(x, w, None, relu2=True)
    assert (ref == 0).any() and (ref > 0).any()  # both sides of the relu are exercised
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=1e-2)
    assert ((out == 0) == (ref == 0)).float().mean() > 0.95


def test_gemv_fp32_output_from_bf16_rows_and_fp32_weight():
    """The MoE router: bf16 activations, fp32 weight, fp32 logits (x upcast exactly)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 96, generator=g).bfloat16()
    w = torch.randn(24, 96, generator=g)
    out = gk.gemv(x, w, block_k=32, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x.float() @ w.t(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k", [(1, 64), (3, 64), (8, 80)])
def test_gemv_silu_mul_prologue(m, k):
    """x = [gate | up]: the product with silu_and_mul(x) computed as the kernel loads it is
    the GEMV of the separate silu_and_mul kernel's output, bit for bit (k 80: masked K)."""
    from strixlm.kernels.activation import silu_and_mul

    g = torch.Generator().manual_seed(k + m)
    gu = torch.randn(m, 2 * k, generator=g).bfloat16()
    w = torch.randn(40, k, generator=g).bfloat16()
    fused = gk.gemv(gu, w, block_k=32, silu_mul=True)
    assert torch.equal(fused, gk.gemv(silu_and_mul(gu), w, block_k=32))
    ref = gk.gemv_ref(torch.nn.functional.silu(gu[:, :k]) * gu[:, k:], w, None).float()
    assert (fused.float() - ref).norm() < 3e-2 * ref.norm()  # bf16 roundings apart


def test_max_rows_env(monkeypatch):
    monkeypatch.delenv("STRIXLM_GEMV_MAX_ROWS", raising=False)
    assert gk._env_max_rows() == 1
    monkeypatch.setenv("STRIXLM_GEMV_MAX_ROWS", "20")
    assert gk._env_max_rows() == gk.KERNEL_ROWS  # clamped to what the kernel takes
    monkeypatch.setenv("STRIXLM_GEMV_MAX_ROWS", "eight")
    with pytest.raises(ValueError, match="STRIXLM_GEMV_MAX_ROWS"):
        gk._env_max_rows()


def test_gemv_rejects_too_many_rows():
    with pytest.raises(AssertionError):
        gk.gemv(torch.randn(gk.KERNEL_ROWS + 1, 16), torch.randn(8, 16))


AOT = r"""
from strixlm.kernels import gemv as gk
sig = dict(out_ptr="*bf16", x_ptr="*bf16", w_ptr="*bf16", b_ptr="*bf16", N="i32", K="i32",
           stride_xm="i32", stride_wn="i32", stride_om="i32")
for m in (1, 3, 8):
    consts = dict(M=m, HAS_BIAS=m == 3, BLOCK_N=16, BLOCK_K=512, EVEN_K=m != 8, RELU2=m == 1,
                  SILU_MUL=m != 1, PDL=m == 3)
    src = ASTSource(gk._gemv_kernel, {**sig, **{k: "constexpr" for k in consts}}, consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
print("compiled")
"""


def test_gemv_compiles_for_sm90():
    """The interpreter never compiles; ptxas (shipped with triton) does, without a GPU."""
    assert_compiles(AOT)
