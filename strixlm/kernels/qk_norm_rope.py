"""Per-head q/k RMSNorm fused with neox rotary embedding (Qwen3 attention), in place.

Qwen3 runs q_norm, k_norm and rotary on q/k right after the QKV projection: three small
launches per layer, which dominate their own cost in CUDA-graph decode. This kernel does
all three in one launch and one read/write of q and k. Numerics are those of the separate
paths (strixlm/layers/norm.py and rotary.py, and their Triton kernels): the norm in fp32,
cast to the input dtype before the weight multiply, the product rounded to the input dtype,
then the rotation in fp32 with the fp32 cos/sin rows, rounded to the input dtype again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from strixlm.kernels.kv_write import FP8_DTYPE
from strixlm.kernels.pdl import EARLY_LOADS, pdl_enabled
from strixlm.layers.rotary import RotaryEmbedding

# The v cache write in a program of its own (a third per token) instead of after k's in
# the k program; STRIXLM_QK_SEPARATE_V=0 keeps it there (read at import, for A/B runs).
# H200 (2026-12-03): graph replay 4.88 vs 5.55 us at 1 token, 5.23 vs 5.36 at 256; the
# workload +0.05% (27,609 / 27,590 vs 27,600 / 27,572 tok/s), greedy tokens unchanged.
SEPARATE_V_ENABLED = os.environ.get("STRIXLM_QK_SEPARATE_V", "1") != "0"

try:
    import triton
    import triton.language as tl

    from strixlm.kernels.kv_write import cache_value
    from strixlm.kernels.pdl import pdl_prologue
    from strixlm.kernels.rotary import check_rotary_inputs, head_tiles

    HAS_TRITON = True
except ImportError:  # CPU-only installs use the separate torch paths
    HAS_TRITON = False


def qk_norm_rope_ref(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference: RMSNorm._norm then RotaryEmbedding._rotate; returns new q, k."""

    def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * xf.to(x.dtype)

    c = cos[positions].unsqueeze(1)
    s = sin[positions].unsqueeze(1)
    rotate = RotaryEmbedding._rotate
    return rotate(norm(q, q_weight), c, s), rotate(norm(k, k_weight), c, s)


