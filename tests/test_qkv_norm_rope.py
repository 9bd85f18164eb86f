"""The qkv projection with q/k norm + rotary + K/V write in its epilogue
(strixlm/kernels/qkv_norm_rope.py), under the Triton interpreter, against the two-step torch
reference and the two launches it replaces; when Qwen3's attention takes it; sm90 compiles.

Tolerance as in test_qk_norm_rope.py: the kernel rounds where the two-step path rounds, so
the only legitimate differences are fp32 summation orders (the GEMM's and the mean of
squares'), which can flip a 16-bit rounding by one ulp: eps(dtype) * max|ref| absolute and
>= 99% of the elements bit-identical.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

_MODULES = (
    "strixlm.kernels.kv_write",
    "strixlm.kernels.qk_norm_rope",
    "strixlm.kernels.splitk_linear",
    "strixlm.kernels.qkv_norm_rope",
)
reimport_interpreted(*_MODULES)
pytest.importorskip("triton", reason="triton is not installed")
k_kvw, k_qk, ksplit, kqkv = (importlib.import_module(n) for n in _MODULES)

from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402
from strixlm.models import llama  # noqa: E402
from strixlm.models.qwen3 import Qwen3Attention  # noqa: E402

EPS = 1e-6
MAX_POS = 64
CFG = ksplit.SplitKConfig(16, 16, 16, 1, 4, 1)  # block_n unused: a tile is one head
HQ, HK, D, HID = 4, 2, 16, 32


def _close(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == torch.float8_e4m3fn:  # one e4m3 step at most, on a few elements
        diff = (got.float() - ref.float()).abs()
        assert (diff <= 0.125 * ref.float().abs().clamp(min=1 / 64)).all()
        assert (got.view(torch.uint8) == ref.view(torch.uint8)).float().mean() >= 0.99
        return
    amax = ref.float().abs().max().item()
    eps = torch.finfo(ref.dtype).eps
    tol = 8 * eps * amax if ref.dtype == torch.float32 else eps * amax
    torch.testing.assert_close(got, ref, rtol=0, atol=tol)
    if ref.dtype != torch.float32:
        exact = (got.view(torch.int16) == ref.view(torch.int16)).float().mean().item()
        assert exact >= 0.99, f"only {exact:.1%} bit-identical"


def _case(t: int, dtype: torch.dtype, cache_dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, HID, generator=g).to(dtype)
    w = (torch.randn((HQ + 2 * HK) * D, HID, generator=g) / HID**0.5).to(dtype)
    qw, kw = ((1.0 + 0.5 * torch.randn(D, generator=g)).to(dtype) for _ in range(2))
    pos = torch.randint(0, MAX_POS, (t,), generator=g)
    slots = torch.randperm(40, generator=g)[:t]
    slots[t // 2] = -1  # graph padding: written nowhere
    cache = torch.randn(2, 10, 4, HK, D, generator=g).to(cache_dtype)
    return x, w, qw, kw, pos, slots, cache


@pytest.mark.parametrize(
    "dtype,cache_dtype",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.float16, torch.float8_e4m3fn),
    ],
)
@pytest.mark.parametrize("t", [5, 19])
def test_kernel_matches_reference_and_the_two_launches(dtype, cache_dtype, t):
    x, w, qw, kw, pos, slots, cache = _case(t, dtype, cache_dtype, t)
    rot = RotaryEmbedding(D, MAX_POS, 1e6)
    scales = (0.5, 2.0) if cache_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    ref_cache, two_cache, got_cache = cache.clone(), cache.clone(), cache.clone()
    args = (pos, qw, kw, EPS, rot.cos, rot.sin)
    ref = kqkv.qkv_norm_rope_ref(x, w, HQ, HK, *args, ref_cache, slots, *scales)
    got = kqkv.qkv_norm_rope(x, w, HQ, HK, *args, got_cache, slots, CFG, *scales)
    _close(got, ref)
    _close(got_cache, ref_cache)
    # The launches it replaces: the tile GEMM, then q/k norm + rotary with the cache write.
    two = ksplit.dense_linear(x, w, CFG)
    q = two[:, : HQ * D].view(t, HQ, D)
    k = two[:, HQ * D : (HQ + HK) * D].view(t, HK, D)
    v = two[:, (HQ + HK) * D :].view(t, HK, D)
    k_qk.qk_norm_rope_inplace(
        *args[:1], q, k, *args[1:], v=v, kv_cache=two_cache, slot_mapping=slots,
        k_scale=scales[0], v_scale=scales[1],
    )  # fmt: skip
    _close(got, two)
    _close(got_cache, two_cache)
    # Only the real rows' slots change; the padding row (slot -1) writes nowhere.
    untouched = torch.ones(cache.shape[1] * cache.shape[2], dtype=torch.bool)
    untouched[slots[slots >= 0]] = False
    as_bytes = lambda c: c.view(torch.uint8).reshape(2, untouched.numel(), -1)  # noqa: E731
    assert torch.equal(as_bytes(got_cache)[:, untouched], as_bytes(cache)[:, untouched])
    assert not torch.equal(as_bytes(got_cache), as_bytes(cache))


def test_bad_shapes():
    x, w, qw, kw, pos, slots, cache = _case(3, torch.float32, torch.float32, 0)
    rot = RotaryEmbedding(D, MAX_POS, 1e6)
    args = (pos, qw, kw, EPS, rot.cos, rot.sin)
    with pytest.raises(ValueError, match="heads"):
        kqkv.qkv_norm_rope(x, w[:-1], HQ, HK, *args, cache, slots, CFG)
    with pytest.raises(ValueError, match="cache"):
        kqkv.qkv_norm_rope(x, w, HQ, HK, *args, cache[:, :, :, :1], slots, CFG)
    with pytest.raises(ValueError, match="fit"):
        kqkv.qkv_norm_rope(
            x, w, HQ, HK, *args, cache, slots, ksplit.SplitKConfig(16, 16, 64, 1, 4, 1)
        )
    assert kqkv.qkv_norm_rope(x[:0], w, HQ, HK, *args, cache, slots[:0], CFG).shape == (0, 128)


def test_plan(monkeypatch):
    half = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)
    monkeypatch.setattr(kqkv, "ENABLED", False)  # the default: opt-in
    assert kqkv.plan(256, 16, 8, 128, 1024, **half) is None
    monkeypatch.setattr(kqkv, "ENABLED", True)
    assert kqkv.plan(256, 16, 8, 128, 1024, **half).block_m == 64
    assert kqkv.plan(128, 16, 8, 128, 1024, **half) is None  # below MIN_ROWS
    assert kqkv.plan(257, 16, 8, 128, 1024, **half) is None
    assert kqkv.plan(256, 16, 8, 64, 1024, **half) is None  # unmeasured shape
    assert kqkv.plan(256, 16, 8, 128, 1024, **{**half, "has_bias": True}) is None


class _Backend:
    """What Qwen3Attention needs of a backend here; attend records what it was given."""

    kv_write_is_kernel_compatible = True
    k_scale = v_scale = 1.0

    def __init__(self, *a) -> None:
        self.seen = []

    def use_triton(self, device) -> bool:
        return True

    def attend(self, q, kv_cache, md, qk_prologue=None):
        self.seen.append((q.clone(), qk_prologue))
        return torch.zeros_like(q)


def test_qwen3_attention_takes_the_fused_launch(monkeypatch):
    t = 7
    x, w, qw, kw, pos, slots, cache = _case(t, torch.float16, torch.float16, 3)
    cfg = SimpleNamespace(
        num_attention_heads=HQ, num_key_value_heads=HK, head_dim=D, hidden_size=HID,
        rms_norm_eps=EPS,
    )  # fmt: skip
    attn = Qwen3Attention(cfg, _Backend, False, RotaryEmbedding(D, MAX_POS, 1e6)).half()
    with torch.no_grad():
        attn.qkv_proj.weight.copy_(w)
        attn.q_norm.weight.copy_(qw)
        attn.k_norm.weight.copy_(kw)
    attn.kv_cache = cache.clone()
    md = SimpleNamespace(slot_mapping=slots)
    monkeypatch.setattr(llama, "use_triton", lambda x: True)
    monkeypatch.setattr(kqkv, "ENABLED", True)
    monkeypatch.setattr(kqkv, "MIN_ROWS", 1)
    monkeypatch.setattr(kqkv, "_CONFIGS", {(HQ, HK, D, HID): [(8, CFG)]})
    monkeypatch.setattr(llama, "qkv_fused", kqkv)  # the interpreted module
    with torch.no_grad():
        attn(pos, x, md)
    ((q, prologue),) = attn.attn.seen
    assert prologue is None  # K/V are already in the cache
    ref_cache = cache.clone()
    rot = attn.rotary
    ref = kqkv.qkv_norm_rope_ref(x, w, HQ, HK, pos, qw, kw, EPS, rot.cos, rot.sin, ref_cache, slots)
    _close(q, ref[:, : HQ * D].view(t, HQ, D))
    _close(attn.kv_cache, ref_cache)
    # Past the table's rows (or disabled): the projection, then the fused q/k launch as a
    # prologue for attend.
    monkeypatch.setattr(kqkv, "ENABLED", False)
    attn.attn.seen.clear()
    with torch.no_grad():
        attn(pos, x, md)
    assert attn.attn.seen[0][1] is not None


AOT = r"""
from strixlm.kernels import qkv_norm_rope as m
target = GPUTarget("cuda", 90, 32)
sig = dict(x_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", pos_ptr="*i64", qw_ptr="*bf16",
           kw_ptr="*bf16", cos_ptr="*fp32", sin_ptr="*fp32", kc_ptr="*bf16", vc_ptr="*bf16",
           slot_ptr="*i64", M="i32", K="i32", stride_xm="i32", stride_wn="i32",
           stride_om="i32", pos_stride="i32", cos_stride="i32", sin_stride="i32", eps="fp32",
           k_scale="fp32", v_scale="fp32", stride_cb="i32", stride_cs="i32", stride_ch="i32")
for (hq, hk, d, k), table in m._CONFIGS.items():
    for _, cfg in table:
        for cache in ("bf16", "fp8e4nv"):
            s = dict(sig, kc_ptr=f"*{cache}", vc_ptr=f"*{cache}")
            c = dict(N_Q=hq, N_KV=hk, HALF=d // 2, BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k,
                     BLOCK_SIZE=16, FP8=cache != "bf16", PDL=True)
            src = ASTSource(m._qkv_norm_rope_kernel, {**s, **{n: "constexpr" for n in c}}, c)
            triton.compile(src, target=target,
                           options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    """The table's configs, bf16 and fp8 caches."""
    assert_compiles(AOT)
