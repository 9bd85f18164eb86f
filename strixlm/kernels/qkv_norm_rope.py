"""Qwen3's qkv projection with the q/k RMSNorm, neox rotary and K/V cache write in its
epilogue: one launch where a decode step runs two (the qkv GEMM, then qk_norm_rope's).

Each program owns one head (a q, k or v head of the [Hq | Hk | Hk] x head_dim projection)
for BLOCK_M rows: the head's 128 columns are one tile, so the per-head mean of squares is
local to the program. The head is computed as its two neox halves (weight rows h*D + [0, D/2)
and h*D + D/2 + [0, D/2)), each product rounded to x's dtype as the GEMM's store would round
it; then q and k heads are normed and rotated with kernels/qk_norm_rope.py's own helper and
roundings, k and v also go to their cache slot (kernels/kv_write.py's rounding for fp8
caches), and the whole projection is stored as the two-launch path leaves it. Opt-in
(STRIXLM_FUSE_QKV_NORM_ROPE=1) until measured on the GPU.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.kv_write import FP8_DTYPE, write_kv_ref
from strixlm.kernels.pdl import pdl_enabled
from strixlm.kernels.qk_norm_rope import qk_norm_rope_ref
from strixlm.kernels.splitk_linear import SplitKConfig, config_for_rows, half_operands

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.kv_write import cache_value
    from strixlm.kernels.pdl import pdl_prologue
    from strixlm.kernels.qk_norm_rope import _norm_rotate

# (Hq, Hk, head_dim, K) -> [(up to M rows, config)]; block_n is ignored (a tile is one head).
# A first guess for Qwen3-0.6B at the decode sizes where cuBLAS runs qkv (129-256 rows),
# from splitk_linear's dense sweep (64 x 128 x 128 tiles, 3 stages, near cuBLAS there);
# not yet measured with the epilogue.
_CONFIGS: dict[tuple[int, int, int, int], list[tuple[int, SplitKConfig]]] = {
    (16, 8, 128, 1024): [(256, SplitKConfig(64, 128, 128, 1, 4, 3))],
}
ENABLED = os.environ.get("STRIXLM_FUSE_QKV_NORM_ROPE", "0") == "1"
MIN_ROWS = 129  # below, the tile GEMM + the separate launch (one-head tiles make few programs)


def plan(
    m: int, n_q: int, n_kv: int, head_dim: int, k: int, *, x_dtype, w_dtype, has_bias: bool
) -> SplitKConfig | None:
    """The config for m rows of this projection, or None for the two-launch path."""
    if not ENABLED or not half_operands(x_dtype, w_dtype, has_bias) or m < MIN_ROWS:
        return None
    return config_for_rows(_CONFIGS.get((n_q, n_kv, head_dim, k), []), m, k)


def qkv_norm_rope_ref(
    x: torch.Tensor,
    w: torch.Tensor,
    n_q: int,
    n_kv: int,
    positions: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """The two-step path in torch: the projection rounded to x's dtype, q/k normed and
    rotated (qk_norm_rope_ref), K/V written to the cache (write_kv_ref). Returns the
    projection [T, (Hq + 2 Hk) D] as the fused kernel leaves it."""
    t = x.shape[0]
    d = w.shape[0] // (n_q + 2 * n_kv)
    qkv = (x.float() @ w.float().t()).to(x.dtype)
    q = qkv[:, : n_q * d].view(t, n_q, d)
    k = qkv[:, n_q * d : (n_q + n_kv) * d].view(t, n_kv, d)
    v = qkv[:, (n_q + n_kv) * d :].view(t, n_kv, d)
    q2, k2 = qk_norm_rope_ref(positions, q, k, q_weight, k_weight, eps, cos, sin)
    q.copy_(q2)
    k.copy_(k2)
    write_kv_ref(kv_cache, k, v, slot_mapping, k_scale, v_scale)
    return qkv


if HAS_TRITON:

    @triton.jit
    def _qkv_norm_rope_kernel(
        x_ptr, w_ptr, out_ptr, pos_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr,
        slot_ptr, M, K, stride_xm, stride_wn, stride_om, pos_stride, cos_stride, sin_stride,
        eps, k_scale, v_scale, stride_cb, stride_cs, stride_ch,
        N_Q: tl.constexpr, N_KV: tl.constexpr, HALF: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr, BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        pdl_prologue(PDL)
        head = tl.program_id(0)  # q heads, then k heads, then v heads
        rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        d = tl.arange(0, HALF)
        ks = tl.arange(0, BLOCK_K)
        col1 = head * 2 * HALF + d  # the head's first neox half; the second is + HALF
        w1 = w_ptr + col1[None, :].to(tl.int64) * stride_wn
        w2 = w_ptr + (col1 + HALF)[None, :].to(tl.int64) * stride_wn
        acc1 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(
                x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :],
                mask=row_ok[:, None],
                other=0.0,
            )
            acc1 = tl.dot(a, tl.load(w1 + (k0 + ks)[:, None]), acc1)
            acc2 = tl.dot(a, tl.load(w2 + (k0 + ks)[:, None]), acc2)
        ty = out_ptr.dtype.element_ty
        x1 = acc1.to(ty)  # as the GEMM would store the projection
        x2 = acc2.to(ty)
        out1 = out_ptr + rows[:, None].to(tl.int64) * stride_om + col1[None, :]
        m2 = row_ok[:, None]
        # The cache row of each token (slot -1: graph padding, written nowhere).
        slot = tl.load(slot_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
        ok = (row_ok & (slot >= 0))[:, None]
        cache_row = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs)[:, None]
        cty = kc_ptr.dtype.element_ty
        if head < N_Q + N_KV:
            pos = tl.load(pos_ptr + rows * pos_stride, mask=row_ok, other=0).to(tl.int64)
            cs = pos[:, None] * cos_stride + d[None, :]
            cos = tl.load(cos_ptr + cs, mask=m2, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + pos[:, None] * sin_stride + d[None, :], mask=m2, other=0.0)
            sin = sin.to(tl.float32)
            if head < N_Q:
                nw1 = tl.load(qw_ptr + d).to(tl.float32)
                nw2 = tl.load(qw_ptr + HALF + d).to(tl.float32)
                o1, o2 = _norm_rotate(x1, x2, nw1[None, :], nw2[None, :], eps, cos, sin, HALF)
                tl.store(out1, o1, mask=m2)
                tl.store(out1 + HALF, o2, mask=m2)
            else:
                nw1 = tl.load(kw_ptr + d).to(tl.float32)
                nw2 = tl.load(kw_ptr + HALF + d).to(tl.float32)
                o1, o2 = _norm_rotate(x1, x2, nw1[None, :], nw2[None, :], eps, cos, sin, HALF)
                tl.store(out1, o1, mask=m2)
                tl.store(out1 + HALF, o2, mask=m2)
                dst = kc_ptr + cache_row + (head - N_Q) * stride_ch + d[None, :]
                tl.store(dst, cache_value(o1, k_scale, FP8).to(cty), mask=ok)
                tl.store(dst + HALF, cache_value(o2, k_scale, FP8).to(cty), mask=ok)
        else:
            tl.store(out1, x1, mask=m2)
            tl.store(out1 + HALF, x2, mask=m2)
            dst = vc_ptr + cache_row + (head - N_Q - N_KV) * stride_ch + d[None, :]
            tl.store(dst, cache_value(x1, v_scale, FP8).to(cty), mask=ok)
            tl.store(dst + HALF, cache_value(x2, v_scale, FP8).to(cty), mask=ok)


def qkv_norm_rope(
    x: torch.Tensor,
    w: torch.Tensor,
    n_q: int,
    n_kv: int,
    positions: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    cfg: SplitKConfig,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """qkv_norm_rope_ref in one launch: x [T, K], w [(Hq + 2 Hk) D, K], kv_cache
    [2, blocks, block_size, Hk, D], positions / slot_mapping [T]; returns the projection.
    Needs D / 2 a power of two and K a multiple of cfg.block_k; positions are not
    bounds-checked (that would need a device sync)."""
    t, k = x.shape
    n_heads = n_q + 2 * n_kv
    if w.shape[1] != k or w.shape[0] % n_heads or x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError(f"x {tuple(x.shape)} and w {tuple(w.shape)} do not make {n_heads} heads")
    d = w.shape[0] // n_heads
    half = d // 2
    if d % 2 or half & (half - 1) or k % cfg.block_k:
        raise ValueError(f"head_dim {d} / K {k} do not fit the kernel ({cfg})")
    if kv_cache.shape[3:] != (n_kv, d) or kv_cache.stride(4) != 1:
        raise ValueError(f"cache {tuple(kv_cache.shape)} does not hold {n_kv} heads of {d}")
    if q_weight.shape != (d,) or k_weight.shape != (d,) or cos.shape[-1] != half:
        raise ValueError("norm weights / cos rows do not match the head")
    out = torch.empty((t, w.shape[0]), dtype=x.dtype, device=x.device)
    if t == 0:
        return out
    kc, vc = kv_cache[0], kv_cache[1]
    pdl = pdl_enabled(x)
    _qkv_norm_rope_kernel[(n_heads, triton.cdiv(t, cfg.block_m))](
        x, w, out, positions, q_weight.contiguous(), k_weight.contiguous(), cos, sin, kc, vc,
        slot_mapping, t, k, x.stride(0), w.stride(0), out.stride(0), positions.stride(0),
        cos.stride(0), sin.stride(0), float(eps), float(k_scale), float(v_scale),
        kc.stride(0), kc.stride(1), kc.stride(2),
        N_Q=n_q, N_KV=n_kv, HALF=half, BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k,
        BLOCK_SIZE=kv_cache.shape[2], FP8=kv_cache.dtype == FP8_DTYPE, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out