if HAS_TRITON:

    @triton.jit
    def _norm_rotate(x1, x2, w1, w2, eps, cos, sin, half):
        # Head rows split in their neox halves (last axis); returns the rotated halves in
        # x1's dtype. RMSNorm over the whole head (both halves); masked lanes add zeros.
        x1f = x1.to(tl.float32)
        x2f = x2.to(tl.float32)
        ss = tl.sum(x1f * x1f, axis=len(x1.shape) - 1, keep_dims=True)
        ss += tl.sum(x2f * x2f, axis=len(x1.shape) - 1, keep_dims=True)
        r = tl.rsqrt(ss / (2 * half) + eps)
        # Rounded to the input dtype before and after the weight multiply, as the separate
        # rmsnorm kernel does (it writes weight * xn in the input dtype, rotary reads it).
        y1 = ((x1f * r).to(x1.dtype).to(tl.float32) * w1).to(x1.dtype).to(tl.float32)
        y2 = ((x2f * r).to(x1.dtype).to(tl.float32) * w2).to(x1.dtype).to(tl.float32)
        o1 = (y1 * cos - y2 * sin).to(x1.dtype)
        o2 = (y2 * cos + y1 * sin).to(x1.dtype)
        return o1, o2

    @triton.jit
    def _norm_rotate_heads(
        base, heads, n_heads, head_stride, d, d_mask, half, w1, w2, eps, cos, sin
    ):
        # A [BLOCK_H, BLOCK_HALF] tile per half; neox pairs element i with element i + half.
        mask = (heads < n_heads)[:, None] & d_mask[None, :]
        p1 = base + heads[:, None].to(tl.int64) * head_stride + d[None, :]
        x1 = tl.load(p1, mask=mask, other=0.0)
        x2 = tl.load(p1 + half, mask=mask, other=0.0)
        o1, o2 = _norm_rotate(x1, x2, w1, w2, eps, cos, sin, half)
        tl.store(p1, o1, mask=mask)
        tl.store(p1 + half, o2, mask=mask)
        return o1, o2, mask

    @triton.jit
    def norm_rope_decode_items(
        q_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, qw_ptr, kw_ptr, cos_ptr,
        sin_ptr, toks, live, kv_head, q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, pos_stride,
        cos_stride, sin_stride, eps, k_scale, v_scale, stride_cb, stride_cs, stride_ch,
        G: tl.constexpr, BLOCK_G: tl.constexpr, HALF: tl.constexpr, BLOCK_SIZE: tl.constexpr,
        FP8: tl.constexpr,
    ):  # fmt: skip
        # What _qk_norm_rope_kernel does for one kv head of a few decode tokens (toks [I],
        # live [I]), all items at once so their loads overlap: its G q heads and its k head
        # normed and rotated in place, k and v written to the token's cache slot. The decode
        # attention kernel runs this before its tile loop (then needs a barrier).
        d = tl.arange(0, HALF)
        pos = tl.load(pos_ptr + toks * pos_stride, mask=live, other=0).to(tl.int64)
        cs_row = pos[:, None] * cos_stride + d[None, :]
        cos = tl.load(cos_ptr + cs_row, mask=live[:, None], other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + pos[:, None] * sin_stride + d[None, :], mask=live[:, None],
                      other=0.0).to(tl.float32)  # fmt: skip
        # q: [I, BLOCK_G, HALF] per half.
        g = tl.arange(0, BLOCK_G)
        q_mask = live[:, None, None] & (g < G)[None, :, None] & (d < HALF)[None, None, :]
        q_rows = toks[:, None, None] * q_s0 + (kv_head * G + g)[None, :, None].to(tl.int64) * q_s1
        p1 = q_ptr + q_rows + d[None, None, :]
        qw1 = tl.load(qw_ptr + d).to(tl.float32)
        qw2 = tl.load(qw_ptr + HALF + d).to(tl.float32)
        o1, o2 = _norm_rotate(
            tl.load(p1, mask=q_mask, other=0.0), tl.load(p1 + HALF, mask=q_mask, other=0.0),
            qw1[None, None, :], qw2[None, None, :], eps, cos[:, None, :], sin[:, None, :], HALF,
        )  # fmt: skip
        tl.store(p1, o1, mask=q_mask)
        tl.store(p1 + HALF, o2, mask=q_mask)
        # k (one head per item) and v, then both into the slot (-1: graph padding, no write).
        slot = tl.load(slot_ptr + toks, mask=live, other=-1).to(tl.int64)
        ok = (live & (slot >= 0))[:, None]
        k1p = k_ptr + toks[:, None] * k_s0 + kv_head * k_s1 + d[None, :]
        kw1 = tl.load(kw_ptr + d).to(tl.float32)
        kw2 = tl.load(kw_ptr + HALF + d).to(tl.float32)
        k1, k2 = _norm_rotate(
            tl.load(k1p, mask=live[:, None], other=0.0),
            tl.load(k1p + HALF, mask=live[:, None], other=0.0),
            kw1[None, :], kw2[None, :], eps, cos, sin, HALF,
        )  # fmt: skip
        tl.store(k1p, k1, mask=live[:, None])
        tl.store(k1p + HALF, k2, mask=live[:, None])
        dst = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs)[:, None]
        dst += kv_head * stride_ch + d[None, :]
        ty = kc_ptr.dtype.element_ty
        tl.store(kc_ptr + dst, cache_value(k1, k_scale, FP8).to(ty), mask=ok)
        tl.store(kc_ptr + dst + HALF, cache_value(k2, k_scale, FP8).to(ty), mask=ok)
        v1p = v_ptr + toks[:, None] * v_s0 + kv_head * v_s1 + d[None, :]
        for part in tl.static_range(2):
            x = cache_value(tl.load(v1p + part * HALF, mask=ok, other=0.0), v_scale, FP8)
            tl.store(vc_ptr + dst + part * HALF, x.to(ty), mask=ok)

    @triton.jit
    def _qk_norm_rope_kernel(
        q_ptr,
        k_ptr,
        pos_ptr,
        qw_ptr,
        kw_ptr,
        cos_ptr,
        sin_ptr,
        n_q_heads,
        n_k_heads,
        q_s0,
        q_s1,
        k_s0,
        k_s1,
        pos_stride,
        cos_stride,
        sin_stride,
        half,
        eps,
        v_ptr,
        v_s0,
        v_s1,
        kc_ptr,
        vc_ptr,
        slot_ptr,
        k_scale,
        v_scale,
        stride_cb,
        stride_cs,
        stride_ch,
        BLOCK_H: tl.constexpr,
        BLOCK_HALF: tl.constexpr,
        WRITE_KV: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        FP8: tl.constexpr,
        PDL: tl.constexpr,
        EARLY: tl.constexpr = False,
        SEPARATE_V: tl.constexpr = False,
    ):
        # EARLY: the position, its cos / sin rows, the norm weights and the cache slot (written
        # by earlier kernels of the step, or by none) are loaded before the PDL wait, so the
        # dependent position -> cos / sin chain runs while the qkv GEMM drains; after the
        # wait only q / k / v are read.
        if not EARLY:
            pdl_prologue(PDL)
        # Two programs per token, one for the q heads and one for k (and the cache write of
        # k and v): decode steps have few tokens, and one program doing both serialized
        # the two halves' load latencies. Each loads its cos/sin row and weight once and
        # loops over its heads in blocks of BLOCK_H. SEPARATE_V: a third program copies v
        # to the cache, so that its load -> store does not wait behind k's (the k stores
        # may alias v for all the compiler knows, so it keeps v's loads after them).
        tok = tl.program_id(0).to(tl.int64)
        do_q = tl.program_id(1) == 0
        if SEPARATE_V:
            if tl.program_id(1) == 2:
                slot = tl.load(slot_ptr + tok).to(tl.int64)
                if EARLY:
                    pdl_prologue(PDL)
                _copy_v_to_cache(
                    v_ptr + tok * v_s0, v_s1, vc_ptr, slot, v_scale, n_k_heads, half,
                    stride_cb, stride_cs, stride_ch, BLOCK_H, BLOCK_HALF, BLOCK_SIZE, FP8,
                )  # fmt: skip
                return
        pos = tl.load(pos_ptr + tok * pos_stride).to(tl.int64)
        d = tl.arange(0, BLOCK_HALF)
        d_mask = d < half
        cos = tl.load(cos_ptr + pos * cos_stride + d, mask=d_mask, other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + pos * sin_stride + d, mask=d_mask, other=0.0).to(tl.float32)
        cos = cos[None, :]
        sin = sin[None, :]
        h = tl.arange(0, BLOCK_H)
        if do_q:
            qw1 = tl.load(qw_ptr + d, mask=d_mask, other=0.0).to(tl.float32)[None, :]
            qw2 = tl.load(qw_ptr + half + d, mask=d_mask, other=0.0).to(tl.float32)[None, :]
            q_base = q_ptr + tok * q_s0
            if EARLY:
                pdl_prologue(PDL)
            for h0 in range(0, n_q_heads, BLOCK_H):
                _norm_rotate_heads(
                    q_base, h0 + h, n_q_heads, q_s1, d, d_mask, half, qw1, qw2, eps, cos, sin
                )
            return
        kw1 = tl.load(kw_ptr + d, mask=d_mask, other=0.0).to(tl.float32)[None, :]
        kw2 = tl.load(kw_ptr + half + d, mask=d_mask, other=0.0).to(tl.float32)[None, :]
        k_base = k_ptr + tok * k_s0
        # The step's K/V also go to their cache slot here (WRITE_KV), as kv_write would:
        # one launch fewer per layer. Slot -1 (graph padding) writes nothing.
        if WRITE_KV:
            slot = tl.load(slot_ptr + tok).to(tl.int64)
        else:
            slot = tl.full([], -1, tl.int64)
        blk = slot // BLOCK_SIZE
        cache_row = blk * stride_cb + (slot % BLOCK_SIZE) * stride_cs
        if EARLY:
            pdl_prologue(PDL)
        for h0 in range(0, n_k_heads, BLOCK_H):
            o1, o2, mask = _norm_rotate_heads(
                k_base, h0 + h, n_k_heads, k_s1, d, d_mask, half, kw1, kw2, eps, cos, sin
            )
            if WRITE_KV:
                dst = cache_row + (h0 + h)[:, None].to(tl.int64) * stride_ch + d[None, :]
                ok = mask & (slot >= 0)
                ty = kc_ptr.dtype.element_ty
                tl.store(kc_ptr + dst, cache_value(o1, k_scale, FP8).to(ty), mask=ok)
                tl.store(kc_ptr + dst + half, cache_value(o2, k_scale, FP8).to(ty), mask=ok)
        if WRITE_KV and not SEPARATE_V:
            _copy_v_to_cache(
                v_ptr + tok * v_s0, v_s1, vc_ptr, slot, v_scale, n_k_heads, half,
                stride_cb, stride_cs, stride_ch, BLOCK_H, BLOCK_HALF, BLOCK_SIZE, FP8,
            )  # fmt: skip

    @triton.jit
    def _copy_v_to_cache(
        v_base, v_s1, vc_ptr, slot, v_scale, n_k_heads, half, stride_cb, stride_cs,
        stride_ch, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr,
    ):  # fmt: skip
        # One token's v heads into its cache slot (slot -1, graph padding: nothing).
        d = tl.arange(0, BLOCK_HALF)
        h = tl.arange(0, BLOCK_H)
        cache_row = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs
        for h0 in range(0, n_k_heads, BLOCK_H):
            hh = (h0 + h)[:, None].to(tl.int64)
            mask = (hh < n_k_heads) & (d < half)[None, :] & (slot >= 0)
            src = v_base + hh * v_s1 + d[None, :]
            dst = cache_row + hh * stride_ch + d[None, :]
            ty = vc_ptr.dtype.element_ty
            for part in tl.static_range(2):
                x = cache_value(tl.load(src + part * half, mask=mask, other=0.0), v_scale, FP8)
                tl.store(vc_ptr + dst + part * half, x.to(ty), mask=mask)


