"""The decode MLP as one persistent, warp-specialized launch (Gluon, sm90): the kernel of the
probe bench_ws_mlp.py, for small decode batches (M <= 64 rows).

Why: at small batches a layer's non-attention kernels are latency-bound (docs/benchmarks.md,
"Where the remaining time goes"). Each launch ramps up, waits for its first weight tiles
from HBM and drains, and session 21's persistent Triton probe (bench_dataflow_mlp.py) lost
because each of its tasks ramped its own software pipeline from scratch. Here one warp of
each program does nothing but stream the weight tiles of all its tasks, gate_up's and then
down's, through a ring of shared-memory stages by TMA. Weights never depend on activations,
so that stream runs ahead of every dependency wait; the compute warpgroup waits only for
data:

    program p, tasks p, p + P, p + 2P, ... (P programs, one an SM)
      gate_up + SiLU task t (t < I / BN):   h[:, t*BN:(t+1)*BN]      -> act [M, I] (bf16)
          its slice counter += 1 (release) once the tile is stored
      down task (s, n):                     act[:, slice s] @ w_d[n*2BN:(n+1)*2BN, slice s]^T
          waits (acquire) for slice s's counter to reach its gate_up task count, then
          -> fp32 partials [SPLIT, M, H], summed by the engine's next add + RMSNorm

x ([M, H], M <= 64) sits in shared memory through the gate_up tasks (one TMA load). A down
task copies its act slice into the same buffer with cp.async after the acquire (the generic
proxy, as the stores that wrote it), then fences before wgmma reads it. The roundings are
the engine's: gate and up rounded to the model dtype, then silu_mul's. The last program to
finish zeroes the counters, so a CUDA graph can replay the launch.

Gluon has no interpreter: CI compiles it for sm90 (tests/test_bench_ws_mlp.py) and the probe
checks its values against torch on the GPU before timing.

H200, session 36 (docs/benchmarks.md, "Session 36"): correct, and slower than the engine's
kernels at every row count (x0.80 at best, at M 1). Its weight stream alone, with no MMA and
no waits, takes 1-2 us a layer less than the engine's whole MLP; skipping down's waits saves
under 0.7 us; more MMAs in flight made it slower. The engine never dispatches here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
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

MAX_ROWS = 64  # x stays in shared memory: [64, H] bf16 is 128 KB at H 1024


@dataclass(frozen=True)
class WsConfig:
    block_n: int  # gate_up task width (gate and up each this wide); a down task is twice it
    block_k: int
    split: int  # down's K slices (fp32 partials)
    stages: int  # weight ring depth
    flag_stride: int = 32  # counters on their own 128-byte lines
    lag: int = 1  # ring stages whose MMAs may be in flight (< stages)


if HAS_GLUON:
    # griddepcontrol.wait, then let the successor start its prologue (early_weight_gemm's).
    from early_weight_gemm import _gdc_wait_and_release as _pdl_wait

    @gluon.jit
    def _weight_stream(
        wgu_desc, wd_desc, ring_a, ring_b, ready, empty, NUM_PROGRAMS,
        H: gl.constexpr, I: gl.constexpr, SPLIT: gl.constexpr,
    ):  # fmt: skip
        # The producer warp: every task's weight tiles, in task order, into the ring. It
        # waits only for free stages, never for data.
        BN: gl.constexpr = ring_a.type.shape[1]
        BK: gl.constexpr = ring_a.type.shape[2]
        STAGES: gl.constexpr = ring_a.type.shape[0]
        GU_TASKS: gl.constexpr = I // BN
        D_TILES: gl.constexpr = H // (2 * BN)
        KS: gl.constexpr = I // SPLIT
        total = GU_TASKS + SPLIT * D_TILES
        it = 0
        for task in range(gl.program_id(0), total, NUM_PROGRAMS):
            if task < GU_TASKS:
                for k in range(0, H, BK):
                    st = it % STAGES
                    mbarrier.wait(empty.index(st), ((it // STAGES) & 1) ^ 1)
                    bar = ready.index(st)
                    mbarrier.expect(bar, 2 * wgu_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(wgu_desc, [task * BN, k], bar, ring_a.index(st))
                    tma.async_copy_global_to_shared(
                        wgu_desc, [I + task * BN, k], bar, ring_b.index(st)
                    )
                    it += 1
            else:
                d = task - GU_TASKS
                s = d // D_TILES
                n0 = (d % D_TILES) * 2 * BN
                for k in range(s * KS, (s + 1) * KS, BK):
                    st = it % STAGES
                    mbarrier.wait(empty.index(st), ((it // STAGES) & 1) ^ 1)
                    bar = ready.index(st)
                    mbarrier.expect(bar, 2 * wd_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(wd_desc, [n0, k], bar, ring_a.index(st))
                    tma.async_copy_global_to_shared(wd_desc, [n0 + BN, k], bar, ring_b.index(st))
                    it += 1

    @gluon.jit
    def _mma_stages(
        a_bufs, ring_a, ring_b, ready, empty, acc0, acc1, it, NK: gl.constexpr, LAG: gl.constexpr
    ):
        # acc0 += A_k @ ring_a^T, acc1 += A_k @ ring_b^T over NK ring stages, with LAG stages'
        # MMAs in flight while the next stage's are issued; a stage goes back to the producer
        # once its MMAs are done.
        STAGES: gl.constexpr = ring_a.type.shape[0]
        for kk in gl.static_range(NK):
            st = it % STAGES
            mbarrier.wait(ready.index(st), (it // STAGES) & 1)
            a = a_bufs.index(kk)
            acc0 = warpgroup_mma(a, ring_a.index(st).permute((1, 0)), acc0, is_async=True)
            acc1 = warpgroup_mma(a, ring_b.index(st).permute((1, 0)), acc1, is_async=True)
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=2 * LAG, deps=(acc0, acc1))
            if kk >= LAG:
                mbarrier.arrive(empty.index((it - LAG) % STAGES), count=1)
            it += 1
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
        for j in gl.static_range(min(LAG, NK)):
            mbarrier.arrive(empty.index((it - 1 - j) % STAGES), count=1)
        return acc0, acc1, it

    @gluon.jit
    def _compute(
        x_desc, x_smem, x_bar, ring_a, ring_b, ready, empty, act_ptr, part_ptr,
        sync_ptr, M, NUM_PROGRAMS, H: gl.constexpr, I: gl.constexpr, SPLIT: gl.constexpr,
        FLAG_STRIDE: gl.constexpr, PDL: gl.constexpr, RESET: gl.constexpr,
        STREAM_ONLY: gl.constexpr, NO_WAIT: gl.constexpr, LAG: gl.constexpr,
    ):  # fmt: skip
        BN: gl.constexpr = ring_a.type.shape[1]
        BK: gl.constexpr = ring_a.type.shape[2]
        STAGES: gl.constexpr = ring_a.type.shape[0]
        BM: gl.constexpr = x_smem.type.shape[1]
        GU_TASKS: gl.constexpr = I // BN
        GU_PER_SLICE: gl.constexpr = GU_TASKS // SPLIT
        D_TILES: gl.constexpr = H // (2 * BN)
        KS: gl.constexpr = I // SPLIT
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16]
        )
        ld_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        if PDL:
            _pdl_wait()
        mbarrier.expect(x_bar, (H // BK) * x_desc.block_type.nbytes)
        for xk in gl.static_range(H // BK):
            tma.async_copy_global_to_shared(x_desc, [0, xk * BK], x_bar, x_smem.index(xk))
        mbarrier.wait(x_bar, 0)

        rows = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
        cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
        row_ok = gl.expand_dims(rows < M, 1)
        ld_rows = gl.arange(0, BM, layout=gl.SliceLayout(1, ld_l))
        ld_cols = gl.arange(0, BK, layout=gl.SliceLayout(0, ld_l))
        ld_ok = gl.expand_dims(ld_rows < M, 1)
        total = GU_TASKS + SPLIT * D_TILES
        it = 0
        if STREAM_ONLY:  # timing only: the weight stream with no MMA, store or wait for data
            n_st = 0
            for task in range(gl.program_id(0), total, NUM_PROGRAMS):
                n_st += gl.where(task < GU_TASKS, H // BK, KS // BK)
            for _ in range(n_st):
                st = it % STAGES
                mbarrier.wait(ready.index(st), (it // STAGES) & 1)
                mbarrier.arrive(empty.index(st), count=1)
                it += 1
            return
        for task in range(gl.program_id(0), total, NUM_PROGRAMS):
            acc0 = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_l)
            acc1 = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_l)
            if task < GU_TASKS:
                acc0, acc1, it = _mma_stages(
                    x_smem, ring_a, ring_b, ready, empty, acc0, acc1, it, H // BK, LAG
                )
                dt: gl.constexpr = act_ptr.dtype.element_ty
                g = acc0.to(dt).to(gl.float32)
                sg = (g / (1.0 + gl.exp(-g))).to(dt)
                h = (sg.to(gl.float32) * acc1.to(dt).to(gl.float32)).to(dt)
                ptrs = act_ptr + gl.expand_dims(rows * I, 1) + gl.expand_dims(task * BN + cols, 0)
                gl.store(ptrs, h, mask=row_ok)
                gl.thread_barrier()  # every thread's store before the release
                gl.atomic_add(sync_ptr + 1 + (task // GU_PER_SLICE) * FLAG_STRIDE, 1, sem="release")
            else:
                d = task - GU_TASKS
                s = d // D_TILES
                n0 = (d % D_TILES) * 2 * BN
                flag = sync_ptr + 1 + s * FLAG_STRIDE
                if not NO_WAIT:  # timing only: NO_WAIT reads act unfinished
                    done = gl.atomic_add(flag, 0, sem="acquire")
                    while done < GU_PER_SLICE:
                        done = gl.atomic_add(flag, 0, sem="acquire")
                gl.thread_barrier()  # no thread copies act before the acquire
                # The slice's act, all chunks at once, into x's buffer: every gate_up task of
                # this program came before (tasks run in order), so x is no longer read.
                for c in gl.static_range(KS // BK):
                    hp = act_ptr + gl.expand_dims(ld_rows * I, 1)
                    hp = hp + gl.expand_dims(s * KS + c * BK + ld_cols, 0)
                    async_copy.async_copy_global_to_shared(
                        x_smem.index(c), hp, mask=ld_ok, cache_modifier=".cg"
                    )
                async_copy.commit_group()
                async_copy.wait_group(0)
                fence_async_shared()  # cp.async's writes before wgmma's (async proxy) reads
                gl.thread_barrier()
                acc0, acc1, it = _mma_stages(
                    x_smem, ring_a, ring_b, ready, empty, acc0, acc1, it, KS // BK, LAG
                )
                prow = gl.expand_dims((s * M + rows).to(gl.int64) * H, 1)
                gl.store(part_ptr + prow + gl.expand_dims(n0 + cols, 0), acc0, mask=row_ok)
                gl.store(part_ptr + prow + gl.expand_dims(n0 + BN + cols, 0), acc1, mask=row_ok)
        gl.thread_barrier()
        finished = gl.atomic_add(sync_ptr, 1, sem="acq_rel")
        if RESET and finished == NUM_PROGRAMS - 1:  # the last one out zeroes the counters
            z_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
            idx = gl.arange(0, 128, layout=z_l)
            n_sync: gl.constexpr = 1 + SPLIT * FLAG_STRIDE
            for i in range(0, n_sync, 128):
                gl.store(sync_ptr + i + idx, gl.zeros([128], gl.int32, z_l), mask=i + idx < n_sync)

    @gluon.jit
    def _ws_mlp_kernel(
        x_desc, wgu_desc, wd_desc, act_ptr, part_ptr, sync_ptr, M, NUM_PROGRAMS,
        H: gl.constexpr, I: gl.constexpr, SPLIT: gl.constexpr, STAGES: gl.constexpr,
        FLAG_STRIDE: gl.constexpr, PDL: gl.constexpr, RESET: gl.constexpr,
        STREAM_ONLY: gl.constexpr, NO_WAIT: gl.constexpr, LAG: gl.constexpr,
    ):  # fmt: skip
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = wgu_desc.block_type.shape[0]
        x_smem = gl.allocate_shared_memory(x_desc.dtype, [H // BK, BM, BK], x_desc.layout)
        ring_a = gl.allocate_shared_memory(wgu_desc.dtype, [STAGES, BN, BK], wgu_desc.layout)
        ring_b = gl.allocate_shared_memory(wgu_desc.dtype, [STAGES, BN, BK], wgu_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        x_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        mbarrier.init(x_bar, count=1)
        gl.warp_specialize(
            [
                (
                    _compute,
                    (
                        x_desc,
                        x_smem,
                        x_bar,
                        ring_a,
                        ring_b,
                        ready,
                        empty,
                        act_ptr,
                        part_ptr,
                        sync_ptr,
                        M,
                        NUM_PROGRAMS,
                        H,
                        I,
                        SPLIT,
                        FLAG_STRIDE,
                        PDL,
                        RESET,
                        STREAM_ONLY,
                        NO_WAIT,
                        LAG,
                    ),
                ),  # fmt: skip
                (
                    _weight_stream,
                    (wgu_desc, wd_desc, ring_a, ring_b, ready, empty, NUM_PROGRAMS, H, I, SPLIT),
                ),
            ],
            [1],
            [24],
        )


def descriptors(x: torch.Tensor, w_gu: torch.Tensor, w_d: torch.Tensor, cfg: WsConfig):
    """TMA descriptors: x at [64, BK] boxes (rows past M read as zeros), gate_up and down
    weights at [BN, BK] boxes."""
    dtypes = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}
    dt = dtypes[x.dtype]

    def desc(t, block):
        return TensorDescriptor.from_tensor(
            t, block, gl.NVMMASharedLayout.get_default_for(block, dt)
        )

    bn, bk = cfg.block_n, cfg.block_k
    return desc(x, [MAX_ROWS, bk]), desc(w_gu, [bn, bk]), desc(w_d, [bn, bk])


class WsMLP:
    """The probe's MLP for up to MAX_ROWS rows: act, partials and counters built once, one
    launch a call. Returns the fp32 partials [split, M, H]."""

    def __init__(self, cfg: WsConfig, hidden: int, inter: int, rows: int, device, dtype,
                 programs: int) -> None:  # fmt: skip
        if not 1 <= cfg.lag < cfg.stages:
            raise ValueError(f"lag must be in [1, stages): {cfg}")
        if rows > MAX_ROWS:
            raise ValueError(f"ws_mlp takes at most {MAX_ROWS} rows, got {rows}")
        if inter % (cfg.block_n * cfg.split) or hidden % (2 * cfg.block_n) or hidden % cfg.block_k:
            raise ValueError(f"hidden {hidden} / intermediate {inter} do not fit {cfg}")
        if (inter // cfg.split) % cfg.block_k or inter // cfg.split > hidden:
            # down's act slice is staged in x's buffer: at most H wide
            raise ValueError(f"a K slice of {inter // cfg.split} does not fit {cfg}")
        self.cfg, self.hidden, self.inter, self.rows = cfg, hidden, inter, rows
        # One program an SM, never more than there are tasks (gate_up's, then down's).
        tasks = inter // cfg.block_n + cfg.split * hidden // (2 * cfg.block_n)
        self.programs = min(programs, tasks)
        self.act = torch.empty(rows, inter, device=device, dtype=dtype)
        self.parts = torch.empty(cfg.split, rows, hidden, device=device, dtype=torch.float32)
        self.sync = torch.zeros(1 + cfg.split * cfg.flag_stride, device=device, dtype=torch.int32)

    def __call__(
        self,
        x: torch.Tensor,
        w_gu: torch.Tensor,
        w_d: torch.Tensor,
        reset: bool = True,
        stream_only: bool = False,
        no_wait: bool = False,
    ) -> torch.Tensor:
        """Timing only, the partials garbage: stream_only runs the weight stream alone;
        no_wait skips down's wait for its act slice."""
        c = self.cfg
        if x.shape != (self.rows, self.hidden):
            want = (self.rows, self.hidden)
            raise ValueError(f"built for {list(want)}, called with {tuple(x.shape)}")
        pdl = pdl_enabled(x)
        xd, gud, dd = descriptors(x, w_gu, w_d, c)
        _ws_mlp_kernel[(self.programs,)](
            xd, gud, dd, self.act, self.parts, self.sync, self.rows, self.programs,
            H=self.hidden, I=self.inter, SPLIT=c.split, STAGES=c.stages,
            FLAG_STRIDE=c.flag_stride, PDL=pdl, RESET=reset, STREAM_ONLY=stream_only,
            NO_WAIT=no_wait, LAG=c.lag, num_warps=4,
            launch_pdl=pdl,
        )  # fmt: skip
        return self.parts

    def expected_counters(self) -> list[int]:
        """The counters after one launch with reset=False: programs finished, then each
        slice's gate_up task count."""
        c = self.cfg
        out = [0] * (1 + c.split * c.flag_stride)
        out[0] = self.programs
        for s in range(c.split):
            out[1 + s * c.flag_stride] = self.inter // c.block_n // c.split
        return out
