"""The MLP's gate_up projection with SiLU-and-mul in its epilogue: one launch instead of two.

A decode step's MLP runs gate_up (x @ [W_gate | W_up].T, 2I wide), then silu_and_mul, then
down. Here each program computes a [BLOCK_M, BLOCK_N] tile of the gate product and the
matching tile of the up product (weight rows n and I + n), rounds both to x's dtype as the
GEMM's store would, and writes silu(gate) * up with the activation kernel's own roundings
(kernels/activation.silu_mul): the same numbers as our tile GEMM followed by silu_and_mul,
without the [M, 2I] intermediate or the second launch and its kernel boundary. The loop is
splitk_linear's dense GEMM with two weight tiles per step, so a tile of width BLOCK_N here
does the work of a 2 * BLOCK_N tile there.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.env_knobs import env_int
from strixlm.kernels.gemv import MAX_ROWS as GEMV_MAX_ROWS
from strixlm.kernels.pdl import pdl_enabled
from strixlm.kernels.splitk_linear import SplitKConfig, config_for_rows, half_operands
from strixlm.kernels.tma_linear import TmaConfig, tma_descriptors, tma_ready

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.activation import silu_mul
    from strixlm.kernels.pdl import pdl_prologue

# Per measured (I, K), up to M rows: benchmarks/gpu/sweep_dense_gemm.py --gate-up-silu (H200,
# 2026-12-01), against cuBLAS gate_up + the silu_and_mul launch, per layer: 6.6-8.0 ->
# 5.6-6.7 us at M 12-64; even at 96-128; 0.2-1.4 us slower at 160-256, where cuBLAS keeps it.
# Other shapes keep gate_up and silu_and_mul apart.
_CONFIGS: dict[tuple[int, int], list[tuple[int, SplitKConfig]]] = {
    (3072, 1024): [  # Qwen3-0.6B
        (32, SplitKConfig(16, 32, 128, 1, 4, 4)),
        (64, SplitKConfig(64, 32, 128, 1, 4, 4)),
    ],
}
# Prefill-sized M (the TMA variant, sm90+): H200, sweep_prefill_gemm.py (2026-12-02), per
# layer at K 1024 / I 3072 against cuBLAS gate_up + silu_and_mul: 183.0 -> 155.1 us at M 8192,
# 92.5 -> 80.4 at 4096, 47.9 -> 39.5 at 2048 (the same bf16 outputs). Of the candidates
# below, 128 x 64 tiles (two 64-wide accumulators) with one warpgroup and 3 stages won at
# every M by 15-25%; the others lost to the two launches. STRIXLM_PREFILL_GATE_UP_SILU_ROWS
# sets the smallest M that takes it (0: never).
PREFILL_CONFIG = TmaConfig(128, 64, 64, 4, 3)
PREFILL_CONFIGS = (
    PREFILL_CONFIG,
    TmaConfig(128, 64, 64, 4, 4),
    TmaConfig(128, 128, 64, 8, 3),
    TmaConfig(128, 128, 64, 8, 4),
    TmaConfig(128, 64, 64, 8, 4),
    TmaConfig(64, 128, 64, 4, 4),
    TmaConfig(128, 128, 32, 8, 4),
)
PREFILL_MIN_ROWS = env_int("STRIXLM_PREFILL_GATE_UP_SILU_ROWS", 2048)
# (I, K) it was measured at; other shapes keep cuBLAS + silu_and_mul (at larger K the GEMM
# outweighs the activation, and cuBLAS ran 10-15% faster than our TMA loop at these rows).
PREFILL_SHAPES = {(3072, 1024)}  # Qwen3-0.6B
# STRIXLM_FUSE_GATE_UP_SILU=0 keeps the two launches (A/B runs; read at import).
ENABLED = os.environ.get("STRIXLM_FUSE_GATE_UP_SILU", "1") != "0"


def plan(
    m: int, inter: int, k: int, *, x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool
) -> SplitKConfig | None:
    """The tile config for x [m, k] against a [2 * inter, k] gate_up weight, or None: not a
    measured shape, at most GEMV_MAX_ROWS rows (the GEMV fuses the activation into down
    there), more rows than the table covers, a bias, or dtypes other than matching halves."""
    if not ENABLED or not half_operands(x_dtype, w_dtype, has_bias):
        return None
    if m <= GEMV_MAX_ROWS:
        return None
    return config_for_rows(_CONFIGS.get((inter, k), []), m, k)


def plan_tma(x: torch.Tensor, w: torch.Tensor, has_bias: bool) -> TmaConfig | None:
    """The TMA kernel's config for x [M, K] against a [2I, K] gate_up weight on sm90+, for a
    measured (I, K) whose operands suit TMA: PREFILL_CONFIG from PREFILL_MIN_ROWS rows; else
    None. (Decode rows 193-256 on this kernel measured even with cuBLAS + silu_and_mul in
    the workload: session 20, docs/benchmarks.md.)"""
    m, k = x.shape
    inter = w.shape[0] // 2
    cfg = PREFILL_CONFIG
    if PREFILL_MIN_ROWS <= 0 or m < PREFILL_MIN_ROWS or not ENABLED or not x.is_cuda:
        return None
    if (inter, k) not in PREFILL_SHAPES:
        return None
    if not half_operands(x.dtype, w.dtype, has_bias) or inter % cfg.block_n or k % cfg.block_k:
        return None
    if torch.cuda.get_device_capability(x.device)[0] < 9:
        return None
    return cfg if tma_ready(x) and tma_ready(w) else None


def gate_up_silu_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """silu(g) * u of (x @ w.T) = [g | u], each product rounded to x's dtype first, then the
    activation's roundings (kernels/activation.py)."""
    gu = (x.float() @ w.float().t()).to(x.dtype)
    g, u = gu.float().chunk(2, dim=-1)
    s = (g / (1.0 + torch.exp(-g))).to(x.dtype)
    return (s.float() * u).to(x.dtype)