def qk_norm_rope_inplace(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
    v: torch.Tensor | None = None,
    kv_cache: torch.Tensor | None = None,
    slot_mapping: torch.Tensor | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Per-head RMSNorm (q_weight / k_weight) then neox rotary on q [T, Hq, D] and
    k [T, Hk, D], in place (views into a qkv buffer are fine). With v, kv_cache
    [2, blocks, block_size, Hk, D] and slot_mapping [T] also the cache write of
    kernels/kv_write.py (k after rotation; fp8 caches quantized with the scales).

    positions [T] (any integer dtype and stride) index the rows of cos/sin [max_pos, D/2];
    they are not bounds-checked (checking would need a device sync). The result keeps q's
    and k's dtypes, so the weights must not promote them (e.g. fp32 weights on bf16 q).
    """
    if not HAS_TRITON:
        raise RuntimeError("qk_norm_rope_inplace needs triton; use qk_norm_rope_ref")
    t, n_q_heads, half = check_rotary_inputs(positions, q, k, cos, sin)
    head_dim = 2 * half
    if q_weight.shape != (head_dim,) or k_weight.shape != (head_dim,):
        raise ValueError(
            f"norm weights {tuple(q_weight.shape)} / {tuple(k_weight.shape)} "
            f"do not match head_dim {head_dim}"
        )
    for x, w in ((q, q_weight), (k, k_weight)):
        if torch.promote_types(w.dtype, x.dtype) != x.dtype:
            raise ValueError(
                f"weight dtype {w.dtype} would promote {x.dtype}; the in-place result cannot"
            )
    if t == 0:
        return
    write = kv_cache is not None
    if write:
        if v is None or slot_mapping is None or v.shape != k.shape or v.stride(-1) != 1:
            raise ValueError("the cache write needs v shaped like k and the slot mapping")
        if kv_cache.shape[3:] != k.shape[1:] or kv_cache.stride(4) != 1:
            raise ValueError(f"cache {tuple(kv_cache.shape)} does not hold k {tuple(k.shape)}")
        kc, vc = kv_cache[0], kv_cache[1]
    else:
        v, kc, vc, slot_mapping = k, k, k, positions  # never read without WRITE_KV
    block_h, block_half = head_tiles(n_q_heads, k.shape[1], half)
    pdl = pdl_enabled(q)
    separate_v = write and SEPARATE_V_ENABLED
    _qk_norm_rope_kernel[(t, 3 if separate_v else 2)](
        q,
        k,
        positions,
        q_weight if q_weight.is_contiguous() else q_weight.contiguous(),
        k_weight if k_weight.is_contiguous() else k_weight.contiguous(),
        cos,
        sin,
        n_q_heads,
        k.shape[1],
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        positions.stride(0),
        cos.stride(0),
        sin.stride(0),
        half,
        eps,
        v,
        v.stride(0),
        v.stride(1),
        kc,
        vc,
        slot_mapping,
        float(k_scale),
        float(v_scale),
        kc.stride(0) if write else 0,
        kc.stride(1) if write else 0,
        kc.stride(2) if write else 0,
        BLOCK_H=block_h,
        BLOCK_HALF=block_half,
        WRITE_KV=write,
        BLOCK_SIZE=kv_cache.shape[2] if write else 1,
        FP8=write and kv_cache.dtype == FP8_DTYPE,
        PDL=pdl,
        EARLY=pdl and EARLY_LOADS,
        SEPARATE_V=separate_v,
        num_warps=4,
        launch_pdl=pdl,
    )


@dataclass
class QKNormRopeWrite:
    """One layer's q/k norm + rotary and K/V cache write for a step, as arguments, so the
    decode attention kernel can run it before its tiles instead of a separate launch
    (paged_attention decides; where it cannot fuse, run() is qk_norm_rope_inplace)."""

    k: torch.Tensor  # [T, Hk, D], normed and rotated in place
    v: torch.Tensor  # [T, Hk, D]
    positions: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    eps: float
    cos: torch.Tensor
    sin: torch.Tensor
    slot_mapping: torch.Tensor
    k_scale: float = 1.0
    v_scale: float = 1.0

    def run(self, q: torch.Tensor, kv_cache: torch.Tensor) -> None:
        """The separate launch."""
        qk_norm_rope_inplace(
            self.positions, q, self.k, self.q_weight, self.k_weight, self.eps, self.cos,
            self.sin, v=self.v, kv_cache=kv_cache, slot_mapping=self.slot_mapping,
            k_scale=self.k_scale, v_scale=self.v_scale,
        )  # fmt: skip

    def fusable(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
        """What the fused path assumes beyond qk_norm_rope_inplace's own checks: a
        power-of-two half head, contiguous weights, and k/v/q of one dtype."""
        half = q.shape[-1] // 2
        return (
            q.shape[-1] % 2 == 0
            and half >= 1
            and half & (half - 1) == 0
            and self.k.dtype == self.v.dtype == q.dtype
            and self.q_weight.is_contiguous()
            and self.k_weight.is_contiguous()
            and self.v.stride(-1) == 1
            and self.slot_mapping.is_contiguous()
        )

    def kernel_args(self, k_cache: torch.Tensor) -> tuple:
        """The persistent decode kernel's prologue arguments, in its order (k_cache:
        kv_cache[0], whose strides the attention launch already passes)."""
        check_rotary_inputs(self.positions, self.k, self.k, self.cos, self.sin)
        return (
            self.k, self.v, self.positions, self.slot_mapping, self.q_weight, self.k_weight,
            self.cos, self.sin, self.k.stride(0), self.k.stride(1), self.v.stride(0),
            self.v.stride(1), self.positions.stride(0), self.cos.stride(0),
            self.sin.stride(0), float(self.eps), float(self.k_scale), float(self.v_scale),
        )  # fmt: skip
