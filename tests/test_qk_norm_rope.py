"""Fused per-head q/k RMSNorm + neox rotary (Qwen3) vs its torch reference and the layers.

Runs on CPU under the Triton interpreter. Tolerance: the kernel rounds at the same places
as the torch path (normed value, weight product, rotated value, each to the input dtype),
so the only legitimate difference is the fp32 summation order of the mean of squares,
which moves the rsqrt factor by about one fp32 ulp. For fp16/bf16 that can flip one
rounding of an element by one ulp, so we allow eps(dtype) * max|ref| absolute (one to two
ulps at the largest magnitude) and require >= 99% of the elements to be bit-identical
(in practice all are); for fp32, a few fp32 ulps of the largest magnitude.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

_KERNEL_MODULES = (
    "strixlm.kernels.qk_norm_rope",
    "strixlm.kernels.rmsnorm",
    "strixlm.kernels.rotary",
    "strixlm.kernels.kv_write",
)


reimport_interpreted(*_KERNEL_MODULES)
pytest.importorskip("triton", reason="triton is not installed")
k_fused, k_norm, k_rot, k_kvw = (importlib.import_module(n) for n in _KERNEL_MODULES)
import triton.language as tl  # noqa: E402
import triton.runtime.interpreter as _interp  # noqa: E402

from strixlm.layers.norm import RMSNorm  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402
from strixlm.models import llama  # noqa: E402
from strixlm.models.qwen3 import Qwen3Attention  # noqa: E402

EPS = 1e-6
MAX_POS = 256
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _bf16_round_to_nearest(monkeypatch):
    """The interpreter casts fp32 -> bf16 by truncation (it ignores the rounding mode of a
    plain cast); GPUs and torch round to nearest even. Give the interpreter torch's
    rounding so bf16 results are checked against what the GPU computes."""
    orig = getattr(_interp, "_convert_float", None)
    if orig is None:
        return

    def convert(x, src, dst, rounding_mode):
        if src == tl.float32 and dst == tl.bfloat16:
            f32 = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            return f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return orig(x, src, dst, rounding_mode)

    monkeypatch.setattr(_interp, "_convert_float", convert)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _weights(d: int, dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return tuple((1.0 + 0.5 * torch.randn(d, generator=g)).to(dtype) for _ in range(2))


def _qkv(t: int, hq: int, hk: int, d: int, dtype: torch.dtype, g: torch.Generator, pad: int = 0):
    """A [T, (Hq + 2 Hk) D + pad] projection output and its q/k views, as the model makes."""
    qkv = (torch.randn(t, (hq + 2 * hk) * d + pad, generator=g) * 2.0).to(dtype)
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    return qkv, q, k


def _positions(t: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    # Non-contiguous: every other entry of a longer tensor.
    pos = torch.randint(0, MAX_POS, (2 * t,), generator=g).to(dtype)[::2]
    assert not pos.is_contiguous() or t == 1
    return pos


def _assert_close(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    eps = torch.finfo(ref.dtype).eps
    amax = ref.float().abs().max().item()
    if ref.dtype == torch.float32:
        torch.testing.assert_close(got, ref, rtol=0, atol=4 * eps * amax)
        return
    torch.testing.assert_close(got, ref, rtol=0, atol=eps * amax)
    exact = (got.view(torch.int16) == ref.view(torch.int16)).float().mean().item()
    assert exact >= 0.99, f"only {exact:.1%} of the elements are bit-identical"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads", [(4, 2), (8, 8)])
@pytest.mark.parametrize("head_dim", [32, 64, 48])
@pytest.mark.parametrize("t,pos_dtype", [(1, torch.int64), (7, torch.int32), (7, torch.int64)])
def test_matches_reference(dtype, heads, head_dim, t, pos_dtype) -> None:
    hq, hk = heads
    g = _gen(head_dim * 1000 + hq * 100 + hk * 10 + t)
    rot = RotaryEmbedding(head_dim, MAX_POS, 1e6)
    qw, kw = _weights(head_dim, dtype, g)
    qkv, q, k = _qkv(t, hq, hk, head_dim, dtype, g)
    v_before = qkv[:, (hq + hk) * head_dim :].clone()
    positions = _positions(t, pos_dtype, g)
    ref_q, ref_k = k_fused.qk_norm_rope_ref(positions, q, k, qw, kw, EPS, rot.cos, rot.sin)
    assert k_fused.qk_norm_rope_inplace(positions, q, k, qw, kw, EPS, rot.cos, rot.sin) is None
    _assert_close(q, ref_q)
    _assert_close(k, ref_k)
    assert torch.equal(qkv[:, (hq + hk) * head_dim :], v_before), "v must be untouched"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_only_q_and_k_are_written(dtype) -> None:
    # A wider row (guard columns after v) and NaN in v: nothing outside q/k may change, and
    # nothing outside q/k may be read into them.
    t, hq, hk, d = 3, 4, 2, 32
    g = _gen(7)
    rot = RotaryEmbedding(d, MAX_POS, 1e4)
    qw, kw = _weights(d, dtype, g)
    qkv, q, k = _qkv(t, hq, hk, d, dtype, g, pad=8)
    qkv[:, (hq + hk) * d :] = float("nan")
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    outside = qkv[:, (hq + hk) * d :].clone()
    positions = _positions(t, torch.int64, g)
    ref_q, ref_k = k_fused.qk_norm_rope_ref(positions, q, k, qw, kw, EPS, rot.cos, rot.sin)
    k_fused.qk_norm_rope_inplace(positions, q, k, qw, kw, EPS, rot.cos, rot.sin)
    assert torch.equal(qkv[:, (hq + hk) * d :].view(bits), outside.view(bits))
    _assert_close(q, ref_q)
    _assert_close(k, ref_k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_small_inputs_where_eps_matters(dtype) -> None:
    # Mean square ~ eps: the result depends on eps being added inside the rsqrt.
    t, hq, hk, d, eps = 2, 4, 2, 32, 1e-5
    g = _gen(23)
    rot = RotaryEmbedding(d, MAX_POS, 1e4)
    qw, kw = _weights(d, dtype, g)
    qkv, q, k = _qkv(t, hq, hk, d, dtype, g)
    qkv.mul_(2e-3)
    positions = _positions(t, torch.int64, g)
    ref_q, ref_k = k_fused.qk_norm_rope_ref(positions, q, k, qw, kw, eps, rot.cos, rot.sin)
    k_fused.qk_norm_rope_inplace(positions, q, k, qw, kw, eps, rot.cos, rot.sin)
    _assert_close(q, ref_q)
    _assert_close(k, ref_k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", [None, "llama3"])
def test_reference_is_norm_then_rotary_layers(dtype, scaling) -> None:
    # The fused op is a faithful replacement: the reference equals the torch paths of the
    # RMSNorm and RotaryEmbedding layers applied one after the other, bit for bit.
    t, hq, hk, d = 5, 4, 2, 64
    g = _gen(11)
    params = None
    if scaling == "llama3":
        params = {
            "rope_type": "llama3",
            "factor": 8.0,
            "original_max_position_embeddings": 64,
        }
    rot = RotaryEmbedding(d, MAX_POS, 5e5, params)
    q_norm, k_norm = RMSNorm(d, EPS), RMSNorm(d, EPS)
    q_norm.weight.data, k_norm.weight.data = _weights(d, dtype, g)
    _, q, k = _qkv(t, hq, hk, d, dtype, g)
    positions = _positions(t, torch.int64, g)
    with torch.no_grad():
        want_q, want_k = rot(positions, q_norm(q), k_norm(k))
        got_q, got_k = k_fused.qk_norm_rope_ref(
            positions, q, k, q_norm.weight, k_norm.weight, EPS, rot.cos, rot.sin
        )
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matches_separate_triton_kernels(dtype) -> None:
    # The fused kernel vs the rmsnorm kernel on q and k, then the rotary kernel.
    t, hq, hk, d = 4, 8, 2, 64
    g = _gen(13)
    rot = RotaryEmbedding(d, MAX_POS, 1e6)
    qw, kw = _weights(d, dtype, g)
    qkv, q, k = _qkv(t, hq, hk, d, dtype, g)
    positions = _positions(t, torch.int32, g)
    sep_q = k_norm.rmsnorm(q, qw, EPS)
    sep_k = k_norm.rmsnorm(k, kw, EPS)
    k_rot.rotary_inplace(positions, sep_q, sep_k, rot.cos, rot.sin)
    k_fused.qk_norm_rope_inplace(positions, q, k, qw, kw, EPS, rot.cos, rot.sin)
    _assert_close(q, sep_q)
    _assert_close(k, sep_k)


def test_attention_dispatch(monkeypatch) -> None:
    # Qwen3Attention takes the fused launch exactly when the norm and rotary layers would
    # run Triton (forced on here, as on CUDA), with the same result as the separate layers.
    d, hq, hk, t = 32, 4, 2, 3
    cfg = SimpleNamespace(
        num_attention_heads=hq,
        num_key_value_heads=hk,
        head_dim=d,
        hidden_size=64,
        rms_norm_eps=EPS,
    )
    g = _gen(17)
    attn = Qwen3Attention(cfg, lambda *a: None, False, RotaryEmbedding(d, MAX_POS, 1e6))
    attn.q_norm.weight.data, attn.k_norm.weight.data = _weights(d, torch.float32, g)
    _, q, k = _qkv(t, hq, hk, d, torch.float32, g)
    positions = _positions(t, torch.int64, g)
    with torch.no_grad():
        assert not attn._fuse_qk_norm_rope(q)  # CPU: the layers
        want_q, want_k = attn.rotary(positions, attn.q_norm(q.clone()), attn.k_norm(k.clone()))

        calls = []
        fused = k_fused.qk_norm_rope_inplace
        monkeypatch.setattr(
            k_fused, "qk_norm_rope_inplace", lambda *a, **kw: calls.append(fused(*a, **kw))
        )
        monkeypatch.setattr(llama, "use_triton", lambda x: True)
        assert attn._fuse_qk_norm_rope(q)
        assert not attn._fuse_kv_write(q)  # no cache bound
        attn._qk_norm_rope_inplace(positions, q, k)
    assert len(calls) == 1
    _assert_close(q, want_q)
    _assert_close(k, want_k)


@pytest.mark.parametrize("separate_v", [True, False])
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_fused_cache_write_is_kv_write(cache_dtype, separate_v, monkeypatch) -> None:
    """With the cache, the fused launch also stores rotated k and v at each token's slot,
    exactly as the separate kv_write kernel does (fp8: the same e4m3 rounding and scales);
    slot -1 (graph padding) writes nothing. v is copied by a program of its own or by k's."""
    monkeypatch.setattr(k_fused, "SEPARATE_V_ENABLED", separate_v)
    t, hq, hk, d, bs, blocks = 5, 4, 2, 32, 4, 6
    dtype = torch.bfloat16
    g = _gen(23)
    rot = RotaryEmbedding(d, MAX_POS, 1e6)
    qw, kw = _weights(d, dtype, g)
    qkv, q, k = _qkv(t, hq, hk, d, dtype, g)
    v = qkv[:, (hq + hk) * d :].view(t, hk, d)
    positions = _positions(t, torch.int64, g)
    slots = torch.tensor([9, -1, 0, 17, 22], dtype=torch.int64)
    scales = (0.5, 2.0) if cache_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    base = torch.randn(2, blocks, bs, hk, d, generator=g).to(cache_dtype)
    fused_cache, sep_cache = base.clone(), base.clone()
    q2, k2 = q.clone(), k.clone()
    k_fused.qk_norm_rope_inplace(positions, q2, k2, qw, kw, EPS, rot.cos, rot.sin)
    k_kvw.write_kv(sep_cache, k2, v, slots, *scales)
    k_fused.qk_norm_rope_inplace(
        positions, q, k, qw, kw, EPS, rot.cos, rot.sin,
        v=v, kv_cache=fused_cache, slot_mapping=slots, k_scale=scales[0], v_scale=scales[1],
    )  # fmt: skip
    assert torch.equal(q, q2) and torch.equal(k, k2)
    raw = torch.uint8 if cache_dtype == torch.float8_e4m3fn else torch.int16
    assert torch.equal(fused_cache.view(raw), sep_cache.view(raw))
    assert not torch.equal(fused_cache.view(raw), base.view(raw))  # something was written
    with pytest.raises(ValueError, match="slot mapping"):
        k_fused.qk_norm_rope_inplace(
            positions, q, k, qw, kw, EPS, rot.cos, rot.sin, kv_cache=fused_cache
        )


