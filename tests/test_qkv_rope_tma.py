"""The qkv projection with q/k norm + rotary + K/V write in a TMA GEMM's epilogue at decode
rows (strixlm/kernels/qkv_rope_tma.py), under the Triton interpreter, against the two-launch
torch reference; when Qwen3's attention takes it; an sm90 compile.

fp16 only (the interpreter's descriptor loads of bf16 come back wrong). The kernel rounds
where the two-launch path rounds, so the only differences are fp32 summation orders (the
GEMM's, the mean of squares'), which can flip a 16-bit rounding by one ulp.
"""

from __future__ import annotations

import importlib
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
_MODULES = (
    "strixlm.kernels.kv_write",
    "strixlm.kernels.qk_norm_rope",
    "strixlm.kernels.tma_linear",
    "strixlm.kernels.qkv_rope_tma",
)
reimport_interpreted(*_MODULES)
k_kvw, k_qk, ktma, kfused = (importlib.import_module(n) for n in _MODULES)

from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402

EPS = 1e-6
MAX_POS = 64
CFG = ktma.TmaConfig(16, 16, 16, 4, 1)  # block_n unused: a tile is one head
HQ, HK, D, HID = 4, 2, 32, 32


def _close(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == torch.float8_e4m3fn:  # one e4m3 step at most, on a few elements
        diff = (got.float() - ref.float()).abs()
        assert (diff <= 0.125 * ref.float().abs().clamp(min=1 / 64)).all()
        assert (got.view(torch.uint8) == ref.view(torch.uint8)).float().mean() >= 0.99
        return
    amax = ref.float().abs().max().item()
    torch.testing.assert_close(got, ref, rtol=0, atol=torch.finfo(ref.dtype).eps * amax)
    exact = (got.view(torch.int16) == ref.view(torch.int16)).float().mean().item()
    assert exact >= 0.99, f"only {exact:.1%} bit-identical"


def _case(t: int, cache_dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, HID, generator=g).half()
    w = (torch.randn((HQ + 2 * HK) * D, HID, generator=g) / HID**0.5).half()
    qw, kw = ((1.0 + 0.5 * torch.randn(D, generator=g)).half() for _ in range(2))
    pos = torch.randint(0, MAX_POS, (t,), generator=g)
    slots = torch.randperm(40, generator=g)[:t]
    slots[t // 2] = -1  # graph padding: written nowhere
    cache = torch.randn(2, 10, 4, HK, D, generator=g).to(cache_dtype)
    return x, w, qw, kw, pos, slots, cache


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("t", [5, 19])
def test_kernel_matches_the_two_launch_reference(cache_dtype, t):
    x, w, qw, kw, pos, slots, cache = _case(t, cache_dtype, t)
    rot = RotaryEmbedding(D, MAX_POS, 1e6)
    scales = (0.5, 2.0) if cache_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    ref_cache, got_cache = cache.clone(), cache.clone()
    args = (pos, qw, kw, EPS, rot.cos, rot.sin)
    ref = kfused.qkv_rope_ref(x, w, HQ, HK, *args, ref_cache, slots, *scales)
    got = kfused.qkv_rope_tma(x, w, HQ, HK, *args, got_cache, slots, *scales, cfg=CFG)
    assert got.shape == (t, HQ, D)
    _close(got, ref)
    _close(got_cache, ref_cache)
    # Only the real rows' slots change; the padding row (slot -1) writes nowhere.
    untouched = torch.ones(cache.shape[1] * cache.shape[2], dtype=torch.bool)
    untouched[slots[slots >= 0]] = False
    as_bytes = lambda c: c.view(torch.uint8).reshape(2, untouched.numel(), -1)  # noqa: E731
    assert torch.equal(as_bytes(got_cache)[:, untouched], as_bytes(cache)[:, untouched])


def test_reference_is_the_two_launch_path():
    """qkv_rope_ref against the engine's pieces: the projection, qk_norm_rope_ref and the
    cache write of the rotated k."""
    x, w, qw, kw, pos, slots, cache = _case(7, torch.float16, 3)
    rot = RotaryEmbedding(D, MAX_POS, 1e6)
    got_cache = cache.clone()
    got = kfused.qkv_rope_ref(x, w, HQ, HK, pos, qw, kw, EPS, rot.cos, rot.sin, got_cache, slots)
    qkv = (x.float() @ w.float().t()).half()
    q, k, v = qkv.split([HQ * D, HK * D, HK * D], dim=-1)
    q2, k2 = k_qk.qk_norm_rope_ref(
        pos, q.view(7, HQ, D), k.view(7, HK, D), qw, kw, EPS, rot.cos, rot.sin
    )
    k_kvw.write_kv_ref(cache, k2, v.view(7, HK, D), slots)
    assert torch.equal(got, q2) and torch.equal(got_cache, cache)


def test_switch_and_plan(monkeypatch):
    assert kfused._rows_from_env("") == (0, -1) and kfused._rows_from_env("0") == (0, -1)
    assert kfused._rows_from_env("129-256") == (129, 256)
    assert kfused._rows_from_env("64") == (64, 64)
    x, w = torch.randn(200, HID).half(), torch.randn((HQ + 2 * HK) * D, HID).half()
    monkeypatch.setattr(kfused, "MIN_ROWS", 129)
    monkeypatch.setattr(kfused, "MAX_ROWS", 256)
    assert not kfused.plan(x, w, HQ, HK, False)  # a CPU tensor
    assert kfused.fits(x, w, HQ, HK, False, CFG)
    assert not kfused.fits(x, w, HQ, HK, True, CFG)  # a bias
    assert not kfused.fits(x.float(), w.float(), HQ, HK, False, CFG)
    assert not kfused.fits(x[:, :24], w[:, :24], HQ, HK, False, CFG)  # K not a block multiple


def test_qwen3_attention_takes_it_where_switched_on(monkeypatch):
    """For the switched-on rows Qwen3's attention runs the fused projection and attends over
    its q and the cache it wrote: the same output and cache as the two-launch path."""
    from test_triton_attention import Batch

    from strixlm.layers.attention.triton_paged import TritonPagedAttention
    from strixlm.models import llama
    from strixlm.models.qwen3 import Qwen3Attention

    cfg = SimpleNamespace(num_attention_heads=HQ, num_key_value_heads=HK, head_dim=D,
                          hidden_size=HID, rms_norm_eps=EPS)  # fmt: skip
    torch.manual_seed(0)
    attn = Qwen3Attention(cfg, TritonPagedAttention, False, RotaryEmbedding(D, 128, 1e6))
    for p in attn.parameters():
        p.data.normal_(0, 0.3 if p.dim() > 1 else 1.0).add_(1.0 if p.dim() == 1 else 0.0)
    attn.half()
    rows = [(3, 1), (9, 1), (0, 1), (20, 1), (5, 1)]  # a decode step
    b = Batch(rows, HQ, HK, D, 4, torch.float16, seed=2)
    x = torch.randn(b.num_tokens, HID).half()
    positions = torch.tensor([c for c, _ in rows], dtype=torch.int64)
    monkeypatch.setattr(llama, "use_triton", lambda t: True)
    calls = []
    real = kfused.qkv_rope_tma
    monkeypatch.setattr(kfused, "plan", lambda *a: True)
    monkeypatch.setattr(
        kfused, "qkv_rope_tma", lambda *a, **kw: calls.append(1) or real(*a, **kw, cfg=CFG)
    )
    results = []
    for on in (True, False):
        monkeypatch.setattr(kfused, "MIN_ROWS", 1 if on else 0)
        monkeypatch.setattr(kfused, "MAX_ROWS", 256 if on else -1)
        attn.kv_cache = b.kv_cache.clone()
        with torch.no_grad():
            out = attn(positions, x, b.md)
        results.append((out, attn.kv_cache))
    assert calls == [1]
    _close(results[0][0], results[1][0])
    _close(results[0][1], results[1][1])


AOT = r"""
from strixlm.kernels import qkv_rope_tma as p
target = GPUTarget("cuda", 90, 32)
for dt, cache_dt, early in (("bf16", "bf16", True), ("bf16", "fp8e4nv", True),
                            ("bf16", "bf16", False)):
    cfg = p.CONFIG
    sig = dict(x_desc=f"tensordesc<{dt}[{cfg.block_m},{cfg.block_k}]>",
               w_desc=f"tensordesc<{dt}[64,{cfg.block_k}]>", q_ptr=f"*{dt}", pos_ptr="*i64",
               qw_ptr=f"*{dt}", kw_ptr=f"*{dt}", cos_ptr="*fp32", sin_ptr="*fp32",
               kc_ptr=f"*{cache_dt}", vc_ptr=f"*{cache_dt}", slot_ptr="*i64", M="i32", K="i32",
               stride_qt="i32", stride_qh="i32", pos_stride="i32", cos_stride="i32",
               sin_stride="i32", eps="fp32", k_scale="fp32", v_scale="fp32", stride_cb="i32",
               stride_cs="i32", stride_ch="i32")
    c = dict(N_Q=16, N_KV=8, HALF=64, BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k,
             BLOCK_SIZE=16, FP8=cache_dt == "fp8e4nv", PDL=True, EARLY=early)
    src = ASTSource(p._qkv_rope_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    k = triton.compile(src, target=target,
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx
    assert k.metadata.shared <= 227 * 1024, k.metadata.shared
    # EARLY: the gathers (positions, slots, cos / sin, norm weights) before the wait, the
    # tiles by TMA after it.
    wait = ptx.find("griddepcontrol.wait")
    assert (ptx.find("ld.global") < wait) == early and ptx.find("cp.async.bulk.tensor") > wait
print("compiled")
"""


def test_kernel_compiles_for_sm90_with_tma_and_wgmma():
    """Qwen3-0.6B's heads (16 q, 8 kv, head_dim 128), a bf16 and an fp8 cache, early loads
    on and off."""
    assert_compiles(AOT)
