"""Can a split-K GEMM with its reduction fused into the next add + RMSNorm beat cuBLAS?

python benchmarks/gpu/bench_splitk_norm.py [--json PATH]
TRITON_INTERPRET=1 python benchmarks/gpu/bench_splitk_norm.py --cpu-check

Issue 3's decode step ends its attention and MLP blocks with a GEMM whose output is only
1024 wide (o_proj: K 2048, down: K 3072), then adds the residual and normalizes. At M <= 256
cuBLAS runs those GEMMs at 6-8 us against 1.5-2.2 us of roofline: 1024 columns make few
output tiles, so few SMs work. Split-K fixes the parallelism but needs a reduction; here the
GEMM writes fp32 partials [SPLIT, M, N] and the add + RMSNorm kernel that runs next anyway
sums them first, so the split costs no extra launch. Per shape and M this prints the
CUDA-graph replay time of cuBLAS F.linear + strixlm's fused add + RMSNorm against the best
of a few split-K configs + the reducing norm, and checks the outputs agree (bf16 rounding).
An experiment for the next lever of issue 3; the engine's version of the pair is
strixlm/kernels/splitk_linear.py + the NUM_PARTS variant of strixlm/kernels/rmsnorm.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = [("o_proj", 1024, 2048), ("down", 1024, 3072)]  # name, N, K (Qwen3-0.6B)
CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, warps, stages
    (64, 64, 64, 4, 4, 4),
    (64, 64, 128, 4, 4, 3),
    (64, 128, 64, 4, 4, 4),
    (64, 64, 64, 8, 4, 4),
    (128, 64, 64, 4, 4, 4),
    (128, 128, 64, 4, 8, 3),
    (64, 128, 128, 2, 4, 3),
    (128, 64, 128, 8, 4, 3),
    (64, 32, 128, 4, 4, 4),
    (16, 64, 128, 4, 4, 3),  # small M: thinner row tiles
    (32, 64, 128, 4, 4, 3),
    (16, 32, 128, 8, 4, 3),
    (32, 32, 128, 4, 4, 4),
]
EPS = 1e-6


@triton.jit
def _splitk_partials_kernel(
    x_ptr, w_ptr, part_ptr, M, N, sxm, swn, K_PER,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # part[k_slice, M, N] = x[M, slice] @ w[N, slice].T in fp32; K_PER divides by BLOCK_K.
    pid_n, pid_m, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k0 = pid_k * K_PER
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kk in range(k0, k0 + K_PER, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * sxm + (kk + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + (kk + rk)[:, None], mask=rn[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)
    ptrs = part_ptr + (pid_k * M + rm[:, None]).to(tl.int64) * N + rn[None, :]
    tl.store(ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _reduce_add_norm_kernel(
    part_ptr, res_ptr, w_ptr, out_ptr, M, N, eps, SPLIT: tl.constexpr, BLOCK: tl.constexpr
):
    # Sum the SPLIT partials of one row in a fixed order, round to the activation dtype
    # (what F.linear would have returned), then strixlm's fused add + RMSNorm, op for op.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(SPLIT):
        acc += tl.load(part_ptr + (s * M + row) * N + cols, mask=mask, other=0.0)
    r = tl.load(res_ptr + row * N + cols, mask=mask, other=0.0)
    x = acc.to(r.dtype)
    x = (x.to(tl.float32) + r.to(tl.float32)).to(r.dtype)
    tl.store(res_ptr + row * N + cols, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / N
    xn = (xf * tl.rsqrt(var + eps)).to(r.dtype)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * N + cols, xn.to(tl.float32) * w.to(tl.float32), mask=mask)


def splitk_linear_add_norm(x, w, residual, norm_w, cfg, part=None):
    """out = RMSNorm(residual += x @ w.T) with the GEMM split over K; residual in place."""
    bm, bn, bk, split, warps, stages = cfg
    m, k = x.shape
    n = w.shape[0]
    assert k % (split * bk) == 0, (k, split, bk)
    if part is None:
        part = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, bn), triton.cdiv(m, bm), split)
    _splitk_partials_kernel[grid](
        x, w, part, m, n, x.stride(0), w.stride(0), k // split,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _reduce_add_norm_kernel[(m,)](
        part, residual, norm_w, out, m, n, EPS, SPLIT=split,
        BLOCK=triton.next_power_of_2(n), num_warps=4,
    )  # fmt: skip
    return out


def reference(x, w, residual, norm_w):
    """torch: F.linear, residual add rounded to the dtype, RMSNorm as strixlm does it."""
    y = torch.nn.functional.linear(x, w)
    h = (y.float() + residual.float()).to(x.dtype)
    hf = h.float()
    xn = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
    return (xn.float() * norm_w.float()).to(x.dtype), h


def cpu_check() -> int:
    """Under TRITON_INTERPRET=1: both kernels against the torch reference at small shapes."""
    torch.manual_seed(0)
    for cfg in ((16, 16, 16, 2, 4, 1), (16, 32, 16, 4, 4, 1)):
        m, n, k = 5, 48, 128
        x, w = torch.randn(m, k), torch.randn(n, k) / k**0.5
        res, nw = torch.randn(m, n), torch.rand(n) + 0.5
        want, want_h = reference(x, w, res, nw)
        r = res.clone()
        got = splitk_linear_add_norm(x, w, r, nw, cfg)
        err = (got - want).abs().max().item()
        print(f"{cfg}: max err {err:.2e}, residual err {(r - want_h).abs().max().item():.2e}")
        if err > 1e-4 or (r - want_h).abs().max() > 1e-5:
            return 1
    print("cpu check OK")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu-check", action="store_true")
    args = ap.parse_args()
    if args.cpu_check:
        return cpu_check()
    from graph_timing import graph_time_us

    from strixlm.kernels.rmsnorm import fused_add_rmsnorm

    torch.manual_seed(0)
    rows = []
    for name, n, k in SHAPES:
        for m in (16, 32, 64, 128, 192, 256):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
            res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            nw = (torch.rand(n, device="cuda") + 0.5).to(torch.bfloat16)
            want, _ = reference(x, w, res.clone(), nw)
            r_base = res.clone()

            def base(x=x, w=w, r=r_base, nw=nw):
                y = torch.nn.functional.linear(x, w)
                return fused_add_rmsnorm(y, r, nw, EPS)

            t_base = graph_time_us(base)
            best = (float("inf"), None, None)
            for cfg in CONFIGS:
                if k % (cfg[3] * cfg[2]):
                    continue
                part = torch.empty((cfg[3], m, n), dtype=torch.float32, device="cuda")
                got = splitk_linear_add_norm(x, w, res.clone(), nw, cfg, part)
                err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
                if err > 2e-2:
                    print(f"  {name} M={m} {cfg}: WRONG (rel err {err:.2e})")
                    continue
                r = res.clone()
                args_ = (x, w, r, nw, cfg, part)
                t = graph_time_us(lambda a=args_: splitk_linear_add_norm(*a))
                if t < best[0]:
                    best = (t, cfg, err)
            rows.append(dict(shape=name, m=m, cublas_plus_norm_us=t_base, splitk_norm_us=best[0],
                             cfg=best[1], rel_err=best[2]))  # fmt: skip
            print(f"M={m:3d} {name:7s} cuBLAS + add/RMSNorm {t_base:6.1f} us   split-K + "
                  f"reducing norm {best[0]:6.1f} us {best[1]}"
                  f" (x{t_base / best[0]:.2f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