def test_cpu_attention_uses_the_layers() -> None:
    # CPU tensors never reach the fused kernel (the HF-equality tests depend on it).
    q = torch.zeros(1, 2, 8)
    assert not llama.use_triton(q)


def test_validation() -> None:
    d = 32
    rot = RotaryEmbedding(d, MAX_POS, 1e4)
    g = _gen(19)
    qw, kw = _weights(d, torch.bfloat16, g)
    _, q, k = _qkv(2, 4, 2, d, torch.bfloat16, g)
    pos = torch.tensor([0, 1])
    run = k_fused.qk_norm_rope_inplace
    with pytest.raises(ValueError, match="head_dim"):  # odd head_dim: no neox pairing
        _, q_odd, k_odd = _qkv(2, 4, 2, 33, torch.bfloat16, g)
        run(pos, q_odd, k_odd, qw, kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="norm weights"):
        run(pos, q, k, qw[:16], kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="promote"):  # fp32 weights would make q fp32
        run(pos, q, k, qw.float(), kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="positions"):
        run(pos[:1], q, k, qw, kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="contiguous"):
        run(pos, q.transpose(1, 2).contiguous().transpose(1, 2), k, qw, kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="shapes"):
        run(pos, q, k[:1], qw, kw, EPS, rot.cos, rot.sin)
    # No tokens: nothing to do, nothing launched.
    run(pos[:0], q[:0], k[:0], qw, kw, EPS, rot.cos, rot.sin)


