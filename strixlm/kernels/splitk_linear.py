"""Split-K GEMM for narrow outputs at mid-size batches; the reduction is left to the consumer.

At 8 < M <= 128 rows the decode step's o_proj and down_proj (1024 output columns on
Qwen3-0.6B) make too few output tiles for cuBLAS to fill the H200: 6-10 us against 2 us of
roofline. Splitting K over SPLIT programs per tile restores the parallelism, but the slices
must be summed. Here each slice writes its fp32 product to partials [SPLIT, M, N] and the
add + RMSNorm that follows those projections anyway (strixlm/kernels/rmsnorm.py) sums them
in a fixed order before its residual add, so the split costs no extra launch.
benchmarks/gpu/bench_splitk_norm.py measured the pair against cuBLAS + fused add/RMSNorm
(CUDA-graph replay): o_proj K 2048 at M 64 / 128: 7.6 -> 6.6 / 8.5 -> 7.3 us; down K 3072:
9.3 -> 7.0 / 9.6 -> 8.1 us; no gain at M 256. The configs below are those winners.

STRIXLM_SPLITK_MAX_ROWS (read at import; default 128, 0 turns split-K off) caps M. The
partials travel as SplitKPartials (strixlm/layers/splitk_partials.py): Linear.forward_partials
hands them out, RMSNorm with a residual takes them (see strixlm/models/llama.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.env_knobs import env_int
from strixlm.kernels.gemv import MAX_ROWS as GEMV_MAX_ROWS
from strixlm.kernels.pdl import pdl_enabled
from strixlm.layers.splitk_partials import SplitKPartials

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.pdl import pdl_prologue

# Wider outputs already make enough tiles; only N = 1024 was measured, 2048 is a guess.
MAX_N = 2048
_HALF = (torch.bfloat16, torch.float16)


def _env_max_rows() -> int:
    return max(0, env_int("STRIXLM_SPLITK_MAX_ROWS", 128))


_MAX_ROWS = _env_max_rows()


def splitk_max_rows() -> int:
    """Largest M that takes split-K (0: never); fixed at import, so a captured CUDA graph
    and a later eager call agree."""
    return _MAX_ROWS


@dataclass(frozen=True)
class SplitKConfig:
    block_m: int
    block_n: int
    block_k: int
    split: int
    num_warps: int
    num_stages: int


# The bench's winners on the H200 (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, warps, stages).
_CFG_WIDE = SplitKConfig(64, 64, 128, 4, 4, 3)  # o_proj M 64 and 128, down M 128
_CFG_NARROW = SplitKConfig(64, 32, 128, 4, 4, 4)  # down (K 3072) at M 64: more, thinner tiles


def pick_config(m: int, n: int, k: int) -> SplitKConfig | None:
    """The tile config for an [m, k] @ [n, k].T product, or None where split-K does not
    apply: wide outputs, or K not a multiple of SPLIT * BLOCK_K (the kernel has no K mask)."""
    if m <= 0 or n > MAX_N or n * k >= 2**31:  # the kernel's x / w offsets are int32
        return None
    cfg = _CFG_NARROW if m <= 64 and k >= 3072 else _CFG_WIDE
    if k % (cfg.split * cfg.block_k):
        return None
    return cfg


def half_operands(x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool) -> bool:
    """What every tile kernel here (and gate_up_silu) assumes: a 16-bit weight, x of the
    same dtype, no bias."""
    return not has_bias and w_dtype in _HALF and x_dtype == w_dtype


def config_for_rows(table: list[tuple[int, SplitKConfig]], m: int, k: int) -> SplitKConfig | None:
    """The first config of a measured (max rows, config) table that covers m rows, if K
    fits its tiles (the kernels have no K mask)."""
    for max_m, cfg in table:
        if m <= max_m:
            return cfg if k % (cfg.split * cfg.block_k) == 0 else None
    return None


def plan(
    m: int,
    n: int,
    k: int,
    *,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype,
    has_bias: bool,
    max_rows: int | None = None,
) -> SplitKConfig | None:
    """Whether (and how) a linear layer runs split-K, on everything but the device and
    layout (Linear checks those): half-precision weight and matching x, no bias (the
    reduction does not add one), GEMV_MAX_ROWS < m <= max_rows, an applicable config."""
    max_rows = splitk_max_rows() if max_rows is None else max_rows
    if not half_operands(x_dtype, w_dtype, has_bias):
        return None
    if not GEMV_MAX_ROWS < m <= max_rows:
        return None
    return pick_config(m, n, k)


# Dense (split 1) configs where the kernel beat cuBLAS behind a PDL producer, per measured
# (N, K) and up to M rows: benchmarks/gpu/sweep_dense_gemm.py, H200, 2026-12-01 (per GEMM,
# cuBLAS -> ours): qkv 6.1-6.3 -> 4.7-5.1 us at M 16-128; gate_up 6.8-7.1 -> 5.6-6.1 at
# M 12-64; o_proj 7.0-7.2 -> 6.3-6.4 at M 160-256 (at M <= 128 it runs split-K). Elsewhere
# cuBLAS was as fast or faster (qkv above 128 rows, gate_up above 64, down everywhere), and
# other shapes were not measured, so they keep cuBLAS.
_DENSE: dict[tuple[int, int], list[tuple[int, SplitKConfig]]] = {
    (4096, 1024): [  # Qwen3-0.6B qkv
        (16, SplitKConfig(16, 32, 128, 1, 4, 4)),
        (32, SplitKConfig(32, 32, 128, 1, 4, 4)),
        (64, SplitKConfig(64, 32, 128, 1, 4, 4)),
        (128, SplitKConfig(64, 64, 128, 1, 4, 4)),
    ],
    # gate_up: the Llama MLP takes kernels/gate_up_silu.py at these rows first; these serve
    # its STRIXLM_FUSE_GATE_UP_SILU=0 runs and other [gate | up] callers.
    (6144, 1024): [
        (16, SplitKConfig(16, 64, 128, 1, 4, 4)),
        (32, SplitKConfig(32, 64, 128, 1, 4, 4)),
        (64, SplitKConfig(64, 64, 128, 1, 4, 4)),
    ],
    (1024, 2048): [(256, SplitKConfig(64, 32, 128, 1, 4, 4))],  # o_proj
}
# STRIXLM_DENSE_GEMM=0 keeps cuBLAS for those shapes (A/B runs; read at import).
_DENSE_ENABLED = os.environ.get("STRIXLM_DENSE_GEMM", "1") != "0"


def plan_dense(
    m: int, n: int, k: int, *, x_dtype: torch.dtype, w_dtype: torch.dtype, has_bias: bool
) -> SplitKConfig | None:
    """The dense config for an [m, k] @ [n, k].T product in the engine's Linear, or None for
    cuBLAS: a measured (N, K), GEMV_MAX_ROWS < m up to the table's last row count,
    half-precision weight and matching x, no bias."""
    if not _DENSE_ENABLED or not half_operands(x_dtype, w_dtype, has_bias):
        return None
    if m <= GEMV_MAX_ROWS:
        return None
    return config_for_rows(_DENSE.get((n, k), []), m, k)


def splitk_partials_ref(x: torch.Tensor, w: torch.Tensor, split: int) -> torch.Tensor:
    """fp32 [split, M, N]: slice s is x[:, Ks] @ w[:, Ks].T over the s-th K / split columns."""
    k = x.shape[1]
    if k % split:
        raise ValueError(f"K {k} does not split {split} ways")
    xs, ws = x.float().chunk(split, dim=1), w.float().chunk(split, dim=1)
    return torch.stack([a @ b.t() for a, b in zip(xs, ws, strict=True)])


if HAS_TRITON:

    @triton.jit
    def _splitk_partials_kernel(
        x_ptr,
        w_ptr,
        part_ptr,
        M,
        N,
        stride_xm,
        stride_wn,
        K_PER,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        # Program (n tile, m tile, k slice) writes part[slice, m tile, n tile] in fp32.
        # K_PER (K / SPLIT) is a multiple of BLOCK_K, so only rows and columns are masked.
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        pid_k = tl.program_id(2)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < M
        col_ok = cols < N
        k_lo = pid_k * K_PER
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(k_lo, k_lo + K_PER, BLOCK_K):
            a = tl.load(
                x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :],
                mask=row_ok[:, None],
                other=0.0,
            )
            # w is [N, K]: the tile is read transposed, [BLOCK_K, BLOCK_N], contiguous in K.
            b = tl.load(
                w_ptr + cols[None, :] * stride_wn + (k0 + ks)[:, None],
                mask=col_ok[None, :],
                other=0.0,
            )
            acc = tl.dot(a, b, acc)
        out = part_ptr + (pid_k * M + rows[:, None]).to(tl.int64) * N + cols[None, :]
        # fp32 partials keep the sum as is; a 16-bit output (SPLIT 1: dense_linear) rounds it.
        tl.store(out, acc.to(part_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def splitk_partials(x: torch.Tensor, w: torch.Tensor, cfg: SplitKConfig) -> SplitKPartials:
    """x [M, K] @ w [N, K].T as SplitKPartials (one launch). The partials buffer is a fresh
    torch.empty, which a CUDA graph capture turns into a pool allocation; no host sync."""
    parts = torch.empty((cfg.split, x.shape[0], w.shape[0]), dtype=torch.float32, device=x.device)
    _launch(x, w, parts, cfg)
    return SplitKPartials(parts, x.dtype)


def dense_linear(x: torch.Tensor, w: torch.Tensor, cfg: SplitKConfig) -> torch.Tensor:
    """x [M, K] @ w [N, K].T in x's dtype through the same kernel without a split (cfg.split
    must be 1): fp32 accumulation, one rounding at the store, as cuBLAS does."""
    if cfg.split != 1:
        raise ValueError(f"dense_linear takes split 1, got {cfg}")
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    _launch(x, w, out, cfg)
    return out


def _launch(x: torch.Tensor, w: torch.Tensor, parts: torch.Tensor, cfg: SplitKConfig) -> None:
    m, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k or x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError("x [M, K] and w [N, K] need matching K and a contiguous last dim")
    if k % (cfg.split * cfg.block_k):
        raise ValueError(f"K {k} is not a multiple of SPLIT * BLOCK_K for {cfg}")
    if m:
        grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m), cfg.split)
        pdl = pdl_enabled(x)
        _splitk_partials_kernel[grid](
            x,
            w,
            parts,
            m,
            n,
            x.stride(0),
            w.stride(0),
            k // cfg.split,
            BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k,
            PDL=pdl,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
            launch_pdl=pdl,
        )
