"""Programmatic dependent launch (PDL) for the Triton kernels of a step.

In a CUDA graph a kernel starts only after the one before it has finished and its writes
are visible: the GPU idles between the two (~0.6 us a gap, ~290 gaps per decode step, 0.2 s
of the standard workload's 5.6 s on the H200, benchmarks/gpu/profile_run.py). A kernel
launched with PDL (sm90+) may be scheduled while its predecessor drains: its CTAs start,
wait at griddepcontrol.wait until the predecessor has completed and flushed, then run.

Every kernel that opts in calls `pdl_prologue(PDL)` before it touches what its predecessor
writes, so the stream's ordering is kept exactly; it waits before it lets its own
successor launch, so a kernel that starts early may read anything written before its
predecessor (the persistent decode kernel deals its sequences before the wait; with
EARLY_LOADS, RMSNorm loads its weight there, the q/k norm + rotary its positions, cos / sin
rows, weights and cache slots, and the unified attention kernel its sequence lookup). A
successor without PDL (cuBLAS) ignores the early trigger. STRIXLM_DISABLE_PDL=1 turns it
off (read at import), for A/B runs.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON, capability_major

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    HAS_GLUON = True
except ImportError:  # CPU-only installs, or a triton without Gluon
    HAS_GLUON = False

# STRIXLM_DISABLE_PDL=1 (read at import, like the other A/B knobs): plain launches.
DISABLED = os.environ.get("STRIXLM_DISABLE_PDL", "0") != "0"
# Kernels whose inputs include data no kernel of the step writes (weights, cos/sin tables) or
# that a kernel before their direct predecessor wrote (positions, slot mappings, sequence
# lengths) issue those loads before their wait, so their latency overlaps the predecessor's
# drain. A kernel that rewrites such inputs mid-step (e.g. a future speculative-decoding
# update of seq_lens) must not be the direct predecessor of one that reads them early.
# STRIXLM_PDL_EARLY_LOADS=0 issues them after the wait (A/B runs; read at import).
EARLY_LOADS = os.environ.get("STRIXLM_PDL_EARLY_LOADS", "1") != "0"
# RMSNorm also loads its residual row before the wait. In the decoders here (Llama / Qwen3,
# Qwen3-MoE, Nemotron-H) the residual was written by the norm before the attention, MLP or
# mixer block, or is the embedding before the first norm: at least two kernels back. A
# decoder whose residual comes from the kernel right before its norm must turn this off.
# H200, standard workload, three alternating pairs (session 22): +0.29%.
# STRIXLM_PDL_EARLY_RESIDUAL=0 loads it after the wait (A/B runs; read at import).
EARLY_RESIDUAL = os.environ.get("STRIXLM_PDL_EARLY_RESIDUAL", "1") != "0"


def pdl_enabled(x: torch.Tensor) -> bool:
    """Launch x's kernels with PDL: a CUDA tensor on an sm90+ device, unless disabled."""
    if DISABLED or not (x.is_cuda and HAS_TRITON):
        return False
    return capability_major(x.device) >= 9


if HAS_TRITON:

    @triton.jit
    def pdl_prologue(PDL: tl.constexpr):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()


if HAS_GLUON:

    @gluon.jit
    def gluon_pdl_prologue():
        # pdl_prologue for Gluon kernels: griddepcontrol.wait (the predecessor's writes are
        # visible), then let the successor start its own prologue.
        gl.inline_asm_elementwise(
            "griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
        )
        gl.inline_asm_elementwise(
            "griddepcontrol.launch_dependents; // $0",
            "=r",
            [],
            dtype=gl.int32,
            is_pure=False,
            pack=1,
        )