AOT = r"""
from strixlm.kernels import qk_norm_rope as m
sig = dict(q_ptr="*bf16", k_ptr="*bf16", pos_ptr="*i64", qw_ptr="*bf16", kw_ptr="*bf16",
           cos_ptr="*fp32", sin_ptr="*fp32", n_q_heads="i32", n_k_heads="i32", q_s0="i32",
           q_s1="i32", k_s0="i32", k_s1="i32", pos_stride="i32", cos_stride="i32",
           sin_stride="i32", half="i32", eps="fp32", v_ptr="*bf16", v_s0="i32", v_s1="i32",
           kc_ptr="*bf16", vc_ptr="*bf16", slot_ptr="*i64", k_scale="fp32", v_scale="fp32",
           stride_cb="i32", stride_cs="i32", stride_ch="i32")
for write, fp8 in ((True, True), (True, False), (False, False)):
    cache = "*fp8e4nv" if fp8 else "*bf16"
    s = dict(sig, kc_ptr=cache, vc_ptr=cache)
    pairs = ((True, True), (True, False), (False, True)) if write else ((False, False),)
    for early, sep_v in pairs:
        c = dict(BLOCK_H=16, BLOCK_HALF=64, WRITE_KV=write, BLOCK_SIZE=16, FP8=fp8, PDL=write,
                 EARLY=early, SEPARATE_V=sep_v)
        src = ASTSource(m._qk_norm_rope_kernel, {**s, **{k: "constexpr" for k in c}}, c)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
        ptx = k.asm["ptx"]
        if write:  # EARLY: the position / cos / sin loads come before the first wait
            first_wait = ptx.find("griddepcontrol.wait")
            assert (ptx.find("ld.global") < first_wait) == early, (fp8, early)
print("compiled")
"""


def test_compiles_for_sm90() -> None:
    """The interpreter is lax about types (it ran a helper with two return dtypes); the
    compiler is not. ptxas ships with triton, so this needs no GPU."""
    assert_compiles(AOT)
