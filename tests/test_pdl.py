"""Programmatic dependent launch: off on CPU and when disabled; the kernels that opt in
compile for sm90 with griddepcontrol.wait first (the wait that keeps the stream's order)."""

from __future__ import annotations

import pytest
import torch
from aot_compile import PREFETCH_CHECK, assert_compiles

pytest.importorskip("triton", reason="triton is not installed")

from strixlm.kernels import pdl  # noqa: E402


class _CudaTensor:
    """Stands in for a CUDA tensor: pdl_enabled reads only is_cuda and device."""

    is_cuda = True
    device = torch.device("cuda", 0)


@pytest.mark.parametrize(
    "major, disabled, want",
    [(9, False, True), (10, False, True), (8, False, False), (9, True, False)],
)
def test_pdl_on_for_sm90_cuda_tensors_unless_disabled(monkeypatch, major, disabled, want):
    monkeypatch.setattr(pdl, "_CAPABILITY", {})
    monkeypatch.setattr(pdl, "DISABLED", disabled)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx: (major, 0))
    assert pdl.pdl_enabled(_CudaTensor()) is want
    assert not pdl.pdl_enabled(torch.zeros(1))  # CPU tensors never


AOT = (
    PREFETCH_CHECK
    + r"""
from strixlm.kernels import activation as a, rmsnorm as r

def ptx(fn, sig, consts):
    src = ASTSource(fn, {**sig, **{k: "constexpr" for k in consts}}, consts)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    return k.asm["ptx"]

pf = dict(pf_ptr="*u8", pf_chunk="i32", pf_total="i32")
sig = dict(x_ptr="*bf16", res_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", n_inner="i32",
           x_s0="i32", x_s1="i32", r_s0="i32", r_s1="i32", o_s0="i32", o_s1="i32",
           n_cols="i32", eps="fp32", **pf)
for on in (True, False):
    c = dict(HAS_RESIDUAL=True, BLOCK=1024, NUM_PARTS=1, PREFETCH=0, PDL=on)
    text = ptx(r._rmsnorm_kernel, sig, c)
    assert ("griddepcontrol.wait" in text) == on, on
    assert not on or text.find("griddepcontrol.wait") < text.find("ld.global")
for mode in (1, 2):  # the next GEMM's weight share, asked for before the wait
    c = dict(HAS_RESIDUAL=True, BLOCK=1024, NUM_PARTS=1, PREFETCH=mode, PDL=True)
    check_prefetch(ptx(r._rmsnorm_kernel, sig, c), mode)
sig = dict(x_ptr="*bf16", out_ptr="*bf16", n_cols="i32", x_stride="i32", o_stride="i32", **pf)
for mode in (0, 1, 2):
    text = ptx(a._silu_and_mul_kernel, sig, dict(BLOCK=1024, PREFETCH=mode, PDL=True))
    assert "griddepcontrol.wait" in text and "griddepcontrol.launch_dependents" in text
    check_prefetch(text, mode)
print("compiled")
"""
)


@pytest.mark.parametrize(
    "nbytes, programs", [(2048 * 1024 * 2, 256), (6144 * 1024 * 2, 7), (4096, 3)]
)
def test_next_weight_shares_cover_the_weight_in_aligned_pieces(monkeypatch, nbytes, programs):
    """The programs' shares (program p: [p * chunk, min((p + 1) * chunk, total))) tile the
    weight's bytes exactly, every start 16-byte aligned, as cp.async.bulk needs."""
    monkeypatch.setattr(pdl, "NEXT_WEIGHT_PREFETCH", 2)
    monkeypatch.setattr(pdl, "pdl_enabled", lambda x: True)
    w = torch.zeros(nbytes // 2, dtype=torch.bfloat16)
    ptr, chunk, total, mode = pdl.next_weight_prefetch(torch.zeros(1), w, programs)
    assert mode == 2 and total == nbytes and ptr.dtype == torch.uint8 and ptr.numel() == nbytes
    assert ptr.data_ptr() == w.data_ptr() and chunk % 16 == 0
    ends = [min((p + 1) * chunk, total) for p in range(programs) if p * chunk < total]
    assert ends[-1] == total and chunk * (len(ends) - 1) < total


def test_next_weight_prefetch_off_where_it_cannot_apply(monkeypatch):
    x = torch.zeros(1)
    w = torch.zeros(64, 64, dtype=torch.bfloat16)
    monkeypatch.setattr(pdl, "pdl_enabled", lambda x: True)
    monkeypatch.setattr(pdl, "NEXT_WEIGHT_PREFETCH", 0)
    assert pdl.next_weight_prefetch(x, w, 4)[3] == 0  # switched off (the default)
    monkeypatch.setattr(pdl, "NEXT_WEIGHT_PREFETCH", 1)
    assert pdl.next_weight_prefetch(x, w, 4)[3] == 1
    assert pdl.next_weight_prefetch(x, None, 4) == (x, 0, 0, 0)
    assert pdl.next_weight_prefetch(x, w.t(), 4)[3] == 0  # not contiguous
    assert pdl.next_weight_prefetch(x, torch.zeros(3, dtype=torch.bfloat16), 4)[3] == 0  # 6 bytes
    big = torch.empty(17 << 20, dtype=torch.bfloat16)  # 34 MiB: would evict itself from L2
    assert pdl.next_weight_prefetch(x, big, 4)[3] == 0
    monkeypatch.setattr(pdl, "pdl_enabled", lambda x: False)
    assert pdl.next_weight_prefetch(x, w, 4)[3] == 0  # without PDL


def test_pdl_kernels_compile_for_sm90_with_the_wait_first():
    assert_compiles(AOT)
