"""Where does a Triton GEMM that loads its tiles with TMA (kernels/tma_linear.py) beat what a
decode step runs now? An experiment for issue 3, and the source of tma_linear's tables.

Timed as sweep_dense_gemm.py times GEMMs: 28 x [PDL producer -> GEMM] in one CUDA graph,
each with its own weight, minus the producers alone, per layer. Every config is first
checked against fp32 torch.

Per shape and row count: cuBLAS, the engine's current dispatch (our pointer-load tile GEMM
where splitk_linear.plan_dense has it, the TMA GEMM where tma_linear.plan does, else
cuBLAS), and the best TMA config. A fused gate_up + SiLU with a TMA epilogue was also swept
here (commit 1bf15ed and before) and dropped: see docs/benchmarks.md, session 12.

python benchmarks/gpu/sweep_tma_gemm.py [--json PATH] [--reps N] [--rows M ...]
    [--shapes qkv gate_up o_proj down]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sweep_dense_gemm import LAYERS, chain_us  # noqa: E402

from strixlm.kernels import splitk_linear as sk  # noqa: E402
from strixlm.kernels import tma_linear as tma  # noqa: E402
from strixlm.kernels.pdl import pdl_enabled  # noqa: E402

SHAPES = {
    "qkv": (4096, 1024),
    "gate_up": (6144, 1024),
    "o_proj": (1024, 2048),
    "down": (1024, 3072),
}
ROWS = (128, 192, 256)
HALF = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)


def configs() -> list[tma.TmaConfig]:
    out = []
    for bm in (64, 128):
        for bn in (32, 64, 128, 256):
            for bk in (64, 128):
                for stages in (3, 4):
                    if (bm + bn) * bk * 2 * stages > 200 * 1024:
                        continue
                    warps = 8 if bm * bn >= 128 * 128 else 4
                    out.append(tma.TmaConfig(bm, bn, bk, warps, stages))
    return out


def engine_gemm(m: int, n: int, k: int):
    """The engine's plain x @ w.T at m rows (Linear.forward without the GEMV)."""
    dense = sk.plan_dense(m, n, k, **HALF)
    if dense is not None:
        return lambda a, b: sk.dense_linear(a, b, dense)
    t = tma.plan(m, n, k, **HALF)
    if t is not None:
        return lambda a, b: tma.tma_linear(a, b, t)
    return F.linear


def best_config(m, ws, cfgs, run, ref_fn, base, reps, n_out=None):
    x = torch.randn(m, ws[0].shape[1], device="cuda", dtype=torch.bfloat16)
    ref = ref_fn(x, ws[0]).float()
    best: tuple[float, tma.TmaConfig | None] = (float("inf"), None)
    for cfg in cfgs:
        try:
            got = run(x, ws[0], cfg).float()
        except ValueError:
            continue  # shape does not fit the tiles
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        if err > 2e-2:
            print(f"  M={m} {cfg}: WRONG (rel err {err:.3g})")
            continue
        t = chain_us(m, ws, lambda a, b, c=cfg: run(a, b, c), True, reps, n_out) - base
        best = min(best, (t, cfg), key=lambda r: r[0])
    return best


def sweep_plain(names, rows, reps) -> list[dict]:
    cfgs = configs()
    print(f"{len(cfgs)} TMA configs; PDL {pdl_enabled(torch.empty(1, device='cuda'))}")
    out = []
    for name in names:
        n, k = SHAPES[name]
        torch.manual_seed(0)
        ws = [(0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)]
        for m in rows:
            base = chain_us(m, ws, None, False, reps)
            cub = chain_us(m, ws, F.linear, True, reps) - base
            eng = chain_us(m, ws, engine_gemm(m, n, k), True, reps) - base
            t, cfg = best_config(
                m, ws, cfgs, tma.tma_linear, lambda a, b: F.linear(a.float(), b.float()), base, reps
            )
            print(f"{name:8s} M={m:4d} cuBLAS {cub:6.2f} us  engine {eng:6.2f}  TMA {t:6.2f} "
                  f"{cfg}  gain vs engine {eng - t:+5.2f}")  # fmt: skip
            out.append(dict(name=name, m=m, cublas_us=cub, engine_us=eng, tma_us=t,
                            cfg=None if cfg is None else cfg.__dict__))  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args()
    rows = sweep_plain(args.shapes, args.rows, args.reps)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
