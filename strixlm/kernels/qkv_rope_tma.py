"""Qwen3's qkv projection at decode rows with the q/k RMSNorm, neox rotary and K/V cache
write in a TMA GEMM's epilogue: one launch where a decode step runs two (the qkv GEMM, then
qk_norm_rope's launch, which reads the projection back, ~4 us a layer at 256 rows on the
H200, session 17's profile_step table).

Each program owns one head of the [Hq | Hk | Hk] x head_dim projection for BLOCK_M rows,
computed as its two neox halves (weight rows h*D + [0, D/2) and h*D + D/2 + [0, D/2)) in two
accumulators, so the rotary pairs meet in registers. Each product is rounded to x's dtype as
the GEMM's store rounds it; q and k heads are then normed and rotated with qk_norm_rope's own
helper and roundings; q heads are stored to the returned q [T, Hq, D], k and v heads go to
their cache slot only (kv_write's rounding for fp8 caches). The attention reads q and the
cache, nothing else of the projection, so the k / v columns are not stored.

History: a pointer-load version (one-head tiles, session 12) lost at 16-256 rows, and a TMA
version at prefill rows (session 16) lost 12-18% a layer there. This one loads by TMA at
decode rows, and with PDL's early loads it issues the positions, cache slots, cos / sin rows
and norm weights before its wait, so the epilogue's gathers are in registers when the K loop
ends. Off until the H200 has timed it against the two launches
(benchmarks/gpu/bench_qkv_rope_tma.py): STRIXLM_QKV_ROPE_ROWS="lo-hi" turns it on for
lo..hi rows (read at import).
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.kv_write import FP8_DTYPE, write_kv_ref
from strixlm.kernels.pdl import EARLY_LOADS, pdl_enabled
from strixlm.kernels.qk_norm_rope import qk_norm_rope_ref
from strixlm.kernels.splitk_linear import half_operands
from strixlm.kernels.tma_linear import TmaConfig, tma_ready

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from strixlm.kernels.kv_write import cache_value
    from strixlm.kernels.pdl import pdl_prologue
    from strixlm.kernels.qk_norm_rope import _norm_rotate


def _rows_from_env(spec: str) -> tuple[int, int]:
    """ "lo-hi" -> (lo, hi); empty or "0" -> (0, -1), i.e. no rows."""
    if spec.strip() in ("", "0"):
        return 0, -1
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


MIN_ROWS, MAX_ROWS = _rows_from_env(os.environ.get("STRIXLM_QKV_ROPE_ROWS", ""))
# block_n is unused: a program's tile is one head (two halves of D / 2 columns).
CONFIG = TmaConfig(64, 64, 128, 4, 3)


def plan(x: torch.Tensor, w: torch.Tensor, n_q: int, n_kv: int, has_bias: bool) -> bool:
    """Whether this projection (x [M, K], w [(Hq + 2 Hk) D, K]) takes the fused kernel: M in
    the switched-on rows, sm90+, half operands, D / 2 a power of two of at least 16, K a
    multiple of CONFIG.block_k, both operands TMA-ready."""
    if not (x.is_cuda and x.dim() == 2 and MIN_ROWS <= x.shape[0] <= MAX_ROWS):
        return False
    return fits(x, w, n_q, n_kv, has_bias, CONFIG) and (
        torch.cuda.get_device_capability(x.device)[0] >= 9
    )


def fits(
    x: torch.Tensor, w: torch.Tensor, n_q: int, n_kv: int, has_bias: bool, cfg: TmaConfig
) -> bool:
    """The shape and operand conditions of qkv_rope_tma under cfg (any device)."""
    if x.dim() != 2 or w.dim() != 2 or not half_operands(x.dtype, w.dtype, has_bias):
        return False
    n_heads = n_q + 2 * n_kv
    d = w.shape[0] // n_heads
    half = d // 2
    if w.shape[0] % n_heads or d % 2 or half < 16 or half & (half - 1):
        return False
    if w.shape[1] != x.shape[1] or x.shape[1] % cfg.block_k:
        return False
    return tma_ready(x) and tma_ready(w)


def qkv_rope_ref(
    x, w, n_q, n_kv, positions, q_weight, k_weight, eps, cos, sin, kv_cache, slot_mapping,
    k_scale: float = 1.0, v_scale: float = 1.0,
) -> torch.Tensor:  # fmt: skip
    """The two-launch path in torch: the projection rounded to x's dtype, q/k normed and
    rotated (qk_norm_rope_ref), K/V written to the cache (write_kv_ref). Returns q
    [T, Hq, D] as the fused kernel leaves it."""
    t = x.shape[0]
    d = w.shape[0] // (n_q + 2 * n_kv)
    qkv = (x.float() @ w.float().t()).to(x.dtype)
    q = qkv[:, : n_q * d].view(t, n_q, d)
    k = qkv[:, n_q * d : (n_q + n_kv) * d].view(t, n_kv, d)
    v = qkv[:, (n_q + n_kv) * d :].view(t, n_kv, d)
    q2, k2 = qk_norm_rope_ref(positions, q, k, q_weight, k_weight, eps, cos, sin)
    write_kv_ref(kv_cache, k2, v, slot_mapping, k_scale, v_scale)
    return q2.contiguous()


if HAS_TRITON:

    @triton.jit
    def _qkv_rope_kernel(
        x_desc, w_desc, q_ptr, pos_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr,
        slot_ptr, M, K, stride_qt, stride_qh, pos_stride, cos_stride, sin_stride, eps,
        k_scale, v_scale, stride_cb, stride_cs, stride_ch,
        N_Q: tl.constexpr, N_KV: tl.constexpr, HALF: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr, BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr, PDL: tl.constexpr,
        EARLY: tl.constexpr,
    ):  # fmt: skip
        head = tl.program_id(0)  # q heads, then k heads, then v heads
        off_m = tl.program_id(1) * BLOCK_M
        if not EARLY:
            pdl_prologue(PDL)
        # Step inputs (written before the previous kernel) and static tables: with EARLY
        # before the wait, so their latency hides behind the predecessor's drain.
        rows = off_m + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        d = tl.arange(0, HALF)
        rotated = head < N_Q + N_KV
        is_q = head < N_Q
        # The cache row of each token (slot -1: graph padding, written nowhere).
        slot = tl.load(slot_ptr + rows, mask=row_ok & (head >= N_Q), other=-1).to(tl.int64)
        pos = tl.load(pos_ptr + rows * pos_stride, mask=row_ok & rotated, other=0).to(tl.int64)
        m2 = row_ok[:, None] & rotated
        cos = tl.load(cos_ptr + pos[:, None] * cos_stride + d[None, :], mask=m2, other=0.0)
        sin = tl.load(sin_ptr + pos[:, None] * sin_stride + d[None, :], mask=m2, other=0.0)
        qw1 = tl.load(qw_ptr + d, mask=is_q, other=0.0).to(tl.float32)
        qw2 = tl.load(qw_ptr + HALF + d, mask=is_q, other=0.0).to(tl.float32)
        kw1 = tl.load(kw_ptr + d, mask=~is_q, other=0.0).to(tl.float32)
        kw2 = tl.load(kw_ptr + HALF + d, mask=~is_q, other=0.0).to(tl.float32)
        if EARLY:
            pdl_prologue(PDL)
        acc1 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k0])
            b1 = w_desc.load([head * 2 * HALF, k0])  # the head's first neox half
            b2 = w_desc.load([head * 2 * HALF + HALF, k0])
            acc1 = tl.dot(a, b1.T, acc1)
            acc2 = tl.dot(a, b2.T, acc2)
        ty = q_ptr.dtype.element_ty
        x1 = acc1.to(ty)  # as the GEMM would store the projection
        x2 = acc2.to(ty)
        ok = (row_ok & (slot >= 0))[:, None]
        cache_row = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs)[:, None]
        cty = kc_ptr.dtype.element_ty
        if rotated:
            nw1 = tl.where(is_q, qw1, kw1)
            nw2 = tl.where(is_q, qw2, kw2)
            o1, o2 = _norm_rotate(
                x1, x2, nw1[None, :], nw2[None, :], eps, cos.to(tl.float32),
                sin.to(tl.float32), HALF,
            )  # fmt: skip
            if is_q:
                q_dst = q_ptr + rows[:, None].to(tl.int64) * stride_qt + head * stride_qh
                tl.store(q_dst + d[None, :], o1, mask=row_ok[:, None])
                tl.store(q_dst + HALF + d[None, :], o2, mask=row_ok[:, None])
            else:
                k_dst = kc_ptr + cache_row + (head - N_Q) * stride_ch + d[None, :]
                tl.store(k_dst, cache_value(o1, k_scale, FP8).to(cty), mask=ok)
                tl.store(k_dst + HALF, cache_value(o2, k_scale, FP8).to(cty), mask=ok)
        else:
            v_dst = vc_ptr + cache_row + (head - N_Q - N_KV) * stride_ch + d[None, :]
            tl.store(v_dst, cache_value(x1, v_scale, FP8).to(cty), mask=ok)
            tl.store(v_dst + HALF, cache_value(x2, v_scale, FP8).to(cty), mask=ok)


def qkv_rope_tma(
    x, w, n_q, n_kv, positions, q_weight, k_weight, eps, cos, sin, kv_cache, slot_mapping,
    k_scale: float = 1.0, v_scale: float = 1.0, cfg: TmaConfig | None = None,
) -> torch.Tensor:  # fmt: skip
    """qkv_rope_ref in one launch: x [T, K], w [(Hq + 2 Hk) D, K] (both TMA-ready),
    kv_cache [2, blocks, block_size, Hk, D], positions / slot_mapping [T]; returns q
    [T, Hq, D], normed and rotated. positions are not bounds-checked (that would need a
    device sync)."""
    cfg = cfg or CONFIG
    t, k = x.shape
    n_heads = n_q + 2 * n_kv
    d = w.shape[0] // n_heads
    half = d // 2
    if not fits(x, w, n_q, n_kv, False, cfg):
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit ({cfg})")
    if kv_cache.shape[3:] != (n_kv, d) or kv_cache.stride(4) != 1:
        raise ValueError(f"cache {tuple(kv_cache.shape)} does not hold {n_kv} heads of {d}")
    if q_weight.shape != (d,) or k_weight.shape != (d,) or cos.shape[-1] != half:
        raise ValueError("norm weights / cos rows do not match the head")
    q = torch.empty((t, n_q, d), dtype=x.dtype, device=x.device)
    if t == 0:
        return q
    xd = TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k])
    wd = TensorDescriptor.from_tensor(w, [half, cfg.block_k])
    kc, vc = kv_cache[0], kv_cache[1]
    pdl = pdl_enabled(x)
    _qkv_rope_kernel[(n_heads, triton.cdiv(t, cfg.block_m))](
        xd, wd, q, positions, q_weight.contiguous(), k_weight.contiguous(), cos, sin, kc, vc,
        slot_mapping, t, k, q.stride(0), q.stride(1), positions.stride(0), cos.stride(0),
        sin.stride(0), float(eps), float(k_scale), float(v_scale), kc.stride(0),
        kc.stride(1), kc.stride(2),
        N_Q=n_q, N_KV=n_kv, HALF=half, BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k,
        BLOCK_SIZE=kv_cache.shape[2], FP8=kv_cache.dtype == FP8_DTYPE, PDL=pdl,
        EARLY=pdl and EARLY_LOADS, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        launch_pdl=pdl,
    )  # fmt: skip
    return q
