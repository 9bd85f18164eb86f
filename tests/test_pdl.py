"""Programmatic dependent launch: off on CPU and when disabled; the kernels that opt in
compile for sm90 with griddepcontrol.wait before every load of what their predecessor may
write (the wait that keeps the stream's order), early loads of weights before it."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

pytest.importorskip("triton", reason="triton is not installed")

from strixlm.kernels import dispatch, pdl  # noqa: E402


class _CudaTensor:
    """Stands in for a CUDA tensor: pdl_enabled reads only is_cuda and device."""

    is_cuda = True
    device = torch.device("cuda", 0)


@pytest.mark.parametrize(
    "major, disabled, want",
    [(9, False, True), (10, False, True), (8, False, False), (9, True, False)],
)
def test_pdl_on_for_sm90_cuda_tensors_unless_disabled(monkeypatch, major, disabled, want):
    dispatch._cuda_capability_major.cache_clear()  # the faked major, not a cached one
    monkeypatch.setattr(pdl, "DISABLED", disabled)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx: (major, 0))
    try:
        assert pdl.pdl_enabled(_CudaTensor()) is want
        assert not pdl.pdl_enabled(torch.zeros(1))  # CPU tensors never
    finally:
        dispatch._cuda_capability_major.cache_clear()


AOT = r"""
from strixlm.kernels import activation as a, rmsnorm as r

def ptx(fn, sig, consts):
    src = ASTSource(fn, {**sig, **{k: "constexpr" for k in consts}}, consts)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    return k.asm["ptx"]

sig = dict(x_ptr="*bf16", res_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", n_inner="i32",
           x_s0="i32", x_s1="i32", r_s0="i32", r_s1="i32", o_s0="i32", o_s1="i32",
           n_cols="i32", eps="fp32")
loads_before = {}
for on, early, res in ((True, False, False), (False, False, False), (True, True, False),
                       (True, True, True)):
    consts = dict(HAS_RESIDUAL=True, BLOCK=1024, NUM_PARTS=1, PDL=on, EARLY=early,
                  EARLY_RES=res)
    text = ptx(r._rmsnorm_kernel, sig, consts)
    assert ("griddepcontrol.wait" in text) == on, on
    # The wait comes before every load, except the weight's with EARLY and the residual's
    # with EARLY_RES; x (the predecessor's output) always after it.
    wait = text.find("griddepcontrol.wait")
    assert not on or (text.find("ld.global") < wait) == early, (on, early)
    assert not on or "ld.global" in text[wait:], (on, early)
    loads_before[(on, early, res)] = text[:wait].count("ld.global") if on else 0
# EARLY_RES adds the residual's loads to the weight's before the wait.
assert loads_before[(True, True, True)] > loads_before[(True, True, False)] > 0, loads_before
sig = dict(x_ptr="*bf16", out_ptr="*bf16", n_cols="i32", x_stride="i32", o_stride="i32")
text = ptx(a._silu_and_mul_kernel, sig, dict(BLOCK=1024, PDL=True))
assert "griddepcontrol.wait" in text and "griddepcontrol.launch_dependents" in text
print("compiled")
"""


def test_pdl_kernels_compile_for_sm90_with_the_wait_first():
    assert_compiles(AOT)
