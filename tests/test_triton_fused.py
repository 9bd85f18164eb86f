"""Triton RMSNorm / fused-add RMSNorm / silu_and_mul / rotary vs their torch references.

Runs on CPU under the Triton interpreter (fp32 and fp16 only: the interpreter is not a
reference for bf16). benchmarks/gpu/check_fused.py checks the same kernels on the GPU.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

# The interpreter itself trips a numpy deprecation on every loop bound; not ours to fix.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

_KERNEL_MODULES = (
    "strixlm.kernels.rmsnorm",
    "strixlm.kernels.activation",
    "strixlm.kernels.rotary",
)


reimport_interpreted(*_KERNEL_MODULES)
pytest.importorskip("triton", reason="triton is not installed")
k_norm, k_act, k_rot = (importlib.import_module(n) for n in _KERNEL_MODULES)

from strixlm.layers.activation import silu_and_mul as ref_silu_and_mul  # noqa: E402
from strixlm.layers.norm import RMSNorm  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402

DTYPES = [torch.float32, torch.float16]
TOKENS = [1, 7, 33]


def _tol(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-3, "atol": 1e-3}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, dtype: torch.dtype, g: torch.Generator, scale: float = 1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _norm_layer(hidden: int, dtype: torch.dtype, g: torch.Generator) -> RMSNorm:
    layer = RMSNorm(hidden, eps=1e-5)
    layer.weight.data = (1.0 + 0.5 * torch.randn(hidden, generator=g)).to(dtype)
    return layer


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 1024, 100])
@pytest.mark.parametrize("t", TOKENS)
def test_rmsnorm(dtype: torch.dtype, hidden: int, t: int) -> None:
    g = _gen(hidden * 100 + t)
    layer = _norm_layer(hidden, dtype, g)
    x = _randn(t, hidden, dtype=dtype, g=g, scale=3.0)
    ref = layer(x)
    out = torch.full_like(ref, float("nan"))  # poison: every element must be written
    got = k_norm.rmsnorm(x, layer.weight.data, layer.eps, out=out)
    assert got is out
    torch.testing.assert_close(got, ref, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 1024, 100])
@pytest.mark.parametrize("t", TOKENS)
def test_fused_add_rmsnorm(dtype: torch.dtype, hidden: int, t: int) -> None:
    g = _gen(hidden * 100 + t + 1)
    layer = _norm_layer(hidden, dtype, g)
    x = _randn(t, hidden, dtype=dtype, g=g)
    residual = _randn(t, hidden, dtype=dtype, g=g, scale=4.0)
    ref_out, ref_sum = layer(x, residual.clone())
    x_before = x.clone()
    out = torch.full_like(ref_out, float("nan"))
    got_out, got_sum = k_norm.fused_add_rmsnorm(x, residual, layer.weight.data, layer.eps, out=out)
    assert got_sum is residual, "the sum must be written into the residual buffer"
    torch.testing.assert_close(got_sum, ref_sum, **_tol(dtype))
    torch.testing.assert_close(got_out, ref_out, **_tol(dtype))
    assert torch.equal(x, x_before), "x must not be modified"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_rmsnorm_strided_heads(dtype: torch.dtype, head_dim: int) -> None:
    # q/k norm: [T, H, D] views into a wider qkv buffer, no copy.
    g = _gen(head_dim)
    t, hq, hk = 7, 4, 2
    layer = _norm_layer(head_dim, dtype, g)
    qkv = _randn(t, (hq + 2 * hk) * head_dim, dtype=dtype, g=g)
    q = qkv[:, : hq * head_dim].view(t, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(t, hk, head_dim)
    for view in (q, k):
        ref = layer(view)
        got = k_norm.rmsnorm(view, layer.weight.data, layer.eps)
        torch.testing.assert_close(got, ref, **_tol(dtype))
    # Fused variant on a strided residual: the sum lands in the view, nothing else moves.
    buf = _randn(t, 2 * hq * head_dim, dtype=dtype, g=g)
    res = buf[:, : hq * head_dim].view(t, hq, head_dim)
    tail = buf[:, hq * head_dim :].clone()
    ref_out, ref_sum = layer(q, res.clone())
    got_out, got_sum = k_norm.fused_add_rmsnorm(q, res, layer.weight.data, layer.eps)
    torch.testing.assert_close(got_sum, ref_sum, **_tol(dtype))
    torch.testing.assert_close(got_out, ref_out, **_tol(dtype))
    assert torch.equal(buf[:, hq * head_dim :], tail)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", [576, 1024, 100])
@pytest.mark.parametrize("t", TOKENS)
def test_silu_and_mul(dtype: torch.dtype, inter: int, t: int) -> None:
    g = _gen(inter * 100 + t + 2)
    x = _randn(t, 2 * inter, dtype=dtype, g=g, scale=3.0)
    ref = ref_silu_and_mul(x)
    out = torch.full_like(ref, float("nan"))
    got = k_act.silu_and_mul(x, out=out)
    assert got is out
    torch.testing.assert_close(got, ref, **_tol(dtype))


def test_silu_and_mul_block_tail() -> None:
    # An intermediate size past one 1024-wide column block, with a ragged tail.
    g = _gen(5)
    x = _randn(3, 2 * 2500, dtype=torch.float32, g=g, scale=3.0)
    torch.testing.assert_close(k_act.silu_and_mul(x), ref_silu_and_mul(x), **_tol(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 96])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (14, 2)])
@pytest.mark.parametrize("t", TOKENS)
def test_rotary(dtype: torch.dtype, head_dim: int, heads: tuple[int, int], t: int) -> None:
    hq, hk = heads
    g = _gen(head_dim * 1000 + hq * 10 + t)
    max_pos = 4096
    rot = RotaryEmbedding(head_dim, max_pos, 10000.0)
    # q and k as views into one qkv buffer, as the model makes them.
    qkv = _randn(t, (hq + 2 * hk) * head_dim, dtype=dtype, g=g, scale=2.0)
    q = qkv[:, : hq * head_dim].view(t, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(t, hk, head_dim)
    v_before = qkv[:, (hq + hk) * head_dim :].clone()
    # Random, non-contiguous positions (every other entry of a longer int64 tensor).
    positions = torch.randint(0, max_pos, (2 * t,), generator=g)[::2]
    ref_q, ref_k = rot(positions, q.clone(), k.clone())
    k_rot.rotary_inplace(positions, q, k, rot.cos, rot.sin)
    torch.testing.assert_close(q, ref_q, **_tol(dtype))
    torch.testing.assert_close(k, ref_k, **_tol(dtype))
    assert torch.equal(qkv[:, (hq + hk) * head_dim :], v_before), "v must be untouched"


def test_cpu_path_does_not_dispatch() -> None:
    # CPU tensors always take the torch code (the HF-equality tests depend on it).
    from strixlm.kernels import dispatch
    from strixlm.layers import activation, norm, rotary

    assert norm.use_triton is activation.use_triton is rotary.use_triton is dispatch.use_triton
    assert not dispatch.use_triton(torch.zeros(2, 4))