if HAS_TRITON:

    @triton.jit
    def _gate_up_silu_kernel(
        x_ptr,
        w_ptr,
        out_ptr,
        M,
        INTER,
        K,
        stride_xm,
        stride_wn,
        stride_om,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < M
        col_ok = cols < INTER
        # w is [2I, K]: gate rows `cols`, up rows INTER + cols, each read as [BLOCK_K, BLOCK_N].
        g_rows = w_ptr + cols[None, :].to(tl.int64) * stride_wn
        u_rows = w_ptr + (cols + INTER)[None, :].to(tl.int64) * stride_wn
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(
                x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :],
                mask=row_ok[:, None],
                other=0.0,
            )
            bg = tl.load(g_rows + (k0 + ks)[:, None], mask=col_ok[None, :], other=0.0)
            bu = tl.load(u_rows + (k0 + ks)[:, None], mask=col_ok[None, :], other=0.0)
            acc_g = tl.dot(a, bg, acc_g)
            acc_u = tl.dot(a, bu, acc_u)
        ty = out_ptr.dtype.element_ty
        y = silu_mul(acc_g.to(ty), acc_u.to(ty))
        out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
        tl.store(out, y, mask=row_ok[:, None] & col_ok[None, :])


def gate_up_silu(x: torch.Tensor, w: torch.Tensor, cfg: SplitKConfig) -> torch.Tensor:
    """silu_and_mul(x @ w.T) for x [M, K] and w = [W_gate; W_up] [2I, K], one launch; K must
    be a multiple of cfg.block_k (the loop has no K mask)."""
    m, k = x.shape
    two_i, k2 = w.shape
    if k2 != k or two_i % 2 or x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError("x [M, K] and w [2I, K] need matching K and a contiguous last dim")
    if k % cfg.block_k:
        raise ValueError(f"K {k} is not a multiple of BLOCK_K for {cfg}")
    inter = two_i // 2
    out = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if m:
        grid = (triton.cdiv(inter, cfg.block_n), triton.cdiv(m, cfg.block_m))
        pdl = pdl_enabled(x)
        _gate_up_silu_kernel[grid](
            x,
            w,
            out,
            m,
            inter,
            k,
            x.stride(0),
            w.stride(0),
            out.stride(0),
            BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k,
            PDL=pdl,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
            launch_pdl=pdl,
        )
    return out


if HAS_TRITON:

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
        # The same epilogue over TMA-loaded tiles (Hopper's wgmma pipeline), for prefill-sized
        # M where the pointer-load loop above is far from cuBLAS. Rows past M load as zeros
        # and are not stored.
        pdl_prologue(PDL)
        off_n = tl.program_id(0) * BLOCK_N
        off_m = tl.program_id(1) * BLOCK_M
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k])
            bg = w_desc.load([off_n, k])  # [BLOCK_N, BLOCK_K] rows of W_gate
            bu = w_desc.load([INTER + off_n, k])  # the matching rows of W_up
            acc_g = tl.dot(a, bg.T, acc_g)
            acc_u = tl.dot(a, bu.T, acc_u)
        ty = out_desc.dtype
        out_desc.store([off_m, off_n], silu_mul(acc_g.to(ty), acc_u.to(ty)))


def tma_gate_up_silu(x: torch.Tensor, w: torch.Tensor, cfg) -> torch.Tensor:
    """gate_up_silu with TMA tiles (sm90+): cfg is a tma_linear.TmaConfig; I must be a
    multiple of its block_n (a gate tile never reaches into W_up) and K of its block_k; x
    and w must be tma_linear.tma_ready."""
    m, k = x.shape
    inter = w.shape[0] // 2
    if w.shape[1] != k or inter % cfg.block_n or k % cfg.block_k:
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit TMA tiles {cfg}")
    if not (tma_ready(x) and tma_ready(w)):
        raise ValueError("x and w need 16-byte aligned bases and row strides")
    out = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    xd, wd, od = tma_descriptors(x, w, out, cfg)
    pdl = pdl_enabled(x)
    grid = (inter // cfg.block_n, triton.cdiv(m, cfg.block_m))
    _tma_gate_up_silu_kernel[grid](
        xd, wd, od, inter, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        PDL=pdl, num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out
