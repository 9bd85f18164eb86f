"""Greedy tokens straight from the final hidden states: the LM head GEMM with an argmax
epilogue, so the [rows, vocab] logits are never written or read back.

A greedy decode step otherwise runs the LM head (cuBLAS, writing bf16 logits: 78 MB at 256
rows of a 151,936-token vocabulary), then the sampler's argmax pass over them and its
finalize. Here each program computes one [BLOCK_M, BLOCK_N] tile of logits in fp32, rounds
it to the model dtype (the values the unfused path compares), and stores only each row's
maximum and the lowest column reaching it; the sampler's finalize kernel then picks, per
row, the first tile holding the row's maximum. So the token is the lowest index among the
maximal rounded logits, as torch.argmax over the unfused logits gives (up to the rounding
of sums taken in another order).

Programs of one vocabulary tile are adjacent in the grid (rows fastest), so the weight tile
is read from HBM once and from L2 by the other row tiles. A config may load its tiles by
TMA (host tensor descriptors, as kernels/tma_linear.py does) instead of pointer loads; the
epilogue is the same. A TMA config may also be walked by a persistent grid (a few programs an
SM, each looping over its share of the tiles in the same order), so that the next tile's
loads overlap a tile's epilogue: the same tiles and sums, so the same tokens.

lm_head_sample is the same kernel with a Gumbel-max epilogue for temperature sampling: each
value is divided by its row's temperature and gets the sampler's noise for (seed, position,
token) (kernels/sampler.py's hash and float32 operations), so it draws the sampler's token
for rows without filters or penalties. It reads each row's temperature, seed and position
from the persistent tables by state-table row, so a sampling graph needs no gathers.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

import torch

from strixlm.kernels.dispatch import HAS_TRITON, persistent_sms
from strixlm.kernels.env_knobs import env_int
from strixlm.kernels.pdl import pdl_enabled

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from strixlm.kernels.pdl import pdl_prologue
    from strixlm.kernels.sampler import EPS, _gumbel, _row_key, argmax_finalize_kernel
    from strixlm.kernels.tma_linear import tma_ready


@dataclass(frozen=True)
class LmHeadConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    tma: bool = False  # tiles by TMA descriptors (K a multiple of block_k, aligned rows)
    # With tma: one wave of programs walking the tiles in one flattened loop, so the next
    # tile's first loads are in flight during a tile's epilogue.
    persistent: bool = False
    programs_per_sm: int = 1  # the persistent grid's size, per SM


# Up to this many rows -> config: the fastest of benchmarks/gpu/bench_lm_head_argmax.py's
# sweep on the H200 (2026-12-01). Against cuBLAS's LM head + the greedy sampling graph it
# saved 22-42 us a step at 1-128 rows, 15-35 us at 192-256 and nothing at 160 (cuBLAS's
# GEMM alone is faster from ~96 rows, where the LM head turns compute-bound).
_TABLE: list[tuple[int, LmHeadConfig]] = [
    (16, LmHeadConfig(16, 128, 128, 4, 3)),
    (32, LmHeadConfig(32, 128, 64, 4, 4)),
    (64, LmHeadConfig(64, 128, 64, 8, 3)),
    (128, LmHeadConfig(128, 256, 64, 8, 4)),
    (192, LmHeadConfig(64, 128, 64, 4, 3)),
    (512, LmHeadConfig(128, 256, 64, 8, 3)),
]
# Hopper and later: from 96 rows, where the GEMM turns compute-bound, tiles loaded by TMA
# were faster (bench_lm_head_argmax.py, H200, 2026-12-02; fused tail at the table's config
# -> TMA's best): 96.7 -> 94.6 us at 96 rows, 100.4 -> 97.2 at 128, 149.7 -> 146.7 at 160,
# 152.6 -> 142.9 at 192, 167.4 -> 149.9 at 224, 166.6 -> 145.2 at 256.
_TMA_TABLE: list[tuple[int, LmHeadConfig]] = _TABLE[:3] + [
    (96, LmHeadConfig(128, 256, 64, 8, 4, tma=True)),
    (128, LmHeadConfig(128, 128, 64, 4, 3, tma=True)),
    (192, LmHeadConfig(64, 256, 64, 4, 4, tma=True)),
    (224, LmHeadConfig(256, 128, 64, 8, 4, tma=True)),
    (512, LmHeadConfig(128, 256, 64, 8, 3, tma=True)),
]
# The Gumbel-max epilogue's own picks on Hopper (bench_lm_head_argmax.py --sample, H200,
# 2026-12-02; LM head + sampler -> fused): 100.0 -> 87.3 us at 1 row, 128.3 -> 95.2 at 32,
# 158.9 -> 125.6 at 64, 210.7 -> 181.4 at 128, 347.2 -> 321.8 at 256. The greedy configs
# from 64 rows spill with the noise in the epilogue (145-1114 us there).
_SAMPLE_TMA_TABLE: list[tuple[int, LmHeadConfig]] = _TABLE[:2] + [
    (64, LmHeadConfig(64, 128, 128, 8, 4, tma=True)),
    (128, LmHeadConfig(128, 128, 128, 8, 3, tma=True)),
    (512, LmHeadConfig(128, 128, 64, 8, 4, tma=True)),
]
# STRIXLM_LM_HEAD_TMA=0 keeps the pointer-load table on Hopper too (A/B runs).
TMA_ENABLED = os.environ.get("STRIXLM_LM_HEAD_TMA", "1") != "0"
# From PERSISTENT_MIN_ROWS rows, the TMA tables' tiles are walked by a persistent grid (one
# wave, a flattened tile loop) instead of one program per tile: that kernel runs ~9 waves at
# 256 rows, each paying its first loads' latency and an epilogue with no loads in flight.
# H200, bench_lm_head_argmax.py --persistent (session 26): 141.0 -> 115.1 us at 192 rows,
# 138.5 -> 125.9 at 256, but 94.9 -> 105.0 at 128 (whose 4-warp tiles ran two programs an
# SM). Workload with it at every TMA row count: 27,513 -> 27,590 tok/s (+0.28%, two pairs);
# from 129 rows (session 27): 27,452 -> 27,485 (+0.2%, two pairs, a slower machine).
# STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS=0 turns it off.
PERSISTENT_MIN_ROWS = env_int("STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS", 129)
# Greedy on Hopper at SMALL_PERSISTENT_MIN_ROWS-128 rows: 64-row TMA tiles walked by a
# persistent grid (one program an SM) beat the table above (bench_lm_head_argmax.py
# --persistent sweep / pick, H200, session 27; fused tail at the table's config -> here):
# 82.9 -> 80.4 us at 24 rows, 83.2 -> 80.3 at 32, 84.4 -> 78.8 at 48, 85.0 -> 79.5 at 64;
# with 256-wide tiles 97.1 -> 90.1 at 80, 98.4 -> 90.2 at 96, 97.3 -> 91.1 at 112,
# 100.5 -> 93.9 at 128. (Two programs an SM of 64 x 128 tiles were 0-3 us faster at 96-128
# rows but swung from 91.8 to 126.3 us at 80.) Workload: 27,533 / 27,505 tok/s against
# 27,504 / 27,508 without it (+0.05%, noise; with two programs an SM above 64 rows).
# STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS=0 keeps the table above there.
_SMALL_PERSISTENT_TABLE: list[tuple[int, LmHeadConfig]] = [
    (64, LmHeadConfig(64, 128, 128, 4, 4, tma=True, persistent=True)),
    (128, LmHeadConfig(64, 256, 64, 4, 4, tma=True, persistent=True)),
]
SMALL_PERSISTENT_MIN_ROWS = env_int("STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS", 17)


def config_for_rows(m: int, tma: bool = False, sample: bool = False) -> LmHeadConfig:
    small = _SMALL_PERSISTENT_TABLE
    if tma and not sample and 0 < SMALL_PERSISTENT_MIN_ROWS <= m <= small[-1][0]:
        return next(c for up_to, c in small if m <= up_to)
    table = (_SAMPLE_TMA_TABLE if sample else _TMA_TABLE) if tma else _TABLE
    cfg = next((c for up_to, c in table if m <= up_to), table[-1][1])
    if 0 < PERSISTENT_MIN_ROWS <= m and cfg.tma:
        cfg = dataclasses.replace(cfg, persistent=True)
    return cfg


@functools.cache
def _has_tma(device: torch.device) -> bool:
    return TMA_ENABLED and torch.cuda.get_device_capability(device)[0] >= 9


def fused_sample_max_rows(device: torch.device) -> int:
    """Rows up to which lm_head_sample beat the LM head + sampler: every row count with the
    TMA table, up to 32 rows with pointer loads (measured there; above, unmeasured)."""
    return 1 << 30 if device.type == "cuda" and _has_tma(device) else 32


def supported(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Half-precision operands of matching dtype with unit inner strides."""
    return (
        hidden.dtype in (torch.float16, torch.bfloat16)
        and weight.dtype == hidden.dtype
        and hidden.dim() == 2
        and weight.dim() == 2
        and hidden.shape[1] == weight.shape[1]
        and hidden.stride(1) == 1
        and weight.stride(1) == 1
    )


