"""Prefill-sized MLP GEMMs: cuBLAS + the SiLU launch against gate_up with SiLU in a TMA epilogue.

A budget-sized prefill step (8192 tokens) spends ~1 ms of its ~17 on silu_and_mul alone (it
reads the [M, 2I] gate_up output and writes [M, I]). gate_up_silu.tma_gate_up_silu computes
the same activation in the GEMM's epilogue. Per layer, in CUDA graphs of 28 calls, at the
Qwen3-0.6B shape (K 1024, I 3072), bf16: cuBLAS gate_up alone, cuBLAS + silu_and_mul, and each
PREFILL_CONFIGS config (checked against the two-launch result first), plus our plain TMA GEMM
on qkv (N 4096) against cuBLAS for reference. (qkv with the q/k norm + rotary + K/V write in
its epilogue was timed here too, x0.82-0.88 against the two launches on the H200, and removed
in 3c70ae4.)

    python benchmarks/gpu/sweep_prefill_gemm.py [--rows 8192 4096 2048] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import graph_timing  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from strixlm.kernels import gate_up_silu as gus  # noqa: E402
from strixlm.kernels import tma_linear as tl_mod  # noqa: E402
from strixlm.kernels.activation import silu_and_mul  # noqa: E402

LAYERS = 28


def graph_us(fn) -> float:
    """Per call, from a CUDA graph of LAYERS calls (graph_timing.graph_time_us)."""
    return graph_timing.graph_time_us(fn, reps=10, calls=LAYERS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[8192, 4096, 2048])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    k, inter = 1024, 3072
    w_gu = torch.randn(2 * inter, k, device=dev, dtype=dt) * 0.03
    w_qkv = torch.randn(4096, k, device=dev, dtype=dt) * 0.03
    out = []
    for m in args.rows:
        x = torch.randn(m, k, device=dev, dtype=dt)
        ref = silu_and_mul(F.linear(x, w_gu))
        flops = 2 * m * k * 2 * inter
        res = {"m": m}
        res["cublas_us"] = graph_us(lambda x=x: F.linear(x, w_gu))
        res["cublas_silu_us"] = graph_us(lambda x=x: silu_and_mul(F.linear(x, w_gu)))
        print(
            f"M {m}: gate_up cuBLAS {res['cublas_us']:.1f} us ({flops / res['cublas_us'] / 1e6:.0f}"
            f" TFLOP/s), + silu_and_mul {res['cublas_silu_us']:.1f} us",
            flush=True,
        )
        fused = []
        for cfg in gus.PREFILL_CONFIGS:
            try:
                got = gus.tma_gate_up_silu(x, w_gu, cfg)
                err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
                t = graph_us(lambda x=x, cfg=cfg: gus.tma_gate_up_silu(x, w_gu, cfg))
            except Exception as e:  # out of resources etc.
                print(f"    {cfg}: {type(e).__name__}: {str(e)[:100]}")
                continue
            fused.append({"cfg": str(cfg), "us": t, "rel_err": err})
            print(
                f"    fused {cfg}: {t:.1f} us ({flops / t / 1e6:.0f} TFLOP/s) x"
                f"{res['cublas_silu_us'] / t:.3f} vs two launches, rel err {err:.2e}",
                flush=True,
            )
        res["fused"] = fused
        qflops = 2 * m * k * 4096
        res["qkv_cublas_us"] = graph_us(lambda x=x: F.linear(x, w_qkv))
        qkv = []
        for cfg in (
            tl_mod.TmaConfig(128, 128, 64, 4, 4),
            tl_mod.TmaConfig(128, 256, 64, 8, 3),
            tl_mod.TmaConfig(128, 128, 64, 8, 4),
        ):
            try:
                t = graph_us(lambda x=x, cfg=cfg: tl_mod.tma_linear(x, w_qkv, cfg))
            except Exception as e:
                print(f"    qkv {cfg}: {type(e).__name__}: {str(e)[:100]}")
                continue
            qkv.append({"cfg": str(cfg), "us": t})
        res["qkv_tma"] = qkv
        best = min((q["us"] for q in qkv), default=float("nan"))
        print(
            f"  qkv cuBLAS {res['qkv_cublas_us']:.1f} us ({qflops / res['qkv_cublas_us'] / 1e6:.0f}"
            f" TFLOP/s), our TMA GEMM best {best:.1f} us",
            flush=True,
        )
        out.append(res)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
