"""Causal attention for fresh prompts, reading K/V from the step's own k/v by TMA.

A sequence whose whole context is this step's query (a prompt's first chunk, no cached
prefix: seq_len == query_len) needs no paged cache reads: its keys and values are rows
q_start.. of the step's k / v, written by the q/k norm + rotary launch. The unified kernel
(paged_attention.py) gathers them back from the cache one token row at a time through the
block table, with small tiles (H200: ~130-190 TFLOP/s on the standard workload's admission
steps). Here each program takes BLOCK_Q query tokens x the G heads of one kv head of one fresh
sequence (BLOCK_M = BLOCK_Q * G rows), and K/V tiles of BLOCK_N tokens arrive by TMA straight
into shared memory; the softmax is the unified kernel's (base 2, fp32, full tiles unmasked,
then the diagonal ones masked).

Grid and sequence lookup are the unified kernel's (query tiles, kv heads), reversed so the
longest causal rows start first. Programs whose sequence has a cached prefix (or is padding)
exit at once: the unified kernel, launched with SKIP_FRESH, serves those and skips these, so
a mixed step runs both over the same metadata and each row is written exactly once.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON
from strixlm.kernels.pdl import pdl_enabled

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from strixlm.kernels.paged_attention import _find_seq
    from strixlm.kernels.pdl import pdl_prologue

LOG2E = 1.4426950408889634
# Opt-in (STRIXLM_PREFILL_ATTN=1; read at import), on sm90+ (TMA) with half-precision q/k/v
# (prefill_fits). H200, bench_mixed_attn.py (2026-12-02), per layer: a pure admission step
# (13 fresh prompts, 8192 tokens) 127.0 -> 109.9 us with 64 x 64 tiles / 8 warps, 76.3 us
# alone with the best config (BLOCK_Q 32, BLOCK_N 64, 4 warps, 3 stages, now the default);
# but beside decode rows the two launches run one after the other where the unified
# kernel's one launch overlapped the decodes' reads with the prefill math: 143 -> 154 us
# with 32 decodes, 250 -> 273 with 192. The standard workload, whose admission steps carry
# decodes from the second on, ran 27,184 tok/s on (three runs) against 27,216 off.
ENABLED = os.environ.get("STRIXLM_PREFILL_ATTN", "0") == "1"
BLOCK_Q = int(os.environ.get("STRIXLM_PREFILL_ATTN_BLOCK_Q", "32"))
BLOCK_N = int(os.environ.get("STRIXLM_PREFILL_ATTN_BLOCK_N", "64"))
NUM_WARPS = int(os.environ.get("STRIXLM_PREFILL_ATTN_WARPS", "4"))
NUM_STAGES = int(os.environ.get("STRIXLM_PREFILL_ATTN_STAGES", "3"))


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
    """This kernel can serve the step: enabled, CUDA sm90+ (or the interpreter), one 16-bit
    dtype, a power-of-two head dim of 16-256, G * D within a TMA box, TMA-describable views."""
    from strixlm.kernels.paged_attention import interpreter_active

    if not (ENABLED and HAS_TRITON) or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not (k.dtype == v.dtype == q.dtype):
        return False
    if q.is_cuda:
        if torch.cuda.get_device_capability(q.device)[0] < 9:
            return False
    elif not interpreter_active():
        return False
    d = q.shape[-1]
    g = q.shape[1] // k.shape[1]
    if d & (d - 1) or not 16 <= d <= 256 or g * d > 256 or q.shape[1] % k.shape[1]:
        return False
    return all(_tma_2d(t) is not None for t in (q, k, v))


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

    @triton.jit(do_not_specialize=["num_seqs"])
    def _prefill_attn_kernel(
        out_ptr,
        q_desc,
        k_desc,
        v_desc,
        seq_lens_ptr,
        qsl_ptr,
        qk_scale,
        num_seqs,
        stride_ot,
        stride_oh,
        G: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_Q: tl.constexpr,
        BLOCK_N: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        BLOCK_M: tl.constexpr = BLOCK_Q * G
        kv_head = tl.program_id(1)
        q_block = tl.num_programs(0) - 1 - tl.program_id(0)
        seq = _find_seq(qsl_ptr, q_block, num_seqs, BLOCK_Q)
        q_start = tl.load(qsl_ptr + seq)
        q_len = tl.load(qsl_ptr + seq + 1) - q_start
        local = q_block - (q_start // BLOCK_Q + seq)
        seq_len = tl.load(seq_lens_ptr + seq)
        # Fresh prompts only (no cached prefix); the unified kernel serves the rest.
        if (seq_len != q_len) | (local * BLOCK_Q >= q_len):
            return
        # [BLOCK_Q, G * D] -> rows (token, head): the unified kernel's row order.
        q = q_desc.load([q_start + local * BLOCK_Q, kv_head * G * HEAD_DIM])
        q = tl.reshape(q, [BLOCK_M, HEAD_DIM])
        offs_m = tl.arange(0, BLOCK_M)
        q_pos = local * BLOCK_Q + offs_m // G
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
        res = acc * (1.0 / l_i)[:, None]  # as the unified kernel normalizes
        head = kv_head * G + offs_m % G
        tok = (q_start + q_pos).to(tl.int64)
        offs_d = tl.arange(0, HEAD_DIM)
        ptrs = out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(ptrs, res.to(out_ptr.dtype.element_ty), mask=(q_pos < q_len)[:, None])


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    out: torch.Tensor,
    *,
    block_q: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Writes out's rows of the fresh sequences (seq_lens[i] == query length) with causal
    attention of q [T, Hq, D] over k / v [T, Hkv, D] (this step's, rotated); other rows are
    left as they are. Device metadata only (graph-safe); prefill_fits must hold."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    bq = block_q or BLOCK_Q
    bn = block_n or BLOCK_N
    num_seqs = seq_lens.shape[0]
    if t == 0 or num_seqs == 0:
        return out
    q2, k2, v2 = _tma_2d(q), _tma_2d(k), _tma_2d(v)
    qd = TensorDescriptor.from_tensor(q2, [bq, g * d])
    kd = TensorDescriptor.from_tensor(k2, [bn, d])
    vd = TensorDescriptor.from_tensor(v2, [bn, d])
    pdl = pdl_enabled(q)
    grid = (t // bq + num_seqs, hkv)
    _prefill_attn_kernel[grid](
        out, qd, kd, vd, seq_lens, query_start_loc, float(scale * LOG2E), num_seqs,
        out.stride(0), out.stride(1),
        G=g, HEAD_DIM=d, BLOCK_Q=bq, BLOCK_N=bn, PDL=pdl,
        num_warps=num_warps or NUM_WARPS, num_stages=num_stages or NUM_STAGES, launch_pdl=pdl,
    )  # fmt: skip
    return out
