"""Programmatic dependent launch: off on CPU and when disabled; the kernels that opt in
compile for sm90 with griddepcontrol.wait first (the wait that keeps the stream's order)."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

pytest.importorskip("triton", reason="triton is not installed")

from strixlm.kernels import pdl  # noqa: E402


def test_pdl_off_for_cpu_tensors_and_when_disabled(monkeypatch):
    assert not pdl.pdl_enabled(torch.zeros(1))
    monkeypatch.setenv("STRIXLM_DISABLE_PDL", "1")
    assert not pdl.pdl_enabled(torch.zeros(1))


AOT = r"""
from strixlm.kernels import activation as a, rmsnorm as r

def ptx(fn, sig, consts):
    src = ASTSource(fn, {**sig, **{k: "constexpr" for k in consts}}, consts)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    return k.asm["ptx"]

sig = dict(x_ptr="*bf16", res_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", n_inner="i32",
           x_s0="i32", x_s1="i32", r_s0="i32", r_s1="i32", o_s0="i32", o_s1="i32",
           n_cols="i32", eps="fp32")
for on in (True, False):
    text = ptx(r._rmsnorm_kernel, sig, dict(HAS_RESIDUAL=True, BLOCK=1024, NUM_PARTS=1, PDL=on))
    assert ("griddepcontrol.wait" in text) == on, on
    assert not on or text.find("griddepcontrol.wait") < text.find("ld.global")
sig = dict(x_ptr="*bf16", out_ptr="*bf16", n_cols="i32", x_stride="i32", o_stride="i32")
text = ptx(a._silu_and_mul_kernel, sig, dict(BLOCK=1024, PDL=True))
assert "griddepcontrol.wait" in text and "griddepcontrol.launch_dependents" in text
print("compiled")
"""


def test_pdl_kernels_compile_for_sm90_with_the_wait_first():
    assert_compiles(AOT)
