"""Programmatic dependent launch (PDL) for the Triton kernels of a step.

In a CUDA graph a kernel starts only after the one before it has finished and its writes
are visible: the GPU idles between the two (~0.6 us a gap, ~290 gaps per decode step, 0.2 s
of the standard workload's 5.6 s on the H200, benchmarks/gpu/profile_run.py). A kernel
launched with PDL (sm90+) may be scheduled while its predecessor drains: its CTAs start,
wait at griddepcontrol.wait until the predecessor has completed and flushed, then run.

Every kernel that opts in calls `pdl_prologue(PDL)` before it touches what its predecessor
writes, so the stream's ordering is kept exactly; it waits before it lets its own
successor launch, so a kernel that starts early may read anything written before its
predecessor (the persistent decode kernel deals its sequences before the wait). A
successor without PDL (cuBLAS) ignores the early trigger. STRIXLM_DISABLE_PDL=1 turns it
off (read at import), for A/B runs.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# STRIXLM_DISABLE_PDL=1 (read at import, like the other A/B knobs): plain launches.
DISABLED = os.environ.get("STRIXLM_DISABLE_PDL", "0") != "0"
# STRIXLM_GEMM_L2_PREFETCH: with PDL, our decode GEMMs ask for their weight slice before the
# wait: 1 = one bulk L2 prefetch per program, 2 = the same marked evict-last (so the
# predecessor's streaming reads do not push it out first), 0 = none. Session 9's per-line
# hints (prefetch.global.L2, one instruction per 128 bytes) cost more issue slots than they
# saved (-1.2%); a bulk prefetch is one instruction per contiguous range. Off until the
# workload A/B (run_remeasure.sh l2ab) decides.
L2_PREFETCH = int(os.environ.get("STRIXLM_GEMM_L2_PREFETCH", "0"))
_CAPABILITY: dict[int, int] = {}


def pdl_enabled(x: torch.Tensor) -> bool:
    """Launch x's kernels with PDL: a CUDA tensor on an sm90+ device, unless disabled."""
    if DISABLED or not (x.is_cuda and HAS_TRITON):
        return False
    idx = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if idx not in _CAPABILITY:
        _CAPABILITY[idx] = torch.cuda.get_device_capability(idx)[0]
    return _CAPABILITY[idx] >= 9


def l2_prefetch_mode(x: torch.Tensor) -> int:
    """PREFETCH for a GEMM on x: STRIXLM_GEMM_L2_PREFETCH where PDL runs (sm90+), else 0."""
    return L2_PREFETCH if L2_PREFETCH in (1, 2) and pdl_enabled(x) else 0


if HAS_TRITON:

    @triton.jit
    def pdl_prologue(PDL: tl.constexpr):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()

    # One thread of the program asks the bulk-copy unit to pull [ptr, ptr + nbytes) into L2
    # (sm90+; ptr and nbytes multiples of 16). Nothing waits for it: later loads find the
    # lines in L2 or in flight. MODE 2 marks them evict-last. The dummy output keeps the asm.
    # For a tensor of row pointers (l2_prefetch_rows) every thread holding a row issues it:
    # rows replicated across threads are asked for more than once, which is harmless.
    def _prefetch_asm(mode: int, one_thread: bool) -> str:
        lines = [".reg .pred pfp;", ".reg .b32 pft;", ".reg .b64 pfpol;"]
        hint = operand = guard = ""
        if mode == 2:
            lines.append("createpolicy.fractional.L2::evict_last.b64 pfpol, 1.0;")
            hint, operand = ".L2::cache_hint", ", pfpol"
        if one_thread:
            lines += ["mov.u32 pft, %tid.x;", "setp.eq.u32 pfp, pft, 0;"]
            guard = "@pfp "
        lines += [f"{guard}cp.async.bulk.prefetch.L2.global{hint} [$1], $2{operand};"]
        return "{\n" + "\n".join(lines + ["mov.u32 $0, 0;"]) + "\n}"

    _RANGE_1 = tl.constexpr(_prefetch_asm(1, True))
    _RANGE_2 = tl.constexpr(_prefetch_asm(2, True))
    _ROWS_1 = tl.constexpr(_prefetch_asm(1, False))
    _ROWS_2 = tl.constexpr(_prefetch_asm(2, False))

    @triton.jit
    def _prefetch(asm: tl.constexpr, ptr, nbytes):
        tl.inline_asm_elementwise(asm, "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False,
                                  pack=1)  # fmt: skip

    @triton.jit
    def l2_prefetch_range(ptr, nbytes, MODE: tl.constexpr):
        """Before pdl_prologue, on data no kernel of the step writes (weights): the program
        asks for [ptr, ptr + nbytes) while its predecessor drains, and reads it from L2
        after the wait. MODE 0: nothing."""
        if MODE == 1:
            _prefetch(_RANGE_1, ptr, nbytes)
        elif MODE == 2:
            _prefetch(_RANGE_2, ptr, nbytes)

    @triton.jit
    def l2_prefetch_rows(row_ptrs, nbytes, MODE: tl.constexpr):
        """l2_prefetch_range for a tensor of row starts, nbytes each."""
        if MODE == 1:
            _prefetch(_ROWS_1, row_ptrs, nbytes)
        elif MODE == 2:
            _prefetch(_ROWS_2, row_ptrs, nbytes)
