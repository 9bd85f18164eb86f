"""Would the decode GEMMs gain from loading their weight tiles before the PDL wait? A probe
for issue 3, written in Gluon (Triton's explicit layer) because Triton's own pipeliner
issues every stage's loads after the wait.

Session 21 measured +0.6-0.7% on the standard workload from issuing a few small loads
(RMSNorm's weight, the rotary rows) before `griddepcontrol.wait`. The GEMMs' weights are
the large case: a decode GEMM's weight comes from HBM (attention's streaming evicts it from
L2), and each of its programs starts that read only after the wait. Here a TMA GEMM
(x [M, K] @ w [N, K].T, fp32 accumulation, one rounding at the store) keeps STAGES tiles in
flight through a shared-memory ring with one mbarrier per stage:
  EARLY: the first STAGES weight tiles are requested before the wait, x's after it (each
         stage's barrier expects both); the rest of the loop refills the ring as usual;
  not EARLY: the same kernel with every load after the wait (the control).

Timed as sweep_dense_gemm.py times GEMMs: 28 x [PDL producer -> GEMM] in one CUDA graph,
each with its own weight, minus the producers alone, per layer; against the engine's own
dispatch for the shape (Linear's pointer / TMA tile GEMMs, or cuBLAS). Each config is
checked against fp32 torch first.

python benchmarks/gpu/bench_early_weight_gemm.py [--json PATH] [--rows M ...]
Written without a GPU (session 21, after the device budget ran out): not yet run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sweep_dense_gemm import LAYERS, chain_us  # noqa: E402
from sweep_tma_gemm import SHAPES, engine_gemm  # noqa: E402  (N, K) of the decode GEMMs


@dataclass(frozen=True)
class EarlyConfig:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    num_warps: int = 4


CONFIGS = [
    EarlyConfig(64, 64, 128, 4),
    EarlyConfig(64, 32, 128, 4),
    EarlyConfig(64, 128, 64, 4),
    EarlyConfig(64, 64, 64, 6),
    EarlyConfig(128, 64, 128, 3),
]


@gluon.jit
def _gdc_wait_and_release():
    # griddepcontrol.wait: the predecessor grid has finished and its writes are visible;
    # then let this kernel's successor start its own prologue.
    gl.inline_asm_elementwise(
        "griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )
    gl.inline_asm_elementwise(
        "griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


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
    x_desc, w_desc, out_desc, K, STAGES: gl.constexpr, EARLY: gl.constexpr,
    PDL: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    BM: gl.constexpr = x_desc.block_type.shape[0]
    BK: gl.constexpr = x_desc.block_type.shape[1]
    BN: gl.constexpr = w_desc.block_type.shape[0]
    off_n = gl.program_id(0) * BN
    off_m = gl.program_id(1) * BM
    x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    n_k = K // BK
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    if PDL and not EARLY:
        _gdc_wait_and_release()
    # The ring's first weight tiles: before the wait when EARLY (no kernel of the step
    # writes a weight). Each stage's barrier expects the x tile too, requested below.
    for s in gl.static_range(STAGES):
        mbarrier.expect(bars.index(s), nbytes, pred=s < n_k)
        tma.async_copy_global_to_shared(
            w_desc, [off_n, s * BK], bars.index(s), w_ring.index(s), pred=s < n_k
        )
    if PDL and EARLY:
        _gdc_wait_and_release()
    for s in gl.static_range(STAGES):
        tma.async_copy_global_to_shared(
            x_desc, [off_m, s * BK], bars.index(s), x_ring.index(s), pred=s < n_k
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
        acc = warpgroup_mma(x_ring.index(st), w_ring.index(st).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        nxt = i + STAGES
        refill = nxt < n_k  # the stage's MMA is done: its buffers take tile i + STAGES
        mbarrier.expect(bars.index(st), nbytes, pred=refill)
        tma.async_copy_global_to_shared(
            w_desc, [off_n, nxt * BK], bars.index(st), w_ring.index(st), pred=refill
        )
        tma.async_copy_global_to_shared(
            x_desc, [off_m, nxt * BK], bars.index(st), x_ring.index(st), pred=refill
        )
    for s2 in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s2))
    out_smem = gl.allocate_shared_memory(out_desc.dtype, [BM, BN], out_desc.layout)
    out_smem.store(acc.to(out_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(out_desc, [off_m, off_n], out_smem)
    tma.store_wait(pendings=0)


def descriptors(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, cfg: EarlyConfig):
    dt = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k

    def desc(t, block):
        layout = gl.NVMMASharedLayout.get_default_for(block, dt)
        return TensorDescriptor.from_tensor(t, block, layout)

    return desc(x, [bm, bk]), desc(w, [bn, bk]), desc(out, [bm, bn])


def early_gemm(
    x: torch.Tensor, w: torch.Tensor, cfg: EarlyConfig, early: bool = True, pdl: bool = True
) -> torch.Tensor:
    """x [M, K] @ w [N, K].T in x's dtype; K a multiple of cfg.block_k."""
    m, k = x.shape
    n = w.shape[0]
    if k % cfg.block_k:
        raise ValueError(f"K {k} is not a multiple of {cfg.block_k}")
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    xd, wd, od = descriptors(x, w, out, cfg)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m))
    _early_weight_gemm_kernel[grid](
        xd, wd, od, k, STAGES=cfg.stages, EARLY=early, PDL=pdl, num_warps=cfg.num_warps,
        launch_pdl=pdl,
    )  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 32, 64, 128, 192, 256])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for name in args.shapes:
        n, k = SHAPES[name]
        torch.manual_seed(0)
        ws = [(0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)]
        for m in args.rows:
            base = chain_us(m, ws, None, False, args.reps)
            eng = chain_us(m, ws, engine_gemm(m, n, k), True, args.reps) - base
            row = dict(name=name, m=m, engine_us=eng, configs=[])
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = x.float() @ ws[0].float().t()
            for cfg in CONFIGS:
                if k % cfg.block_k:
                    continue
                times = {}
                for early in (True, False):
                    try:
                        got = early_gemm(x, ws[0], cfg, early).float()
                    except Exception as e:  # noqa: BLE001 - a config that fails is a result
                        print(f"  {name} M={m} {cfg} early={early}: {type(e).__name__}: {e}"[:300])
                        break
                    err = ((got - ref).abs().max() / ref.abs().max()).item()
                    if err > 2e-2:
                        print(f"  {name} M={m} {cfg} early={early}: WRONG (rel err {err:.3g})")
                        break

                    def run(a, b, c=cfg, e=early):
                        return early_gemm(a, b, c, e)

                    times[early] = chain_us(m, ws, run, True, args.reps) - base
                if len(times) == 2:
                    row["configs"].append(dict(cfg=asdict(cfg), early_us=times[True],
                                               late_us=times[False]))  # fmt: skip
                    print(f"{name:8s} M={m:4d} engine {eng:6.2f} us  {cfg}: early "
                          f"{times[True]:6.2f}  late {times[False]:6.2f}  "
                          f"vs engine {eng - times[True]:+5.2f}", flush=True)  # fmt: skip
            results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
