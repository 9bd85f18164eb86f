"""Decode GEMM whose tiles arrive by TMA (tensor descriptors), for the shapes where it beat
cuBLAS once the kernel boundary before it counts.

At 129-256 rows cuBLAS still ran qkv: its nvjet kernels cannot start while their producer
drains (they ignore programmatic edges, probe_cublas_pdl.py), and our pointer-load tile GEMM
(splitk_linear.dense_linear) was slower there. Loading x and w tiles with TMA into Triton's
multi-stage pipeline wins at some row counts. H200, sweep_tma_gemm.py (28 x [PDL producer ->
GEMM] per CUDA graph, two calls, 2026-12-01), per layer:
- qkv [M, 1024] @ [4096, 1024].T: cuBLAS -> TMA 6.67-6.86 -> 6.36-6.41 us at M 192, 7.09 ->
  6.36 at 240, 7.24-7.33 -> 6.02-6.19 at 256; cuBLAS was faster at 136-160 and 208-224 (by
  0.2-1.0 us) and they were even at 176.
- gate_up (6144 columns) at M 96-128: 7.03-7.29 -> 6.50-6.81 us; cuBLAS won at 72 (6.38 vs
  7.55) and above 128.
- gate_up with SiLU-and-mul in the epilogue (tma_gate_up_silu) against gate_up then the
  activation kernel: 8.19 -> 7.49 us at M 96, 7.87 -> 7.28 at 128; it lost at 72 to cuBLAS +
  the activation, and at 136-192 and 256.
It lost on down; o_proj keeps the pointer-load kernel, which was faster. The tables below
keep only those wins; the decode graphs run multiples of 8 rows.

Descriptors are built on the host per call (inside a CUDA graph, once at capture): x and w
need 16-byte aligned bases and row strides, which plan_for checks. Rows past M read as zeros
and are not stored. STRIXLM_TMA_GEMM=0 keeps cuBLAS there (A/B runs; read at import).
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

    from strixlm.kernels.activation import silu_mul
    from strixlm.kernels.pdl import pdl_prologue


@dataclass(frozen=True)
class TmaConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# (N, K) -> [(from rows, to rows, config)]: the sweep's winners on the H200 (see above).
_TABLE: dict[tuple[int, int], list[tuple[int, int, TmaConfig]]] = {
    (4096, 1024): [  # Qwen3-0.6B qkv
        (185, 192, TmaConfig(64, 128, 128, 4, 4)),
        (233, 256, TmaConfig(128, 64, 128, 4, 4)),
    ],
    # Qwen3-0.6B gate_up; the Llama MLP takes tma_gate_up_silu at these rows first, so this
    # serves its STRIXLM_FUSE_GATE_UP_SILU=0 runs and other [gate | up] callers.
    (6144, 1024): [(89, 128, TmaConfig(128, 64, 128, 4, 4))],
}
# (I, K) of a [gate | up] weight [2I, K] -> [(from rows, to rows, config)] for the gate_up
# projection with SiLU-and-mul in its epilogue (tma_gate_up_silu).
_GATE_UP_SILU_TABLE: dict[tuple[int, int], list[tuple[int, int, TmaConfig]]] = {
    (3072, 1024): [(89, 128, TmaConfig(64, 64, 128, 4, 4))],  # Qwen3-0.6B
}
# The first, coarser tables (qkv at every row count from 129, gate_up from 65, no fused
# SiLU), kept for one A/B against the tables above: STRIXLM_TMA_TABLE=wide (read at import).
if os.environ.get("STRIXLM_TMA_TABLE") == "wide":
    _TABLE = {
        (4096, 1024): [
            (129, 192, TmaConfig(64, 128, 128, 4, 4)),
            (193, 256, TmaConfig(128, 64, 128, 4, 4)),
        ],
        (6144, 1024): [(65, 128, TmaConfig(128, 64, 128, 4, 4))],
    }
    _GATE_UP_SILU_TABLE = {}
ENABLED = os.environ.get("STRIXLM_TMA_GEMM", "1") != "0"


def _lookup(table: dict, key: tuple[int, int], m: int, k: int) -> TmaConfig | None:
    for lo, hi, cfg in table.get(key, []):
        if lo <= m <= hi:
            return cfg if k % cfg.block_k == 0 else None
    return None


def plan(
    m: int, n: int, k: int, *, x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool
) -> TmaConfig | None:
    """The measured config for an [m, k] @ [n, k].T product, or None (another path)."""
    if not ENABLED or not half_operands(x_dtype, w_dtype, has_bias):
        return None
    return _lookup(_TABLE, (n, k), m, k)


def plan_gate_up_silu(
    m: int, inter: int, k: int, *, x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool
) -> TmaConfig | None:
    """The measured config for silu_and_mul(x [m, k] @ w [2 * inter, k].T), or None."""
    if not ENABLED or not half_operands(x_dtype, w_dtype, has_bias):
        return None
    return _lookup(_GATE_UP_SILU_TABLE, (inter, k), m, k)


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

    @triton.jit
    def _tma_gate_up_silu_kernel(
        x_desc,
        w_desc,
        out_desc,
        INTER,
        K,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
    ):
        # The gate tile (w rows n) and the matching up tile (rows INTER + n); both products
        # rounded as the GEMM's store would round them, then the activation's roundings.
        pdl_prologue(PDL)
        off_n = tl.program_id(0) * BLOCK_N
        off_m = tl.program_id(1) * BLOCK_M
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k])
            acc_g = tl.dot(a, w_desc.load([off_n, k]).T, acc_g)
            acc_u = tl.dot(a, w_desc.load([INTER + off_n, k]).T, acc_u)
        ty = out_desc.dtype
        out_desc.store([off_m, off_n], silu_mul(acc_g.to(ty), acc_u.to(ty)))


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
    xd = TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k])
    wd = TensorDescriptor.from_tensor(w, [cfg.block_n, cfg.block_k])
    od = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n])
    pdl = pdl_enabled(x)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m))
    _tma_linear_kernel[grid](
        xd, wd, od, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out


def tma_gate_up_silu(x: torch.Tensor, w: torch.Tensor, cfg: TmaConfig) -> torch.Tensor:
    """silu_and_mul(x @ w.T) for x [M, K] and w = [W_gate; W_up] [2I, K] in one launch (the
    numbers of tma_linear followed by silu_and_mul). I must be a multiple of cfg.block_n (a
    tile must not reach into the up rows) and K of cfg.block_k; x and w must be tma_ready."""
    m, k = x.shape
    two_i = w.shape[0]
    inter = two_i // 2
    if w.shape[1] != k or two_i % 2 or inter % cfg.block_n or k % cfg.block_k:
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit TMA tiles {cfg}")
    if not (tma_ready(x) and tma_ready(w)):
        raise ValueError("x and w need 16-byte aligned, row-contiguous storage for TMA")
    out = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    xd = TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k])
    wd = TensorDescriptor.from_tensor(w, [cfg.block_n, cfg.block_k])
    od = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n])
    pdl = pdl_enabled(x)
    grid = (inter // cfg.block_n, triton.cdiv(m, cfg.block_m))
    _tma_gate_up_silu_kernel[grid](
        xd, wd, od, inter, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        PDL=pdl, num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out
