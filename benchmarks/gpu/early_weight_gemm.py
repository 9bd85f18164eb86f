"""A decode GEMM whose weight tiles are requested before the PDL wait (Gluon, sm90+): the
kernel of the probe bench_early_weight_gemm.py.

A decode GEMM reads its weight from HBM (the attention's streaming evicts it from L2), and
with Triton's pipeliner every program requests its first tiles only after
`griddepcontrol.wait`. This kernel is written in Gluon (Triton's explicit layer) to control
that order: a TMA ring of STAGES x / w tiles in shared memory with one mbarrier per stage,
wgmma, and a TMA store of x [M, K] @ w [N, K].T (fp32 accumulation, one rounding at the
store, as cuBLAS). With EARLY the first STAGES weight tiles are requested before the wait and
the x tiles after it (each stage's barrier expects both); weights are never written by a
step's kernels, so that is safe. SPLIT > 1 writes fp32 K-slice partials as the engine's
split-K does.

H200, session 22: requesting the weights early moved nothing (within 0.47 us, mostly under
0.1), and the kernel was slower than the engine's own GEMMs at most shapes, so the engine
never dispatches here (docs/benchmarks.md, "Session 22"). Gluon has no interpreter: CI
compiles it for sm90 (tests/test_bench_early_weight_gemm.py) and the probe checks its values
against fp32 torch on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    HAS_GLUON = True
except ImportError:  # CPU-only installs, or a triton without Gluon
    HAS_GLUON = False

from strixlm.kernels.pdl import pdl_enabled
from strixlm.layers.splitk_partials import SplitKPartials


@dataclass(frozen=True)
class EarlyConfig:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    num_warps: int = 4
    split: int = 1  # K slices: > 1 writes fp32 partials for the next add + RMSNorm to sum


def early_gemm_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T with fp32 accumulation, rounded once to x's dtype."""
    return (x.float() @ w.float().t()).to(x.dtype)