def lm_head_argmax_ref(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[M] int64: argmax of the logits rounded to hidden's dtype (lowest index on ties)."""
    logits = (hidden.float() @ weight.float().t()).to(hidden.dtype)
    return logits.float().argmax(dim=-1)


if HAS_TRITON:

    @triton.jit
    def _store_tile_best(acc, offs_m, offs_n, pid_n, M, V, S, val_ptr, idx_ptr, dtype,
                         rows_ptr, temp_ptr, seed_ptr, pos_ptr, SAMPLE: tl.constexpr,
                         PRECISE: tl.constexpr):  # fmt: skip
        """Each row's maximum over the tile's values and the lowest column reaching it.
        The values: the logits rounded to dtype (what the unfused path's sampler reads);
        with SAMPLE, divided by the row's temperature plus the row's Gumbel noise, the
        sampler's float32 operations for a row without filters or penalties (greedy rows,
        temperature below EPS, keep the rounded logits)."""
        x = acc.to(dtype).to(tl.float32)
        if SAMPLE:
            ok_m = offs_m < M
            row = tl.load(rows_ptr + offs_m, mask=ok_m, other=0).to(tl.int64)
            temp = tl.load(temp_ptr + row, mask=ok_m, other=0.0)
            greedy = temp < EPS
            s = tl.math.div_rn(x, tl.where(greedy, 1.0, temp)[:, None])
            key = _row_key(tl.load(seed_ptr + row, mask=ok_m, other=0),
                           tl.load(pos_ptr + row, mask=ok_m, other=0).to(tl.int64))  # fmt: skip
            noisy = s + _gumbel(key[:, None], offs_n[None, :], PRECISE)
            x = tl.where(greedy[:, None], s, noisy)
        x = tl.where((offs_n < V)[None, :], x, float("-inf"))
        mx = tl.max(x, axis=1)
        first = tl.min(tl.where(x == mx[:, None], offs_n[None, :], 2147483647), axis=1)
        first = tl.where(first == 2147483647, pid_n * acc.shape[1], first)  # an all-NaN row
        out = offs_m.to(tl.int64) * S + pid_n
        tl.store(val_ptr + out, mx, mask=offs_m < M)
        tl.store(idx_ptr + out, first, mask=offs_m < M)

    @triton.jit(do_not_specialize=["M"])
    def _lm_head_argmax_kernel(
        h,
        w,
        val_ptr,
        idx_ptr,
        rows_ptr,
        temp_ptr,
        seed_ptr,
        pos_ptr,
        M,
        V,
        K: tl.constexpr,
        stride_h,
        stride_w,
        S,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
        SAMPLE: tl.constexpr,
        PRECISE: tl.constexpr,
        TMA: tl.constexpr,
        PERSIST: tl.constexpr = False,
    ):
        """h, w: pointers, or with TMA tensor descriptors (strides then unread, and so are
        _tile_logits' row pointers and offsets). PERSIST (TMA only): a 1-D grid whose programs
        walk the tiles (row tiles fastest) in one flattened loop."""
        offs_k = tl.arange(0, BLOCK_K)
        if TMA:
            dtype: tl.constexpr = h.dtype
        else:
            dtype: tl.constexpr = h.dtype.element_ty
        if PERSIST:  # TMA tiles only (_launch): the offsets come after the K loop
            tl.static_assert(TMA, "the persistent walk takes TMA tiles")
            pdl_prologue(PDL)
            num_m = tl.cdiv(M, BLOCK_M)
            for t in tl.range(tl.program_id(0), num_m * S, tl.num_programs(0), flatten=True):
                pid_m = t % num_m
                pid_n = t // num_m
                acc = _tile_logits(h, w, h, w, pid_m, pid_n, pid_m, pid_n, offs_k, M, V, K,
                                   BLOCK_M, BLOCK_N, BLOCK_K, TMA)  # fmt: skip
                # After the loop: fewer registers live across it.
                offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
                offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
                _store_tile_best(acc, offs_m, offs_n, pid_n, M, V, S, val_ptr, idx_ptr,
                                 dtype, rows_ptr, temp_ptr, seed_ptr, pos_ptr, SAMPLE,
                                 PRECISE)  # fmt: skip
        else:
            pid_m = tl.program_id(0)
            pid_n = tl.program_id(1)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            if TMA:
                h_rows = h
                w_rows = w
            else:
                h_rows = h + offs_m.to(tl.int64)[:, None] * stride_h
                w_rows = w + offs_n.to(tl.int64)[:, None] * stride_w
            pdl_prologue(PDL)
            acc = _tile_logits(h, w, h_rows, w_rows, pid_m, pid_n, offs_m, offs_n, offs_k, M, V,
                               K, BLOCK_M, BLOCK_N, BLOCK_K, TMA)  # fmt: skip
            _store_tile_best(acc, offs_m, offs_n, pid_n, M, V, S, val_ptr, idx_ptr, dtype,
                             rows_ptr, temp_ptr, seed_ptr, pos_ptr, SAMPLE, PRECISE)  # fmt: skip

    @triton.jit
    def _tile_logits(h, w, h_rows, w_rows, pid_m, pid_n, offs_m, offs_n, offs_k, M, V, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     TMA: tl.constexpr):  # fmt: skip
        """Tile (pid_m, pid_n)'s fp32 logits: its K loop over [BLOCK_M, BLOCK_K] of h and
        [BLOCK_N, BLOCK_K] of w, by TMA (rows past M or V arrive as zeros; h_rows, w_rows and
        the offsets unread) or by masked pointer loads from the tile's row pointers."""
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            if TMA:
                a = h.load([pid_m * BLOCK_M, k])
                b = w.load([pid_n * BLOCK_N, k])
            else:
                kk = k + offs_k
                a = tl.load(h_rows + kk[None, :], mask=(offs_m < M)[:, None] & (kk < K)[None, :],
                            other=0.0)  # fmt: skip
                b = tl.load(w_rows + kk[None, :], mask=(offs_n < V)[:, None] & (kk < K)[None, :],
                            other=0.0)  # fmt: skip
            acc = tl.dot(a, b.T, acc)
        return acc


def lm_head_argmax(
    hidden: torch.Tensor, weight: torch.Tensor, cfg: LmHeadConfig | None = None
) -> torch.Tensor:
    """Greedy tokens [M] int64 of hidden [M, K] under the LM head weight [V, K]."""
    return _launch(hidden, weight, cfg, None)


def lm_head_sample(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    rows: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    cfg: LmHeadConfig | None = None,
) -> torch.Tensor:
    """Tokens [M] int64 drawn by Gumbel-max from softmax(logits / T): hidden row b is
    state-table row rows[b] (int32), whose temperature (float32; below EPS: greedy), seed
    (int64) and position (the noise key: tokens before this one, int32 or int64) are
    temperature[rows[b]], seeds[rows[b]] and positions[rows[b]]. The sampler's tokens for
    rows without filters or penalties, from the same noise."""
    return _launch(hidden, weight, cfg, (rows, temperature, seeds, positions))


def _launch(hidden, weight, cfg: LmHeadConfig | None, sample: tuple | None) -> torch.Tensor:
    if not supported(hidden, weight):
        raise ValueError(
            f"lm_head_argmax needs half-precision hidden {tuple(hidden.shape)} / weight "
            f"{tuple(weight.shape)} of one dtype with contiguous rows"
        )
    m, k = hidden.shape
    v = weight.shape[0]
    tokens = torch.empty(m, dtype=torch.int64, device=hidden.device)
    if m == 0:
        return tokens
    hopper = hidden.is_cuda and _has_tma(hidden.device)
    cfg = cfg or config_for_rows(m, tma=hopper, sample=sample is not None)
    s = triton.cdiv(v, cfg.block_n)
    val = torch.empty((m, s), dtype=torch.float32, device=hidden.device)
    idx = torch.empty((m, s), dtype=torch.int32, device=hidden.device)
    pdl = pdl_enabled(hidden)
    tma = cfg.tma and k % cfg.block_k == 0 and tma_ready(hidden) and tma_ready(weight)
    # A TMA config whose tensors cannot take descriptors runs its tiles one program each.
    persist = cfg.persistent and tma
    if persist:  # one wave of programs_per_sm programs an SM, at most one a tile
        programs = persistent_sms(hidden.device) * cfg.programs_per_sm
        grid = (min(triton.cdiv(m, cfg.block_m) * s, programs),)
    else:
        grid = (triton.cdiv(m, cfg.block_m), s)
    # libdevice's logf is what the sampler (and torch.log) runs on CUDA; not interpreted.
    precise = hidden.is_cuda
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PDL=pdl,
                  SAMPLE=sample is not None, PRECISE=precise)  # fmt: skip
    # The sampler's float32 operations, uncontracted (no FMA), as it launches them.
    launch = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
                  enable_fp_fusion=sample is None)  # fmt: skip
    row_args = sample if sample is not None else (idx, val, idx, idx)  # unread: any pointers
    h, w = hidden, weight
    if tma:
        h = TensorDescriptor.from_tensor(hidden, [cfg.block_m, cfg.block_k])
        w = TensorDescriptor.from_tensor(weight, [cfg.block_n, cfg.block_k])
    _lm_head_argmax_kernel[grid](
        h, w, val, idx, *row_args, m, v, k, hidden.stride(0), weight.stride(0), s, TMA=tma,
        PERSIST=persist, **consts, **launch,
    )  # fmt: skip
    argmax_finalize_kernel[(m,)](val, idx, tokens, s, SP=triton.next_power_of_2(s))
    return tokens
