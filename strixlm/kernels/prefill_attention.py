"""Causal attention for fresh prompts, reading K/V from the step's own k / v by TMA.

A sequence whose whole context is this step's query (a prompt's first chunk, no cached
prefix: seq_len == query_len) needs no paged cache reads: its keys and values are rows
q_start.. of the step's k / v, written by the q/k norm + rotary launch. The unified kernel
(paged_attention.py) gathers them back from the cache one token row at a time through the
block table, with small tiles. With FRESH, its programs on such sequences take `fresh_rows`
instead: K/V tiles of BLOCK_N tokens arrive by TMA straight into shared memory, and the
softmax is the unified kernel's (base 2, fp32, full tiles unmasked, then the diagonal ones
masked). One launch serves every row, so the prompts' math still overlaps the other rows'
cache reads (a separate launch for the fresh rows lost that: see STRIXLM_PREFILL_ATTN below).
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor


# STRIXLM_PREFILL_ATTN=0 keeps the cache path for every row (A/B runs; read at import).
# FRESH applies on sm90+ (TMA) with half-precision q/k/v and a cache of the same dtype
# (fresh_path). H200, bench_mixed_attn.py (2026-12-02), the
# first version, a launch of its own for the fresh rows beside the unified kernel skipping
# them: per layer a pure admission step (13 prompts, 8192 tokens) 127.0 -> 109.9 us, and the
# fresh rows alone 114.4 -> 76.3 us with 32-token query blocks, 64-token K/V tiles, 4 warps;
# but beside decode rows the two launches ran one after the other where the unified launch
# overlapped the decodes' reads with the prompts' math (143 -> 154 us with 32 decodes, 250 ->
# 273 with 192), and the workload ran 27,184 tok/s against 27,216 without it. As a branch of
# the unified kernel it has not run on a GPU yet: on by default only once measured.
ENABLED = os.environ.get("STRIXLM_PREFILL_ATTN", "0") == "1"
BLOCK_N = int(os.environ.get("STRIXLM_PREFILL_ATTN_BLOCK_N", "64"))


def _tma_2d(x: torch.Tensor) -> torch.Tensor | None:
    """x [T, H, D] as a [T, H * D] view TMA can describe (rows may be strided, as the q / k / v
    views of the qkv projection are), or None."""
    if x.dim() != 3 or x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        return None
    flat = x.flatten(1)
    e = flat.element_size()
    if flat.data_ptr() % 16 or (flat.stride(0) * e) % 16:
        return None
    return flat


def prefill_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """fresh_rows can serve the step: enabled, CUDA sm90+ (or the interpreter), one 16-bit
    dtype, a power-of-two head dim of 16-256 (one TMA box), TMA-describable k / v views."""
    if not (ENABLED and HAS_TRITON) or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    from strixlm.kernels.paged_attention import interpreter_active

    if not (k.dtype == v.dtype == q.dtype):
        return False
    if q.is_cuda:
        if torch.cuda.get_device_capability(q.device)[0] < 9:
            return False
    elif not interpreter_active():
        return False
    d = q.shape[-1]
    if d & (d - 1) or not 16 <= d <= 256 or q.shape[1] % k.shape[1]:
        return False
    return _tma_2d(k) is not None and _tma_2d(v) is not None


def fresh_path(q, kv_cache, step_kv, dim_p: int) -> bool:
    """On a prefill config: this step's k / v at hand, a cache holding them unchanged (not
    fp8: attention must read what the cache holds), an unpadded head dim, prefill_fits."""
    if not ENABLED or step_kv is None or dim_p != q.shape[-1] or kv_cache.dtype != q.dtype:
        return False  # off (the default): nothing else is looked at, per layer and step
    return prefill_fits(q, *step_kv)


if HAS_TRITON:

    @triton.jit
    def _prefill_step(
        acc, m_i, l_i, q, k_desc, v_desc, row0, col, j, q_pos, qk_scale,
        BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        k = k_desc.load([row0 + j * BLOCK_N, col])  # [BLOCK_N, D]
        v = v_desc.load([row0 + j * BLOCK_N, col])
        s = tl.dot(q, k.T) * qk_scale
        if MASKED:  # causal (also masks keys past the sequence: they sit past every q_pos)
            pos = j * BLOCK_N + tl.arange(0, BLOCK_N)
            s = tl.where(pos[None, :] <= q_pos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        return acc, m_new, l_i

    @triton.jit
    def fresh_rows(
        q, k_desc, v_desc, q_start, local, q_len, kv_head, qk_scale,
        G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    ):  # fmt: skip
        # Query tile `local` of a fresh sequence (rows: token, head as in the unified kernel)
        # over its own keys: the unnormalized output and the softmax sums.
        BLOCK_M: tl.constexpr = BLOCK_Q * G
        q_pos = local * BLOCK_Q + tl.arange(0, BLOCK_M) // G
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        kv_end = tl.minimum(q_len, (local + 1) * BLOCK_Q)
        n_tiles = tl.cdiv(kv_end, BLOCK_N)
        n_full = (local * BLOCK_Q + 1) // BLOCK_N  # tiles every row of the block sees whole
        col = kv_head * HEAD_DIM
        for j in range(0, n_full):
            acc, m_i, l_i = _prefill_step(
                acc, m_i, l_i, q, k_desc, v_desc, q_start, col, j, q_pos, qk_scale,
                BLOCK_N, False,
            )  # fmt: skip
        for j in range(n_full, n_tiles):
            acc, m_i, l_i = _prefill_step(
                acc, m_i, l_i, q, k_desc, v_desc, q_start, col, j, q_pos, qk_scale,
                BLOCK_N, True,
            )  # fmt: skip
        return acc, l_i


def fresh_descriptors(k: torch.Tensor, v: torch.Tensor, block_n: int | None = None) -> tuple:
    """TMA descriptors of this step's k / v ([T, Hkv, D], prefill_fits holds) for FRESH."""
    bn = block_n or BLOCK_N
    d = k.shape[-1]
    return (
        TensorDescriptor.from_tensor(_tma_2d(k), [bn, d]),
        TensorDescriptor.from_tensor(_tma_2d(v), [bn, d]),
    )