if HAS_GLUON:
    from strixlm.kernels.pdl import gluon_pdl_prologue as _gdc_wait_and_release

    @gluon.constexpr_function
    def _instr_n(block_m, block_n, num_warps):
        """The widest wgmma N that tiles BLOCK_N with num_warps warps along M first."""
        m_reps = max(block_m // 16, 1)
        n_reps = max(num_warps // m_reps, 1)
        n = 256
        while n > max(block_n // n_reps, 8) or block_n % n:
            n -= 8
        return n

    @gluon.constexpr_function
    def _warps_per_cta(block_m, num_warps):
        wm = 4
        while wm * 2 <= num_warps and block_m > 16 * wm:
            wm *= 2
        return [wm, num_warps // wm]

    @gluon.jit
    def _early_weight_gemm_kernel(
        x_desc, w_desc, out_desc, part_ptr, M, N, K, STAGES: gl.constexpr,
        EARLY: gl.constexpr, PDL: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        # SPLIT 1: out (x's dtype) by TMA store. SPLIT > 1: program (n, m, s) covers K slice
        # s and writes fp32 partials part[s, m rows, n cols]; out_desc is unused.
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        off_n = gl.program_id(0) * BN
        off_m = gl.program_id(1) * BM
        k_lo = gl.program_id(2) * (K // SPLIT)
        x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(bars.index(s), count=1)
        n_k = (K // SPLIT) // BK
        nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
        if PDL and not EARLY:
            _gdc_wait_and_release()
        # The ring's first weight tiles: before the wait when EARLY (no kernel of the step
        # writes a weight). Each stage's barrier expects the x tile too, requested below.
        for s in gl.static_range(STAGES):
            mbarrier.expect(bars.index(s), nbytes, pred=s < n_k)
            tma.async_copy_global_to_shared(
                w_desc, [off_n, k_lo + s * BK], bars.index(s), w_ring.index(s), pred=s < n_k
            )
        if PDL and EARLY:
            _gdc_wait_and_release()
        for s in gl.static_range(STAGES):
            tma.async_copy_global_to_shared(
                x_desc, [off_m, k_lo + s * BK], bars.index(s), x_ring.index(s), pred=s < n_k
            )
        layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0],
            warps_per_cta=_warps_per_cta(BM, num_warps),
            instr_shape=[16, _instr_n(BM, BN, num_warps), 16],
        )
        acc = gl.zeros((BM, BN), dtype=gl.float32, layout=layout)
        for i in range(n_k):
            st = i % STAGES
            mbarrier.wait(bars.index(st), (i // STAGES) & 1)
            acc = warpgroup_mma(
                x_ring.index(st), w_ring.index(st).permute((1, 0)), acc, is_async=True
            )
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            nxt = i + STAGES
            k_nxt = k_lo + nxt * BK
            refill = nxt < n_k  # the stage's MMA is done: its buffers take tile i + STAGES
            mbarrier.expect(bars.index(st), nbytes, pred=refill)
            tma.async_copy_global_to_shared(
                w_desc, [off_n, k_nxt], bars.index(st), w_ring.index(st), pred=refill
            )
            tma.async_copy_global_to_shared(
                x_desc, [off_m, k_nxt], bars.index(st), x_ring.index(st), pred=refill
            )
        for s2 in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(s2))
        if SPLIT == 1:
            out_smem = gl.allocate_shared_memory(out_desc.dtype, [BM, BN], out_desc.layout)
            out_smem.store(acc.to(out_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(out_desc, [off_m, off_n], out_smem)
            tma.store_wait(pendings=0)
        else:
            rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
            cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
            part_row = (gl.program_id(2) * M + rows).to(gl.int64) * N
            ptrs = part_ptr + gl.expand_dims(part_row, 1) + gl.expand_dims(cols, 0)
            ok = gl.expand_dims(rows < M, 1) & gl.expand_dims(cols < N, 0)
            gl.store(ptrs, acc, mask=ok)


def descriptors(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, cfg: EarlyConfig):
    """TMA descriptors of x, w and out at cfg's boxes (out may be fp32: the partials' view)."""
    dtypes = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k

    def desc(t, block):
        layout = gl.NVMMASharedLayout.get_default_for(block, dtypes[t.dtype])
        return TensorDescriptor.from_tensor(t, block, layout)

    return desc(x, [bm, bk]), desc(w, [bn, bk]), desc(out, [bm, bn])


def _launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, cfg: EarlyConfig, early: bool):
    m, k = x.shape
    n = w.shape[0]
    if k % (cfg.split * cfg.block_k) or w.shape[1] != k:
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit {cfg}")
    if m == 0:
        return
    pdl = pdl_enabled(x)
    out2d = out.view(-1, n)  # the partials [S, M, N] as rows for the (unused) descriptor
    xd, wd, od = descriptors(x, w, out2d, cfg)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m), cfg.split)
    _early_weight_gemm_kernel[grid](
        xd, wd, od, out, m, n, k, STAGES=cfg.stages, EARLY=early, PDL=pdl, SPLIT=cfg.split,
        num_warps=cfg.num_warps, launch_pdl=pdl,
    )  # fmt: skip


def early_gemm(
    x: torch.Tensor, w: torch.Tensor, cfg: EarlyConfig, early: bool = True
) -> torch.Tensor:
    """x [M, K] @ w [N, K].T in x's dtype (cfg.split 1); K a multiple of cfg.block_k, both
    operands with 16-byte aligned rows (TMA). early=False requests every tile after the
    wait (A/B)."""
    if cfg.split != 1:
        raise ValueError(f"early_gemm takes split 1, got {cfg}")
    out = torch.empty(x.shape[0], w.shape[0], device=x.device, dtype=x.dtype)
    _launch(x, w, out, cfg, early)
    return out


def early_gemm_partials(
    x: torch.Tensor, w: torch.Tensor, cfg: EarlyConfig, early: bool = True
) -> SplitKPartials:
    """x [M, K] @ w [N, K].T as cfg.split fp32 K-slice partials (split_k's layout), for a
    consumer that sums them (the add + RMSNorm)."""
    parts = torch.empty(cfg.split, x.shape[0], w.shape[0], device=x.device, dtype=torch.float32)
    _launch(x, w, parts, cfg, early)
    return SplitKPartials(parts, x.dtype)
