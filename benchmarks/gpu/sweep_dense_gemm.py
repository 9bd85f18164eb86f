"""Decode GEMMs as a step runs them: does our Triton GEMM (kernels/splitk_linear.py without a
split, launched with PDL) beat cuBLAS once the kernel boundary before it counts?

cuBLAS kernels do not wait on a programmatic edge (probe_cublas_pdl.py), so every Triton ->
cuBLAS boundary of a decode step pays the producer's full drain and a launch; a Triton GEMM
with PDL starts while its producer drains. Per shape (M rows, N, K of Qwen3-0.6B), a CUDA
graph replays 28 x [producer -> GEMM], the producer a PDL Triton kernel that reads the last
GEMM's output (as RMSNorm / SiLU / the q/k launch do), each GEMM with its own weight (so
weights come from HBM, as in a step). Reported per GEMM: (chain - producer-only chain) / 28
for cuBLAS and for each tile config of ours, the best config, and the gain.

python benchmarks/gpu/sweep_dense_gemm.py [--json PATH] [--quick] [--gate-up-silu]

--gate-up-silu: instead, gate_up + silu_and_mul as the engine ran them before (cuBLAS, then
the activation kernel) against the fused kernel (kernels/gate_up_silu.py) over its configs.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import gate_up_silu as gus  # noqa: E402
from strixlm.kernels import splitk_linear as sk  # noqa: E402
from strixlm.kernels.activation import silu_and_mul  # noqa: E402
from strixlm.kernels.pdl import pdl_enabled, pdl_prologue  # noqa: E402

LAYERS = 28
SHAPES = [  # name, N, K, rows
    ("qkv", 4096, 1024, [12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256]),
    ("gate_up", 6144, 1024, [12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256]),
    ("o_proj", 1024, 2048, [160, 192, 256]),
    ("down", 1024, 3072, [160, 192, 256]),
]


def configs(quick: bool) -> list[sk.SplitKConfig]:
    out = []
    for bm in (16, 32, 64, 128):
        for bn in (32, 64, 128, 256):
            for bk in (64, 128):
                for stages in (3, 4) if not quick else (3,):
                    smem = (bm + bn) * bk * 2 * stages
                    if smem > 180 * 1024 or bm * bn > 128 * 256:
                        continue
                    warps = 8 if bm * bn >= 128 * 128 else 4
                    out.append(sk.SplitKConfig(bm, bn, bk, 1, warps, stages))
    return out


@triton.jit
def _producer(src_ptr, dst_ptr, M, N_SRC, K, BLOCK: tl.constexpr, PDL: tl.constexpr):
    # dst[m, :K] = src[m, :min(N_SRC, K)] (zeros past it): one row per program, like RMSNorm.
    pdl_prologue(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(src_ptr + row * N_SRC + cols, mask=(cols < N_SRC) & (cols < K), other=0.0)
    tl.store(dst_ptr + row * K + cols, v * 0.5, mask=cols < K)


def chain_us(
    m: int, ws: list[torch.Tensor], gemm, with_gemm: bool, reps: int, n_out: int | None = None
) -> float:
    """Per-layer replay time of LAYERS x [producer -> gemm] (or the producers alone);
    n_out: the width of gemm's output when it is not the weight's row count."""
    n, k = ws[0].shape
    n = n_out or n
    x0 = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    xin = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    block = triton.next_power_of_2(k)
    pdl = pdl_enabled(x0)

    def body() -> None:
        h = x0
        for w in ws:
            _producer[(m,)](h, xin, m, n, k, BLOCK=block, PDL=pdl, launch_pdl=pdl)
            h = gemm(xin, w) if with_gemm else h

    return graph_time_us(body, reps) / LAYERS


def max_rel_err(m: int, n: int, k: int, cfg: sk.SplitKConfig) -> float:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16)
    ref = F.linear(x.float(), w.float())
    got = sk.dense_linear(x, w, cfg).float()
    return ((got - ref).abs().max() / ref.abs().max()).item()


def silu_configs() -> list[sk.SplitKConfig]:
    out = []
    for bm in (16, 32, 64, 128):
        for bn in (16, 32, 64, 128):
            for bk, stages in ((64, 4), (128, 3), (128, 4)):
                if (bm + 2 * bn) * bk * 2 * stages > 180 * 1024 or bm * bn > 128 * 128:
                    continue
                out.append(sk.SplitKConfig(bm, bn, bk, 1, 8 if bm * bn >= 128 * 64 else 4, stages))
    return out


def sweep_gate_up_silu(reps: int) -> list[dict]:
    inter, k = 3072, 1024
    torch.manual_seed(0)
    ws = [
        (0.02 * torch.randn(2 * inter, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)
    ]
    cfgs = silu_configs()
    print(f"gate_up + SiLU: {len(cfgs)} fused configs")
    rows = []
    for m in (12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256):
        base = chain_us(m, ws, None, False, reps, inter)
        two = chain_us(m, ws, lambda a, b: silu_and_mul(F.linear(a, b)), True, reps, inter) - base
        best: tuple[float, sk.SplitKConfig | None] = (float("inf"), None)
        for cfg in cfgs:
            if cfg.block_m > max(16, triton.next_power_of_2(m)):
                continue
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            got = gus.gate_up_silu(x, ws[0], cfg).float()
            ref = gus.gate_up_silu_ref(x, ws[0]).float()
            if ((got - ref).abs().max() / ref.abs().max()).item() > 2e-2:
                print(f"  M={m} {cfg}: WRONG")
                continue
            t = chain_us(m, ws, lambda a, b, c=cfg: gus.gate_up_silu(a, b, c), True, reps, inter)
            best = min(best, (t - base, cfg), key=lambda b: b[0])
        c = best[1]
        tag = (
            "-"
            if c is None
            else f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
        )
        planned = gus.plan(
            m, inter, k, x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False
        )
        print(f"gate_up+silu M={m:4d} cuBLAS+SiLU {two:6.2f} us  fused {best[0]:6.2f} us ({tag})  "
              f"gain {two - best[0]:+5.2f} us  engine table {planned}")  # fmt: skip
        rows.append(dict(name="gate_up_silu", m=m, two_launch_us=two, fused_us=best[0],
                         cfg=None if c is None else c.__dict__))  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer configs and shapes")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--gate-up-silu", action="store_true")
    args = ap.parse_args()
    if args.gate_up_silu:
        rows = sweep_gate_up_silu(args.reps)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0
    cfgs = configs(args.quick)
    print(
        f"{len(cfgs)} configs; PDL {'on' if pdl_enabled(torch.empty(1, device='cuda')) else 'off'}"
    )
    rows = []
    for name, n, k, ms in SHAPES:
        torch.manual_seed(0)
        ws = [(0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)]
        for m in ms[::3] if args.quick else ms:
            base = chain_us(m, ws, None, False, args.reps)
            cub = chain_us(m, ws, F.linear, True, args.reps) - base
            best: tuple[float, sk.SplitKConfig | None] = (float("inf"), None)
            for cfg in cfgs:
                if cfg.block_m > max(16, triton.next_power_of_2(m)) or k % cfg.block_k:
                    continue
                if max_rel_err(m, n, k, cfg) > 1e-2:
                    print(f"  {name} M={m} {cfg}: WRONG")
                    continue
                t = chain_us(m, ws, lambda a, b, c=cfg: sk.dense_linear(a, b, c), True, args.reps)
                best = min(best, (t - base, cfg), key=lambda b: b[0])
            c = best[1]
            tag = (
                f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}" if c else "-"
            )
            print(f"{name:8s} M={m:4d} cuBLAS {cub:6.2f} us  triton {best[0]:6.2f} us ({tag})  "
                  f"gain {cub - best[0]:+5.2f} us  producer {base:5.2f}")  # fmt: skip
            rows.append(
                dict(name=name, m=m, n=n, k=k, cublas_us=cub, triton_us=best[0], producer_us=base,
                     cfg=None if c is None else c.__dict__)
            )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
