"""Triton kernels of the chunked SSD scan (Mamba-2 paper, section 6) over packed sequences.

Per head h, with dt the processed step, a = A[h], and cum the running sum of dt * a inside
a chunk, the scan inside one chunk of one sequence is

    y[t] = exp(cum[t]) * C[t] . S0  +  sum_{s<=t} (C[t] . B[s]) exp(cum[t] - cum[s]) dt[s] x[s]
    S1   = exp(cum[L-1]) * S0  +  sum_s exp(cum[L-1] - cum[s]) dt[s] x[s] (x) B[s]

where S0 is the state entering the chunk and S1 the state leaving it. Three launches:
  1. chunk_state: each chunk's own contribution to S1 (as if S0 = 0), and its total decay.
  2. state_pass:  per sequence, walk its chunks in order: S0 of every chunk, and the final
                  state written back to the sequence's slot.
  3. chunk_out:   y for every chunk from its S0 and the intra-chunk (causal, decayed) term.
Chunks never straddle sequences (see ssd_chunks.py). Everything is accumulated in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from strixlm.kernels.mamba.ssd_chunks import SSDChunks
from strixlm.kernels.mamba.triton_common import dot_precision, softplus_clamp


@triton.jit
def _load_dt(dt_ptr, tok, ok, h, dt_st, dt_sh, dt_bias, dt_min, dt_max, SOFTPLUS: tl.constexpr):
    """Processed dt of tokens `tok` for head h, 0 where not ok (so it adds no decay)."""
    dt = tl.load(dt_ptr + tok * dt_st + h * dt_sh, mask=ok, other=0.0).to(tl.float32) + dt_bias
    return tl.where(ok, softplus_clamp(dt, dt_min, dt_max, SOFTPLUS), 0.0)


@triton.jit
def _chunk_state_kernel(
    x_ptr,
    dt_ptr,
    a_ptr,
    dtb_ptr,
    b_ptr,
    cstart_ptr,
    clen_ptr,
    states_ptr,
    decay_ptr,
    nheads,
    heads_per_group,
    headdim,
    dstate,
    dt_min,
    dt_max,
    x_st,
    x_sh,
    x_sp,
    dt_st,
    dt_sh,
    b_st,
    b_sg,
    b_sn,
    s_sc,
    s_sh,
    s_sp,
    HAS_DT_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BLOCK_CS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    c = tl.program_id(0)
    h = tl.program_id(1)
    n_pb = tl.cdiv(headdim, BLOCK_P)
    pb = tl.program_id(2) % n_pb
    nb = tl.program_id(2) // n_pb
    length = tl.load(clen_ptr + c)
    if length == 0:
        return
    start = tl.load(cstart_ptr + c).to(tl.int64)
    g = h // heads_per_group
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h).to(tl.float32) if HAS_DT_BIAS else 0.0
    offs = tl.arange(0, BLOCK_CS)
    dt_all = _load_dt(
        dt_ptr, start + offs, offs < length, h, dt_st, dt_sh, dtb, dt_min, dt_max, SOFTPLUS
    )
    total = tl.sum(dt_all * a, axis=0)
    if tl.program_id(2) == 0:
        tl.store(decay_ptr + c.to(tl.int64) * nheads + h, total)
    p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    carry = total * 0.0  # running decay of the blocks already done
    for s0 in range(0, length, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        s_ok = s < length
        dt_s = _load_dt(dt_ptr, start + s, s_ok, h, dt_st, dt_sh, dtb, dt_min, dt_max, SOFTPLUS)
        da = dt_s * a
        cum = carry + tl.cumsum(da, axis=0)
        carry += tl.sum(da, axis=0)
        w = dt_s * tl.exp(total - cum)  # decay from s to the chunk end, times dt
        tok = (start + s)[:, None]
        xs = tl.load(
            x_ptr + tok * x_st + h * x_sh + p[None, :] * x_sp,
            mask=s_ok[:, None] & (p < headdim)[None, :],
            other=0.0,
        ).to(tl.float32)
        bs = tl.load(
            b_ptr + tok * b_st + g * b_sg + n[None, :] * b_sn,
            mask=s_ok[:, None] & (n < dstate)[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.dot(tl.trans(xs * w[:, None]), bs, input_precision=DOT_PREC)
    tl.store(
        states_ptr + c.to(tl.int64) * s_sc + h * s_sh + p[:, None] * s_sp + n[None, :],
        acc,
        mask=(p < headdim)[:, None] & (n < dstate)[None, :],
    )


@triton.jit
def _state_pass_kernel(
    states_ptr,
    decay_ptr,
    clen_ptr,
    seq_chunk_ptr,
    ssm_ptr,
    sidx_ptr,
    init_ptr,
    nheads,
    dstate,
    numel,
    s_sc,
    s_sh,
    ss_s,
    ss_h,
    ss_p,
    ss_n,
    BLOCK: tl.constexpr,
):
    # Sequential over one sequence's chunks; parallel over sequences, heads and state tiles.
    # The chunk-state buffer is overwritten in place with each chunk's incoming state.
    seq = tl.program_id(0)
    h = tl.program_id(1)
    e = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)  # flat (p, n) index
    ok = e < numel
    p = e // dstate
    n = e % dstate
    slot = tl.load(sidx_ptr + seq).to(tl.int64)
    has_past = tl.load(init_ptr + seq) != 0
    ssm = ssm_ptr + slot * ss_s + h * ss_h + p * ss_p + n * ss_n
    cur = tl.load(ssm, mask=ok & has_past, other=0.0).to(tl.float32)
    # int64 bounds make the loop index int64 (offsets into a large chunk-state buffer).
    c0 = tl.load(seq_chunk_ptr + seq).to(tl.int64)
    c1 = tl.load(seq_chunk_ptr + seq + 1).to(tl.int64)
    for c in range(c0, c1):
        real = tl.load(clen_ptr + c) > 0
        ptr = states_ptr + c * s_sc + h * s_sh + e
        own = tl.load(ptr, mask=ok & real, other=0.0)
        tl.store(ptr, cur, mask=ok)
        d = tl.load(decay_ptr + c * nheads + h, mask=real, other=0.0)
        cur = tl.exp(d) * cur + own
    tl.store(ssm, cur.to(ssm_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _chunk_out_kernel(
    x_ptr,
    dt_ptr,
    a_ptr,
    dtb_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    states_ptr,
    cstart_ptr,
    clen_ptr,
    y_ptr,
    heads_per_group,
    headdim,
    dstate,
    dt_min,
    dt_max,
    x_st,
    x_sh,
    x_sp,
    dt_st,
    dt_sh,
    b_st,
    b_sg,
    b_sn,
    c_st,
    c_sg,
    c_sn,
    s_sc,
    s_sh,
    s_sp,
    y_st,
    y_sh,
    y_sp,
    ROW_BLOCKS: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BLOCK_CS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One program: BLOCK_M rows (tokens) of one chunk, one head, BLOCK_P of head_dim. The
    # intra-chunk term is causal linear attention with decay: scores C B^T, masked and
    # scaled by exp(cum[t] - cum[s]) dt[s], times x.
    c = tl.program_id(0) // ROW_BLOCKS
    row0 = (tl.program_id(0) % ROW_BLOCKS) * BLOCK_M
    h = tl.program_id(1)
    length = tl.load(clen_ptr + c)
    if row0 >= length:
        return
    start = tl.load(cstart_ptr + c).to(tl.int64)
    g = h // heads_per_group
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h).to(tl.float32) if HAS_DT_BIAS else 0.0
    offs = tl.arange(0, BLOCK_CS)
    dt_pre = _load_dt(
        dt_ptr, start + offs, offs < row0, h, dt_st, dt_sh, dtb, dt_min, dt_max, SOFTPLUS
    )
    prefix = tl.sum(dt_pre * a, axis=0)  # decay from the chunk start to this row block
    r = row0 + tl.arange(0, BLOCK_M)
    r_ok = r < length
    dt_r = _load_dt(dt_ptr, start + r, r_ok, h, dt_st, dt_sh, dtb, dt_min, dt_max, SOFTPLUS)
    cum_r = prefix + tl.cumsum(dt_r * a, axis=0)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_ok = p < headdim
    n_ok = n < dstate
    tok_r = (start + r)[:, None]
    c_r = tl.load(
        c_ptr + tok_r * c_st + g * c_sg + n[None, :] * c_sn,
        mask=r_ok[:, None] & n_ok[None, :],
        other=0.0,
    )
    # The incoming state, read transposed: [dstate, head_dim block].
    s0 = tl.load(
        states_ptr + c.to(tl.int64) * s_sc + h * s_sh + p[None, :] * s_sp + n[:, None],
        mask=n_ok[:, None] & p_ok[None, :],
        other=0.0,
    )
    acc = tl.dot(c_r.to(tl.float32), s0, input_precision=DOT_PREC) * tl.exp(cum_r)[:, None]
    carry = prefix * 0.0
    for s_begin in range(0, tl.minimum(row0 + BLOCK_M, length), BLOCK_S):
        s = s_begin + tl.arange(0, BLOCK_S)
        s_ok = s < length
        dt_s = _load_dt(dt_ptr, start + s, s_ok, h, dt_st, dt_sh, dtb, dt_min, dt_max, SOFTPLUS)
        da = dt_s * a
        cum_s = carry + tl.cumsum(da, axis=0)
        carry += tl.sum(da, axis=0)
        tok_s = (start + s)[:, None]
        b_s = tl.load(
            b_ptr + tok_s * b_st + g * b_sg + n[None, :] * b_sn,
            mask=s_ok[:, None] & n_ok[None, :],
            other=0.0,
        )
        scores = tl.dot(c_r, tl.trans(b_s), input_precision=DOT_PREC)
        causal = s[None, :] <= r[:, None]
        # -inf where masked: exp gives 0 without ever evaluating exp of a positive gap.
        gap = tl.where(causal, cum_r[:, None] - cum_s[None, :], float("-inf"))
        scores = scores * tl.exp(gap) * dt_s[None, :]
        x_s = tl.load(
            x_ptr + tok_s * x_st + h * x_sh + p[None, :] * x_sp,
            mask=s_ok[:, None] & p_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.dot(scores, x_s, input_precision=DOT_PREC)
    if HAS_D:
        x_r = tl.load(
            x_ptr + tok_r * x_st + h * x_sh + p[None, :] * x_sp,
            mask=r_ok[:, None] & p_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.load(d_ptr + h).to(tl.float32) * x_r
    tl.store(
        y_ptr + tok_r * y_st + h * y_sh + p[None, :] * y_sp,
        acc.to(y_ptr.dtype.element_ty),
        mask=r_ok[:, None] & p_ok[None, :],
    )


@dataclass(frozen=True)
class SSDLaunchConfig:
    """Tile sizes (upper bounds, clipped to the shapes) and warps of the three kernels.

    The defaults compile for sm_90 at Nemotron 3 Nano shapes (headdim 64, dstate 128,
    chunk 128) without register spills; benchmarks/gpu/check_mamba.py --sweep times others.
    """

    state_block_p: int = 64
    state_block_n: int = 64
    state_block_s: int = 64
    state_warps: int = 4
    pass_block: int = 1024
    out_block_m: int = 64
    out_block_s: int = 32
    out_block_p: int = 64
    out_warps: int = 4
    num_stages: int | None = None  # None: Triton's default


DEFAULT_SSD_CONFIG = SSDLaunchConfig()


def _pow2_at_least_16(n: int) -> int:
    # tl.dot needs every block dimension >= 16.
    return max(16, triton.next_power_of_2(n))


def _tile(limit: int, n: int) -> int:
    return min(_pow2_at_least_16(limit), _pow2_at_least_16(n))


def launch_ssd_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    ssm_states: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    chunks: SSDChunks,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    config: SSDLaunchConfig = DEFAULT_SSD_CONFIG,
) -> torch.Tensor:
    """Launch the three kernels on already validated arguments; returns y."""
    num_tokens, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1], B.shape[2]
    num_seqs = state_indices.shape[0]
    dev = x.device
    y = torch.empty((num_tokens, nheads, headdim), dtype=x.dtype, device=dev)
    if num_seqs == 0:
        return y
    n_chunks = chunks.max_chunks
    states = torch.empty((n_chunks, nheads, headdim, dstate), dtype=torch.float32, device=dev)
    decay = torch.empty((n_chunks, nheads), dtype=torch.float32, device=dev)
    hpg = nheads // ngroups
    dt_min, dt_max = float(dt_limit[0]), float(dt_limit[1])
    prec = dot_precision(x.dtype)
    dtb = dt_bias if dt_bias is not None else A
    block_cs = triton.next_power_of_2(chunks.chunk_size)
    flags = dict(HAS_DT_BIAS=dt_bias is not None, SOFTPLUS=dt_softplus, DOT_PREC=prec)
    stages = {} if config.num_stages is None else {"num_stages": config.num_stages}

    if n_chunks > 0:
        bp, bn = _tile(config.state_block_p, headdim), _tile(config.state_block_n, dstate)
        grid = (n_chunks, nheads, triton.cdiv(headdim, bp) * triton.cdiv(dstate, bn))
        _chunk_state_kernel[grid](
            x,
            dt,
            A,
            dtb,
            B,
            chunks.chunk_start,
            chunks.chunk_len,
            states,
            decay,
            nheads,
            hpg,
            headdim,
            dstate,
            dt_min,
            dt_max,
            *x.stride(),
            *dt.stride(),
            *B.stride(),
            *states.stride()[:3],
            **flags,
            BLOCK_CS=block_cs,
            BLOCK_S=_tile(config.state_block_s, block_cs),
            BLOCK_P=bp,
            BLOCK_N=bn,
            num_warps=config.state_warps,
            **stages,
        )

    numel = headdim * dstate
    block = min(config.pass_block, triton.next_power_of_2(numel))
    _state_pass_kernel[(num_seqs, nheads, triton.cdiv(numel, block))](
        states,
        decay,
        chunks.chunk_len,
        chunks.seq_chunk_start,
        ssm_states,
        state_indices,
        has_initial_state,
        nheads,
        dstate,
        numel,
        states.stride(0),
        states.stride(1),
        *ssm_states.stride(),
        BLOCK=block,
        num_warps=4,
    )

    if n_chunks > 0:
        bm = _tile(config.out_block_m, block_cs)
        row_blocks = triton.cdiv(chunks.chunk_size, bm)
        bp = _tile(config.out_block_p, headdim)
        grid = (n_chunks * row_blocks, nheads, triton.cdiv(headdim, bp))
        _chunk_out_kernel[grid](
            x,
            dt,
            A,
            dtb,
            B,
            C,
            D if D is not None else A,
            states,
            chunks.chunk_start,
            chunks.chunk_len,
            y,
            hpg,
            headdim,
            dstate,
            dt_min,
            dt_max,
            *x.stride(),
            *dt.stride(),
            *B.stride(),
            *C.stride(),
            *states.stride()[:3],
            *y.stride(),
            ROW_BLOCKS=row_blocks,
            HAS_D=D is not None,
            **flags,
            BLOCK_CS=block_cs,
            BLOCK_M=bm,
            BLOCK_S=_tile(config.out_block_s, block_cs),
            BLOCK_P=bp,
            BLOCK_N=_pow2_at_least_16(dstate),
            num_warps=config.out_warps,
            **stages,
        )
    return y
