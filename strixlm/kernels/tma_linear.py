"""Decode GEMM whose tiles arrive by TMA (tensor descriptors), for the shapes where it beat
cuBLAS once the kernel boundary before it counts.

At 129-256 rows cuBLAS still ran qkv: its nvjet kernels cannot start while their producer
drains (they ignore programmatic edges, probe_cublas_pdl.py), and our pointer-load tile GEMM
(splitk_linear.dense_linear) was slower there. Loading x and w tiles with TMA into Triton's
multi-stage pipeline is faster at some row counts. H200, 2026-12-01:
- sweep_tma_gemm.py (28 x [PDL producer -> GEMM] per CUDA graph), per layer: qkv
  [M, 1024] @ [4096, 1024].T cuBLAS -> TMA 6.67-6.86 -> 6.36-6.41 us at M 192, 7.24-7.33 ->
  6.02-6.19 at 256, but cuBLAS was faster at 136-160 and 208-224; gate_up (6144 columns)
  7.03-7.29 -> 6.50-6.81 at M 96-128, cuBLAS faster at 72. TMA lost on down; o_proj keeps
  the pointer-load kernel.
- The standard workload decides the table: the tables below (qkv at 129-256 rows, gate_up
  at 65-128) ran +0.35% against cuBLAS there (three alternating pairs), and +0.19% against
  tables cut to the sweep's per-row wins (qkv at 192 and 233-256 only, plus a gate_up with
  SiLU-and-mul in its TMA epilogue at 89-128; two pairs). The row-by-row sweep, with a
  synthetic producer, does not predict the step well at this grain.

Descriptors are built on the host per call (inside a CUDA graph, once at capture): x and w
need 16-byte aligned bases and row strides (tma_ready; Linear checks it before it plans).
Rows past M read as zeros and are not stored. STRIXLM_TMA_GEMM=0 keeps cuBLAS there (A/B
runs; read at import).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.pdl import pdl_enabled
from strixlm.kernels.splitk_linear import half_operands

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from strixlm.kernels.pdl import pdl_prologue


@dataclass(frozen=True)
class TmaConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# (N, K) -> [(from rows, to rows, config)]: measured on the H200 (see above).
_TABLE: dict[tuple[int, int], list[tuple[int, int, TmaConfig]]] = {
    (4096, 1024): [  # Qwen3-0.6B qkv
        (129, 192, TmaConfig(64, 128, 128, 4, 4)),
        (193, 256, TmaConfig(128, 64, 128, 4, 4)),
    ],
    (6144, 1024): [(65, 128, TmaConfig(128, 64, 128, 4, 4))],  # Qwen3-0.6B gate_up
}
ENABLED = os.environ.get("STRIXLM_TMA_GEMM", "1") != "0"


def plan(
    m: int, n: int, k: int, *, x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool
) -> TmaConfig | None:
    """The measured config for an [m, k] @ [n, k].T product, or None (another path)."""
    if not ENABLED or not half_operands(x_dtype, w_dtype, has_bias):
        return None
    for lo, hi, cfg in _TABLE.get((n, k), []):
        if lo <= m <= hi:
            return cfg if k % cfg.block_k == 0 else None
    return None


def tma_ready(t: torch.Tensor) -> bool:
    """A 2-D tensor TMA can describe: contiguous rows, 16-byte aligned base and row stride."""
    e = t.element_size()
    return (
        t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * e) % 16 == 0
    )


def tma_linear_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T with fp32 accumulation, rounded once to x's dtype."""
    return (x.float() @ w.float().t()).to(x.dtype)


if HAS_TRITON:

    @triton.jit
    def _tma_linear_kernel(
        x_desc,
        w_desc,
        out_desc,
        K,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        off_n = tl.program_id(0) * BLOCK_N
        off_m = tl.program_id(1) * BLOCK_M
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k])
            b = w_desc.load([off_n, k])  # [BLOCK_N, BLOCK_K] of w [N, K]
            acc = tl.dot(a, b.T, acc)
        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))


def tma_descriptors(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, cfg: TmaConfig) -> tuple:
    """Descriptors of an x [M, K] @ w [N, K].T product's tiles under cfg: x, w and out boxes
    (shared with gate_up_silu's TMA kernel)."""
    return (
        TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k]),
        TensorDescriptor.from_tensor(w, [cfg.block_n, cfg.block_k]),
        TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n]),
    )


def tma_linear(x: torch.Tensor, w: torch.Tensor, cfg: TmaConfig) -> torch.Tensor:
    """x [M, K] @ w [N, K].T in x's dtype (fp32 accumulation, one rounding at the store).
    K must be a multiple of cfg.block_k; x and w must be tma_ready."""
    m, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k or k % cfg.block_k or not (tma_ready(x) and tma_ready(w)):
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit TMA tiles {cfg}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    xd, wd, od = tma_descriptors(x, w, out, cfg)
    pdl = pdl_enabled(x)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m))
    _tma_linear_kernel[grid](
        xd, wd, od, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out
