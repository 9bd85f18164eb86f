"""Would a Triton GEMM that loads its tiles with TMA (tensor descriptors) beat cuBLAS at the
decode GEMMs where cuBLAS still runs (129-256 rows)? An experiment for issue 3.

Our pointer-load tile GEMM (kernels/splitk_linear.py) loses to cuBLAS there by 0.5-1.4 us a
GEMM (sweep_dense_gemm.py), and the epilogue fusions it would carry (SiLU-and-mul, the q/k
norm + rotary) lose with it. cuBLAS's nvjet kernels load with TMA into a multi-stage
pipeline; this tries the same loads from Triton: host-side descriptors for x [M, K] and
w [N, K] (zero-filled past M) and the output, optionally with Triton's warp specialization
of the K loop. Timed as sweep_dense_gemm times GEMMs: 28 x [PDL producer -> GEMM] in one
CUDA graph, each with its own weight. Every config is first checked against fp32 torch.

python benchmarks/gpu/sweep_tma_gemm.py [--json PATH] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sweep_dense_gemm import LAYERS, chain_us  # noqa: E402

from strixlm.kernels import splitk_linear as sk  # noqa: E402
from strixlm.kernels.pdl import pdl_enabled, pdl_prologue  # noqa: E402

SHAPES = [  # name, N, K
    ("qkv", 4096, 1024),
    ("gate_up", 6144, 1024),
    ("o_proj", 1024, 2048),
    ("down", 1024, 3072),
]
ROWS = (128, 192, 256)


@triton.jit
def _tma_gemm_kernel(
    a_desc,
    b_desc,
    c_desc,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    WS: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl_prologue(PDL)
    off_n = tl.program_id(0) * BLOCK_N
    off_m = tl.program_id(1) * BLOCK_M
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def tma_linear(x: torch.Tensor, w: torch.Tensor, cfg: tuple) -> torch.Tensor:
    bm, bn, bk, warps, stages, ws = cfg
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    a = TensorDescriptor.from_tensor(x, [bm, bk])
    b = TensorDescriptor.from_tensor(w, [bn, bk])
    c = TensorDescriptor.from_tensor(out, [bm, bn])
    pdl = pdl_enabled(x)
    grid = (triton.cdiv(n, bn), triton.cdiv(m, bm))
    _tma_gemm_kernel[grid](
        a, b, c, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, WS=ws, PDL=pdl,
        num_warps=warps, num_stages=stages, launch_pdl=pdl,
    )  # fmt: skip
    return out


def configs() -> list[tuple]:
    out = []
    for bm in (64, 128):
        for bn in (64, 128, 256):
            for bk in (64, 128):
                for stages in (3, 4):
                    if (bm + bn) * bk * 2 * stages > 200 * 1024:
                        continue
                    for ws in (False, True):
                        out.append((bm, bn, bk, 8 if bm * bn >= 128 * 128 else 4, stages, ws))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    # Descriptors built in Python need no device scratch; in-kernel ones would.
    cfgs = configs()
    print(f"{len(cfgs)} TMA configs; PDL {pdl_enabled(torch.empty(1, device='cuda'))}")
    broken: set[tuple] = set()
    rows = []
    for name, n, k in SHAPES:
        torch.manual_seed(0)
        ws = [(0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)]
        for m in ROWS:
            base = chain_us(m, ws, None, False, args.reps)
            cub = chain_us(m, ws, F.linear, True, args.reps) - base
            dense_cfg = sk.plan_dense(
                m, n, k, x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False
            )
            ours = None
            if dense_cfg is not None:
                fn = lambda a, b, c=dense_cfg: sk.dense_linear(a, b, c)  # noqa: E731
                ours = chain_us(m, ws, fn, True, args.reps) - base
            best: tuple[float, tuple | None] = (float("inf"), None)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x.float(), ws[0].float())
            for cfg in cfgs:
                if cfg in broken:
                    continue
                try:
                    got = tma_linear(x, ws[0], cfg).float()
                except Exception as e:  # noqa: BLE001 - a config this triton cannot build
                    print(f"  {cfg}: does not build ({type(e).__name__}: {str(e)[:120]})")
                    broken.add(cfg)
                    continue
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                if err > 1e-2:
                    print(f"  {name} M={m} {cfg}: WRONG (rel err {err:.3g})")
                    continue
                fn = lambda a, b, c=cfg: tma_linear(a, b, c)  # noqa: E731
                t = chain_us(m, ws, fn, True, args.reps) - base
                best = min(best, (t, cfg), key=lambda r: r[0])
            tile = "" if ours is None else f"  tile GEMM {ours:6.2f}"
            print(f"{name:8s} M={m:4d} cuBLAS {cub:6.2f} us{tile}  TMA {best[0]:6.2f} us "
                  f"{best[1]}  gain vs cuBLAS {cub - best[0]:+5.2f}")  # fmt: skip
            rows.append(dict(name=name, m=m, n=n, k=k, cublas_us=cub, tile_us=ours,
                             tma_us=best[0], cfg=best[1]))  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
