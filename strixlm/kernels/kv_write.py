"""Write new K/V into the paged KV cache at slot_mapping, in Triton, with a torch reference.

Cache layout: kv_cache [2, num_blocks, block_size, num_kv_heads, head_dim], index 0 is K.
slot = block * block_size + offset; slot < 0 means "skip" (padding tokens of a CUDA graph
batch carry -1). The cache dtype is the model dtype (bf16/fp16/fp32) or float8_e4m3fn with
per-layer scales: the cache then holds round_to_nearest_even(clamp(x / scale, +-448)).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU-only installs without triton
    HAS_TRITON = False

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0


def quantize_fp8_ref(x: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def write_kv_ref(
    kv_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Torch reference: same semantics as write_kv (negative slots are skipped)."""
    keep = slots >= 0  # data-dependent shapes are fine here: this path never runs in a graph
    slots, k, v = slots[keep], k[keep], v[keep]
    if kv_cache.dtype == FP8_DTYPE:
        # index_copy_ has no fp8 kernel on CPU: move the bytes instead.
        k = quantize_fp8_ref(k, k_scale).view(torch.uint8)
        v = quantize_fp8_ref(v, v_scale).view(torch.uint8)
        kv_cache = kv_cache.view(torch.uint8)
    copy_to_slots(kv_cache, slots, k, v)


def copy_to_slots(
    kv_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """k and v rows [N, H, D] into cache slots (all >= 0) of kv_cache [2, blocks, block_size,
    H, D], cast to the cache's dtype: block and offset merge into one slot dimension."""
    _, nb, bs, h, d = kv_cache.shape
    kv_cache[0].view(nb * bs, h, d).index_copy_(0, slots, k.to(kv_cache.dtype))
    kv_cache[1].view(nb * bs, h, d).index_copy_(0, slots, v.to(kv_cache.dtype))


def dequantize_cache(kv_cache: torch.Tensor, k_scale: float, v_scale: float) -> torch.Tensor:
    """An fp32 copy of an fp8 cache with the scales applied (for references and tests)."""
    out = kv_cache.float()
    out[0] *= k_scale
    out[1] *= v_scale
    return out


if HAS_TRITON:

    @triton.jit
    def _round_fp8e4m3(x):
        """Round fp32 (already clamped to +-448) to the nearest-even e4m3 value, in fp32.

        The later cast is then exact on every path; the Triton interpreter's own fp32->fp8
        cast truncates badly (a mantissa carry is dropped), so we never rely on its rounding.
        """
        bits = x.to(tl.int32, bitcast=True)
        # Normal range: keep 3 mantissa bits, round half to even (a carry bumps the exponent).
        lsb = (bits >> 20) & 1
        bits = (bits + 0x7FFFF + lsb) & -1048576  # -1048576 == ~0xFFFFF
        normal = bits.to(tl.float32, bitcast=True)
        # Subnormal range (|x| < 2**-6): multiples of 2**-9, rounded with the 1.5*2**23 trick
        # on |x|, then the sign put back: a negative value that rounds to zero is -0.0, as in
        # torch's cast (byte 0x80; the signed trick gave +0.0 and a different cache byte).
        # (The sign goes back as a bit: the interpreter's negation turns 0.0 into +0.0.)
        ax = tl.abs(x)
        sub = ((ax * 512.0 + 12582912.0) - 12582912.0) * (1.0 / 512.0)
        sign = x.to(tl.int32, bitcast=True) & -2147483648  # -2147483648 == 0x80000000
        sub = (sub.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
        return tl.where(ax < 0.015625, sub, normal)

    @triton.jit
    def cache_value(x, scale, FP8: tl.constexpr):
        """What the cache holds for x, in fp32 (exact for the non-fp8 cache dtypes, and one
        return type either way): x itself, or e4m3 of x / scale rounded to even. div_rn is
        IEEE division like torch's (fp32 `/` is approximate on CUDA)."""
        if FP8:
            y = _round_fp8e4m3(tl.clamp(tl.math.div_rn(x.to(tl.float32), scale), -448.0, 448.0))
        else:
            y = x.to(tl.float32)
        return y

    @triton.jit
    def _kv_write_kernel(
        k_ptr,
        v_ptr,
        kc_ptr,
        vc_ptr,
        slot_ptr,
        k_scale,
        v_scale,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_cb,
        stride_cs,
        stride_ch,
        NUM_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEADS_P: tl.constexpr,
        DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        FP8: tl.constexpr,
    ):
        t = tl.program_id(0).to(tl.int64)
        slot = tl.load(slot_ptr + t).to(tl.int64)
        if slot < 0:
            return
        blk = slot // BLOCK_SIZE
        off = slot % BLOCK_SIZE
        h = tl.arange(0, HEADS_P)[:, None]
        d = tl.arange(0, DIM_P)[None, :]
        mask = (h < NUM_HEADS) & (d < HEAD_DIM)
        dst = blk * stride_cb + off * stride_cs + h * stride_ch + d
        k = tl.load(k_ptr + t * stride_kt + h * stride_kh + d, mask=mask)
        v = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=mask)
        tl.store(kc_ptr + dst, cache_value(k, k_scale, FP8).to(kc_ptr.dtype.element_ty), mask=mask)
        tl.store(vc_ptr + dst, cache_value(v, v_scale, FP8).to(vc_ptr.dtype.element_ty), mask=mask)


def write_kv(
    kv_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Triton KV write; graph-safe (grid = num_tokens, no host reads, no allocation)."""
    _, _, bs, h, d = kv_cache.shape
    t = k.shape[0]
    if t == 0:
        return
    assert k.shape[1:] == (h, d) and v.shape[1:] == (h, d), (k.shape, v.shape, kv_cache.shape)
    assert k.stride(2) == 1 and v.stride(2) == 1 and kv_cache.stride(4) == 1
    kc, vc = kv_cache[0], kv_cache[1]
    _kv_write_kernel[(t,)](
        k,
        v,
        kc,
        vc,
        slots,
        float(k_scale),
        float(v_scale),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        kc.stride(0),
        kc.stride(1),
        kc.stride(2),
        NUM_HEADS=h,
        HEAD_DIM=d,
        HEADS_P=triton.next_power_of_2(h),
        DIM_P=triton.next_power_of_2(d),
        BLOCK_SIZE=bs,
        FP8=kv_cache.dtype == FP8_DTYPE,
        num_warps=4 if h * d >= 1024 else 1,
    )
