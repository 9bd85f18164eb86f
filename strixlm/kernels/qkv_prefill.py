"""Qwen3's qkv projection at prefill rows with the q/k RMSNorm, neox rotary and K/V cache
write in a TMA GEMM's epilogue: one launch where a prefill step runs two (cuBLAS's qkv, then
qk_norm_rope's launch, which reads the projection back and writes it again: ~45 us a layer
at 8192 rows on the H200, session 16).

Each program owns one head (a q, k or v head of the [Hq | Hk | Hk] x head_dim projection)
for BLOCK_M rows, computed as its two neox halves (weight rows h*D + [0, D/2) and
h*D + D/2 + [0, D/2)), whose tiles arrive by TMA; each product is rounded to x's dtype as the
GEMM's store rounds it, then q and k heads are normed and rotated with qk_norm_rope's own
helper and roundings, k and v also go to their cache slot (kv_write's rounding for fp8
caches), and the projection is stored as the two-launch path leaves it.

A decode-size version of this kernel (pointer loads, one-head tiles) lost at 16-256 rows
(session 12, removed in 1b915a3): too few programs. At prefill rows there are thousands
(32 heads x 64 row tiles at 8192). Our TMA GEMM alone ran 12-17% behind cuBLAS there
(sweep_prefill_gemm.py), so the epilogue must save more than that: opt-in
(STRIXLM_PREFILL_QKV_EPILOGUE=1) until sweep_prefill_gemm.py --qkv has timed it.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.kv_write import FP8_DTYPE, write_kv_ref
from strixlm.kernels.pdl import pdl_enabled
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

ENABLED = os.environ.get("STRIXLM_PREFILL_QKV_EPILOGUE", "0") == "1"
MIN_ROWS = 2048
# block_n is the half head (D / 2) whatever it says: a program's tile is one head.
CONFIG = TmaConfig(128, 64, 64, 4, 3)  # the prefill gate_up + SiLU kernel's winning shape
CONFIGS = (CONFIG, TmaConfig(128, 64, 64, 4, 4), TmaConfig(64, 64, 64, 4, 3))


def plan(x: torch.Tensor, w: torch.Tensor, n_q: int, n_kv: int, has_bias: bool) -> bool:
    """Whether this projection (x [M, K], w [(Hq + 2 Hk) D, K]) takes the fused kernel: on,
    sm90+, from MIN_ROWS rows, half operands, D / 2 a power of two of at least 16 and K a
    multiple of CONFIG.block_k, both operands TMA-ready."""
    if not ENABLED or not x.is_cuda or x.dim() != 2 or x.shape[0] < MIN_ROWS:
        return False
    if not half_operands(x.dtype, w.dtype, has_bias):
        return False
    n_heads = n_q + 2 * n_kv
    d = w.shape[0] // n_heads
    half = d // 2
    if w.shape[0] % n_heads or d % 2 or half < 16 or half & (half - 1):
        return False
    if x.shape[1] % CONFIG.block_k or torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    return tma_ready(x) and tma_ready(w)


def qkv_prefill_ref(
    x, w, n_q, n_kv, positions, q_weight, k_weight, eps, cos, sin, kv_cache, slot_mapping,
    k_scale: float = 1.0, v_scale: float = 1.0,
) -> torch.Tensor:  # fmt: skip
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
    def _qkv_prefill_kernel(
        x_desc, w_desc, out_ptr, pos_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr,
        slot_ptr, M, K, stride_om, pos_stride, cos_stride, sin_stride, eps, k_scale, v_scale,
        stride_cb, stride_cs, stride_ch,
        N_Q: tl.constexpr, N_KV: tl.constexpr, HALF: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr, BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        pdl_prologue(PDL)
        head = tl.program_id(0)  # q heads, then k heads, then v heads
        off_m = tl.program_id(1) * BLOCK_M
        acc1 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k0])
            b1 = w_desc.load([head * 2 * HALF, k0])  # the head's first neox half
            b2 = w_desc.load([head * 2 * HALF + HALF, k0])
            acc1 = tl.dot(a, b1.T, acc1)
            acc2 = tl.dot(a, b2.T, acc2)
        ty = out_ptr.dtype.element_ty
        x1 = acc1.to(ty)  # as the GEMM would store the projection
        x2 = acc2.to(ty)
        rows = off_m + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        d = tl.arange(0, HALF)
        col1 = head * 2 * HALF + d
        out1 = out_ptr + rows[:, None].to(tl.int64) * stride_om + col1[None, :]
        m2 = row_ok[:, None]
        # The cache row of each token (slot -1: graph padding, written nowhere).
        slot = tl.load(slot_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
        ok = (row_ok & (slot >= 0))[:, None]
        cache_row = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs)[:, None]
        cty = kc_ptr.dtype.element_ty
        if head < N_Q + N_KV:
            pos = tl.load(pos_ptr + rows * pos_stride, mask=row_ok, other=0).to(tl.int64)
            cos = tl.load(cos_ptr + pos[:, None] * cos_stride + d[None, :], mask=m2, other=0.0)
            sin = tl.load(sin_ptr + pos[:, None] * sin_stride + d[None, :], mask=m2, other=0.0)
            cos = cos.to(tl.float32)
            sin = sin.to(tl.float32)
            if head < N_Q:
                nw1 = tl.load(qw_ptr + d).to(tl.float32)
                nw2 = tl.load(qw_ptr + HALF + d).to(tl.float32)
            else:
                nw1 = tl.load(kw_ptr + d).to(tl.float32)
                nw2 = tl.load(kw_ptr + HALF + d).to(tl.float32)
            o1, o2 = _norm_rotate(x1, x2, nw1[None, :], nw2[None, :], eps, cos, sin, HALF)
            tl.store(out1, o1, mask=m2)
            tl.store(out1 + HALF, o2, mask=m2)
            if head >= N_Q:
                dst = kc_ptr + cache_row + (head - N_Q) * stride_ch + d[None, :]
                tl.store(dst, cache_value(o1, k_scale, FP8).to(cty), mask=ok)
                tl.store(dst + HALF, cache_value(o2, k_scale, FP8).to(cty), mask=ok)
        else:
            tl.store(out1, x1, mask=m2)
            tl.store(out1 + HALF, x2, mask=m2)
            dst = vc_ptr + cache_row + (head - N_Q - N_KV) * stride_ch + d[None, :]
            tl.store(dst, cache_value(x1, v_scale, FP8).to(cty), mask=ok)
            tl.store(dst + HALF, cache_value(x2, v_scale, FP8).to(cty), mask=ok)


def qkv_prefill(
    x, w, n_q, n_kv, positions, q_weight, k_weight, eps, cos, sin, kv_cache, slot_mapping,
    k_scale: float = 1.0, v_scale: float = 1.0, cfg: TmaConfig | None = None,
) -> torch.Tensor:  # fmt: skip
    """qkv_prefill_ref in one launch: x [T, K], w [(Hq + 2 Hk) D, K] (both TMA-ready),
    kv_cache [2, blocks, block_size, Hk, D], positions / slot_mapping [T]; returns the
    projection. positions are not bounds-checked (that would need a device sync)."""
    cfg = cfg or CONFIG
    t, k = x.shape
    n_heads = n_q + 2 * n_kv
    d = w.shape[0] // n_heads
    half = d // 2
    if w.shape[1] != k or w.shape[0] % n_heads or k % cfg.block_k or half & (half - 1):
        raise ValueError(f"x {tuple(x.shape)} / w {tuple(w.shape)} do not fit ({cfg})")
    if kv_cache.shape[3:] != (n_kv, d) or kv_cache.stride(4) != 1:
        raise ValueError(f"cache {tuple(kv_cache.shape)} does not hold {n_kv} heads of {d}")
    if q_weight.shape != (d,) or k_weight.shape != (d,) or cos.shape[-1] != half:
        raise ValueError("norm weights / cos rows do not match the head")
    out = torch.empty((t, w.shape[0]), dtype=x.dtype, device=x.device)
    if t == 0:
        return out
    xd = TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k])
    wd = TensorDescriptor.from_tensor(w, [half, cfg.block_k])
    kc, vc = kv_cache[0], kv_cache[1]
    pdl = pdl_enabled(x)
    _qkv_prefill_kernel[(n_heads, triton.cdiv(t, cfg.block_m))](
        xd, wd, out, positions, q_weight.contiguous(), k_weight.contiguous(), cos, sin, kc, vc,
        slot_mapping, t, k, out.stride(0), positions.stride(0), cos.stride(0), sin.stride(0),
        float(eps), float(k_scale), float(v_scale), kc.stride(0), kc.stride(1), kc.stride(2),
        N_Q=n_q, N_KV=n_kv, HALF=half, BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k,
        BLOCK_SIZE=kv_cache.shape[2], FP8=kv_cache.dtype == FP8_DTYPE, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out
