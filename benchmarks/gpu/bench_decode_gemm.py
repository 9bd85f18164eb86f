"""Decode GEMMs at batch 64-256 (Qwen3-0.6B shapes): how far cuBLAS is from the roofline, and
whether a weight layout or a split-K Triton GEMM does better. An experiment for the next
lever of issue 3 (the profile puts the four GEMMs of a layer at ~28 us for ~10.5 us of
roofline at batch 256); nothing in the engine uses the Triton kernel here.

python benchmarks/gpu/bench_decode_gemm.py [--json PATH]

Per shape (M tokens, N, K), CUDA-graph replay time of:
  linear   F.linear(x, W) with W [N, K] (what the engine runs: cuBLAS, TN)
  mm_nn    x @ Wt with Wt [K, N] stored transposed (cuBLAS may pick other kernels)
  triton   a Triton GEMM over a few tile / split-K configs (best one shown)
and the roofline max(FLOPs / 800 TFLOPS, bytes / 3.8 TB/s).
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
from graph_timing import graph_time_us  # noqa: E402

SHAPES = [  # name, N, K (Qwen3-0.6B: hidden 1024, 16x128 q, 8x128 kv, intermediate 3072)
    ("qkv", 4096, 1024),
    ("o_proj", 1024, 2048),
    ("gate_up", 6144, 1024),
    ("down", 1024, 3072),
]
CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, warps, stages
    (64, 64, 64, 1, 4, 4),
    (64, 128, 64, 1, 4, 4),
    (128, 64, 64, 1, 4, 4),
    (64, 64, 128, 2, 4, 3),
    (64, 128, 64, 2, 4, 4),
    (64, 64, 64, 4, 4, 4),
    (128, 128, 64, 2, 8, 3),
]


@triton.jit
def _gemm_kernel(
    x_ptr, w_ptr, out_ptr, M, N, K, sxm, swn, som,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
):  # fmt: skip
    # out[M, N] (+)= x[M, K] @ w[N, K].T over this program's K slice; fp32 atomics when split.
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k_per = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    k0 = pid_k * k_per
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kk in range(k0, tl.minimum(k0 + k_per, K), BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * sxm + (kk + rk)[None, :], mask=rm[:, None] < M)
        b = tl.load(w_ptr + rn[None, :] * swn + (kk + rk)[:, None], mask=rn[None, :] < N)
        acc = tl.dot(a, b, acc)
    ptrs = out_ptr + rm[:, None] * som + rn[None, :]
    ok = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT_K == 1:
        tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=ok)
    else:
        tl.atomic_add(ptrs, acc, mask=ok)


def triton_gemm(x: torch.Tensor, w: torch.Tensor, cfg, out32: torch.Tensor | None = None):
    bm, bn, bk, sk, warps, stages = cfg
    m, k = x.shape
    n = w.shape[0]
    if sk == 1:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    else:
        out = out32 if out32 is not None else torch.empty((m, n), device=x.device)
        out.zero_()
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), sk)
    _gemm_kernel[grid](
        x, w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out if sk == 1 else out.to(x.dtype)


def inductor_autotune(m: int) -> list[dict]:
    """torch.compile's max-autotune at batch m: Inductor times its Triton GEMM templates
    against cuBLAS and keeps the faster one; its AUTOTUNE log lines show every candidate.
    If no template beats cuBLAS here, a fused Triton GEMM is not the lever either."""
    import torch._inductor.config as icfg

    icfg.max_autotune_gemm_backends = "ATEN,TRITON"
    rows = []
    for name, n, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16)
        f = torch.compile(
            torch.nn.functional.linear, mode="max-autotune-no-cudagraphs", dynamic=False
        )
        f(x, w)
        t_ind = graph_time_us(lambda: f(x, w))  # noqa: B023
        t_lin = graph_time_us(lambda: torch.nn.functional.linear(x, w))  # noqa: B023
        print(f"M={m:3d} {name:8s} inductor max-autotune {t_ind:6.1f} us  cuBLAS {t_lin:6.1f}")
        rows.append(dict(shape=name, m=m, inductor_us=t_ind, linear_us=t_lin))
    return rows


def tunableop(ms: tuple[int, ...]) -> list[dict]:
    """PyTorch TunableOp: time every cuBLASLt algorithm its heuristic offers for each shape
    (eagerly, once) and keep the fastest; then graph-replay the tuned F.linear against the
    default pick. If tuning wins, the engine can tune its decode shapes before capture."""
    import torch.cuda.tunable as tunable

    rows = []
    for m in ms:
        for name, n, k in SHAPES:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = (0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16)
            t_def = graph_time_us(lambda: torch.nn.functional.linear(x, w))  # noqa: B023
            tunable.enable(True)
            tunable.tuning_enable(True)
            tunable.set_max_tuning_duration(200)
            torch.nn.functional.linear(x, w)  # tunes this shape
            torch.cuda.synchronize()
            tunable.tuning_enable(False)
            t_tuned = graph_time_us(lambda: torch.nn.functional.linear(x, w))  # noqa: B023
            tunable.enable(False)
            print(f"M={m:3d} {name:8s} cuBLAS default {t_def:6.1f} us  TunableOp {t_tuned:6.1f}")
            rows.append(dict(shape=name, m=m, default_us=t_def, tunableop_us=t_tuned))
    try:
        for item in tunable.get_results():
            print("  tuned:", str(item)[:160])
    except Exception as e:  # the results API differs across torch versions
        print("  (tuned results not listed:", e, ")")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--inductor", type=int, default=0, help="also autotune Inductor's GEMMs at this M"
    )
    ap.add_argument("--tunableop", action="store_true", help="only the TunableOp comparison")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    if args.tunableop:
        rows = tunableop((64, 128, 256))
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0
    if args.inductor:
        rows += inductor_autotune(args.inductor)
    for m in (64, 128, 256):
        for name, n, k in SHAPES:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = (0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16)
            wt = w.t().contiguous()
            ref = torch.nn.functional.linear(x, w)
            t_lin = graph_time_us(lambda: torch.nn.functional.linear(x, w))  # noqa: B023
            t_nn = graph_time_us(lambda: x @ wt)  # noqa: B023
            # cuBLASLt's own heuristics (torch's default routes bf16 through cuBLAS).
            torch.backends.cuda.preferred_blas_library("cublaslt")
            t_lt = graph_time_us(lambda: torch.nn.functional.linear(x, w))  # noqa: B023
            torch.backends.cuda.preferred_blas_library("cublas")
            out32 = torch.empty((m, n), device="cuda")
            best = (float("inf"), None)
            for cfg in CONFIGS:
                got = triton_gemm(x, w, cfg, out32)
                err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                if err > 2e-2:
                    print(f"  {name} M={m} {cfg}: WRONG (rel err {err:.2e})")
                    continue
                t = graph_time_us(lambda: triton_gemm(x, w, cfg, out32))  # noqa: B023
                best = min(best, (t, cfg), key=lambda b: b[0])
            roof = max(2 * m * n * k / 800e12, (n * k + m * k + m * n) * 2 / 3.8e12) * 1e6
            row = dict(
                shape=name, m=m, n=n, k=k, linear_us=t_lin, mm_nn_us=t_nn, cublaslt_us=t_lt,
                triton_us=best[0], triton_cfg=best[1], roofline_us=roof,
            )  # fmt: skip
            rows.append(row)
            print(
                f"M={m:3d} {name:8s} linear {t_lin:6.1f} us  nn {t_nn:6.1f}  lt {t_lt:6.1f}"
                f"  triton {best[0]:6.1f} {best[1]}  roofline {roof:5.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
