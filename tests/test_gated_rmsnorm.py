"""Gated group RMSNorm (Mamba-2 mixer output): the Triton kernel against its torch reference
under the interpreter, the reference against the layer's own torch path, and the mixer's
cached A = -exp(A_log) following weight loads."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

from strixlm.kernels.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_ref
from strixlm.layers.mamba2 import GatedGroupRMSNorm, Mamba2Dims, Mamba2Mixer

CASES = [
    # tokens, hidden, group size, dtype
    (1, 64, 16, torch.float32),
    (5, 96, 32, torch.bfloat16),
    (3, 128, 128, torch.float16),
    (4, 48, 24, torch.bfloat16),  # group size not a power of two
]


def _inputs(t, h, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    wide = torch.randn(t, 3 * h, generator=g).to(dtype)  # x and z as strided views
    x, z = wide[:, :h], wide[:, h : 2 * h]
    weight = (1 + 0.2 * torch.randn(h, generator=g)).to(dtype)
    return x, z, weight


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}-H{c[1]}-G{c[2]}-{c[3]}")
def test_kernel_matches_reference(case):
    t, h, gs, dtype = case
    x, z, w = _inputs(t, h, dtype)
    got = gated_rmsnorm(x, z, w, gs, 1e-5)
    ref = gated_rmsnorm_ref(x, z, w, gs, 1e-5)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    # fp32 sums in another order and the interpreter's exp: a rounding step of the output
    # dtype at most (the normed value is rounded to it before the weight multiply).
    tol = 4 * torch.finfo(dtype).eps * ref.float().abs().max().item()
    assert (got.float() - ref.float()).abs().max().item() <= tol


def test_reference_is_hf_gated_norm():
    """The torch reference (and so the layer's CPU path) against HF transformers' own
    NemotronHRMSNormGated, bit for bit; the gate matters and groups are separate."""
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNormGated

    x, z, w = _inputs(6, 64, torch.bfloat16, seed=3)
    hf = NemotronHRMSNormGated(64, 16, 1e-6).to(torch.bfloat16)
    layer = GatedGroupRMSNorm(64, 16, 1e-6).to(torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(w)
        layer.weight.copy_(w)
        want = hf(x, z)
        assert torch.equal(gated_rmsnorm_ref(x, z, w, 16, 1e-6), want)
        assert torch.equal(layer(x, z), want)
    y = gated_rmsnorm_ref(x.float(), z.float(), w.float(), 16, 1e-6)
    y0 = gated_rmsnorm_ref(x.float(), torch.zeros_like(z.float()), w.float(), 16, 1e-6)
    assert not torch.allclose(y, y0)


def test_bad_shapes_raise():
    x, z, w = _inputs(2, 64, torch.float32)
    with pytest.raises(ValueError, match="multiple"):
        gated_rmsnorm(x, z, w, 48, 1e-5)
    with pytest.raises(ValueError, match="bad shapes"):
        gated_rmsnorm(x, z[:, :32], w, 16, 1e-5)
    out = gated_rmsnorm(x[:0], z[:0], w, 16, 1e-5)
    assert out.shape == (0, 64)


def test_mixer_decay_follows_weight_loads():
    dims = Mamba2Dims(32, 4, 8, 1, 8, 4, 16, True, False, 1e-5, (0.0, float("inf")))
    mixer = Mamba2Mixer(dims)
    a0 = mixer._decay()
    assert torch.equal(a0, -torch.exp(mixer.A_log.float()))
    assert mixer._decay() is a0  # cached while A_log is unchanged
    with torch.no_grad():
        mixer.A_log.copy_(torch.linspace(0.0, 1.0, 4))  # a weight load
    a1 = mixer._decay()
    assert a1 is a0  # updated in place: a captured graph keeps reading the same tensor
    assert torch.equal(a1, -torch.exp(torch.linspace(0.0, 1.0, 4)))


AOT = r"""
from strixlm.kernels import gated_rmsnorm as g, moe_routing as r
target = GPUTarget("cuda", 90, 32)
sig = dict(out_ptr="*bf16", x_ptr="*bf16", z_ptr="*bf16", w_ptr="*bf16", stride_xt="i32",
           stride_zt="i32", stride_ot="i32", group_size="i32", eps="fp32")
c = dict(BLOCK=512)
src = ASTSource(g._gated_rmsnorm_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
triton.compile(src, target=target, options=dict(num_warps=4))
sig = dict(logits_ptr="*fp32", bias_ptr="*fp32", weights_ptr="*fp32", ids_ptr="*i32",
           num_experts="i32", logit_s0="i32", logit_s1="i32", bias_stride="i32", eps="fp32",
           scale="fp32")
for soft in (False, True):
    c = dict(TOP_K=6, BLOCK_E=128, BLOCK_K=8, SOFTMAX=soft, HAS_BIAS=not soft,
             RENORMALIZE=True, PRECISE=True)
    src = ASTSource(r._moe_routing_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    triton.compile(src, target=target, options=dict(num_warps=1))
print("compiled")
"""


def test_nano_glue_kernels_compile_for_sm90():
    """Gated RMSNorm and MoE routing compiled for the H200's sm90 (the interpreter never
    compiles; ptxas ships with triton, so no GPU is needed)."""
    assert_compiles(AOT)
