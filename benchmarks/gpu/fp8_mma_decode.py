"""Decode attention over an fp8 (e4m3) KV cache with explicit register layouts (Gluon, sm80+
mma.sync): the kernel of the probe probe_fp8_mma.py.

Why: the engine's Triton decode kernel reads an fp8 cache at ~2.3-2.5 TB/s, about half the
bandwidth (docs/benchmarks.md, session 37). Triton moves each converted fp8 tile through
shared memory into the MMA operand layout (cp.async, ld.shared, convert, st.shared, barrier,
ldmatrix), and that chain, not the bytes, sets its speed. Here every K / V byte goes from
global memory straight into the registers the MMA reads, with no shared memory at all:

- K as the B operand of S = q K^T. The m16n8k16 fragment gives a thread two adjacent
  reduction indices (k, k+1), then k+8, k+9. The reduction runs over head dims in any order
  as long as q and K agree, so the kernel permutes it: thread t of a quad owns dims
  32t..32t+31 of its tokens, one contiguous 32-byte run that it loads with vector loads and
  converts a byte pair at a time (cvt.f16x2.e4m3x2). A reshape and permute of the loaded
  tile give the permuted order; the layout change after it only renames registers.
- V as the B operand of O = P V. Its fragment gives a thread two adjacent tokens of one
  output column. The output columns are permuted instead (column 8j + g of the MMA is head
  dim 16g + j), so thread g of a quad owns dims 16g..16g+15 of its four tokens: a 16-byte
  load each, converted in pairs of dims, then paired by token in registers.
- P goes from the S accumulator to the A operand in registers, as in FlashAttention 2.

One warp a (sequence, kv head); the next tile's K / V are loaded before the current one is
used. Rows are the G query heads of the kv head, padded to the MMA's 16. No split-K: a probe
of the per-tile cost at the workload's large batches, not an engine path.
"""

from __future__ import annotations

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2

    HAS_GLUON = True
except ImportError:  # CPU-only installs, or a triton without Gluon
    HAS_GLUON = False

LOG2E = 1.4426950408889634
ROWS = 16  # the MMA's M: the G query heads, padded


def layouts(tile: int, head_dim: int = 128):
    """(mma, K load, V load) layouts for one warp and a [tile, head_dim] KV tile."""
    assert head_dim == 128 and tile in (16, 32), (tile, head_dim)
    mma = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    # Both over [tile, head_dim / 4] int32 words (four e4m3 dims each).
    # K: lane 4g + t holds tokens g + 8r (r over registers) and dims 32t..32t+31.
    k_ld = gl.BlockedLayout([1, 8], [8, 4], [1, 1], [1, 0])
    # V: lane 4g + t holds tokens 2t + {0, 1} + 8 {0, 1} (+ 16) and dims 16g..16g+15.
    v_regs = [[0, 1], [0, 2], [1, 0], [8, 0]] + ([[16, 0]] if tile == 32 else [])
    v_ld = gl.DistributedLinearLayout(
        reg_bases=v_regs,
        lane_bases=[[2, 0], [4, 0], [0, 4], [0, 8], [0, 16]],
        warp_bases=[],
        block_bases=[],
        shape=[tile, head_dim // 4],
    )
    return mma, k_ld, v_ld


if HAS_GLUON:

    @gluon.jit
    def _perm_dim_of_k(k):
        # The head dim the MMA's reduction index k stands for: k = 16s + 8h + 2t + e reads
        # dim 32t + 4s + 2h + e, so quad lane t owns dims 32t..32t+31.
        return 32 * ((k % 8) // 2) + 4 * (k // 16) + 2 * ((k // 8) % 2) + (k % 2)

    @gluon.jit
    def _fp8x4_to_f16(w):
        # [R, C] int32 words of four e4m3 bytes (dim 4c + i in byte i) to [R, 4C] fp16: two
        # packed converts a word, exact (every e4m3 value is an fp16 value). Loaded as bytes,
        # LLVM unpacked and repacked each byte pair (~10 instructions a pair).
        h0, h1, h2, h3 = gl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; .reg .b32 a, b; mov.b32 {lo, hi}, $4; "
            "cvt.rn.f16x2.e4m3x2 a, lo; cvt.rn.f16x2.e4m3x2 b, hi; "
            "mov.b32 {$0, $1}, a; mov.b32 {$2, $3}, b; }",
            "=h,=h,=h,=h,r",
            [w],
            dtype=(gl.float16, gl.float16, gl.float16, gl.float16),
            is_pure=True,
            pack=1,
        )
        # join puts its new axis first in registers: dim + 1 must be the lowest register
        # bit (the byte pair a convert produced), dim + 2 the next.
        x = gl.join(gl.join(h0, h2), gl.join(h1, h3))  # [R, C, 2 (dim + 2), 2 (dim + 1)]
        return x.reshape([w.shape[0], 4 * w.shape[1]])

    @gluon.jit
    def _load_kv(
        k_cache_ptr, v_cache_ptr, bt_row_ptr, j, seq_len, k_offs, v_offs, k_tok, v_tok,
        stride_cb, TILE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
    ):  # fmt: skip
        # Tile j's K / V words; tokens past seq_len read as 0 (stale slots may hold NaNs).
        if TILE == BLOCK_SIZE:
            base = gl.load(bt_row_ptr + j).to(gl.int64) * stride_cb
            k_base = base
            v_base = base
        else:
            k_base = gl.load(bt_row_ptr + (j * TILE + k_tok) // BLOCK_SIZE).to(gl.int64)
            k_base = (k_base * stride_cb)[:, None]
            v_base = gl.load(bt_row_ptr + (j * TILE + v_tok) // BLOCK_SIZE).to(gl.int64)
            v_base = (v_base * stride_cb)[:, None]
        k_ok = (j * TILE + k_tok < seq_len)[:, None]
        v_ok = (j * TILE + v_tok < seq_len)[:, None]
        kx = gl.load(k_cache_ptr + k_base + k_offs, mask=k_ok, other=0)
        vx = gl.load(v_cache_ptr + v_base + v_offs, mask=v_ok, other=0)
        return kx, vx

    @gluon.jit
    def _fp8_mma_decode_kernel(
        out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr,
        qk_scale, out_scale,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs, stride_bt,
        G: gl.constexpr, D: gl.constexpr, BLOCK_SIZE: gl.constexpr, TILE: gl.constexpr,
        MMA: gl.constexpr, K_LD: gl.constexpr, V_LD: gl.constexpr,
    ):  # fmt: skip
        seq = gl.program_id(0)
        kv_head = gl.program_id(1)
        seq_len = gl.load(seq_lens_ptr + seq)
        a_op: gl.constexpr = gl.DotOperandLayout(0, MMA, 2)
        b_op: gl.constexpr = gl.DotOperandLayout(1, MMA, 2)
        row_l: gl.constexpr = gl.SliceLayout(1, MMA)
        col_l: gl.constexpr = gl.SliceLayout(0, MMA)

        # q [ROWS, D] (rows past G are zero), its reduction order permuted like K's.
        m_a = gl.arange(0, 16, layout=gl.SliceLayout(1, a_op))
        k_a = gl.arange(0, D, layout=gl.SliceLayout(0, a_op))
        q_ptrs = (
            q_ptr + seq.to(gl.int64) * stride_qt + (kv_head * G + m_a)[:, None] * stride_qh
            + _perm_dim_of_k(k_a)[None, :]
        )  # fmt: skip
        q = gl.load(q_ptrs, mask=(m_a < G)[:, None], other=0.0).to(gl.float16)

        # Loop-invariant offsets of a tile's bytes within its block(s), in the load layouts.
        k_tok = gl.arange(0, TILE, layout=gl.SliceLayout(1, K_LD))
        k_word = gl.arange(0, D // 4, layout=gl.SliceLayout(0, K_LD))
        k_offs = (k_tok % BLOCK_SIZE)[:, None] * stride_cs + kv_head * (D // 4) + k_word[None, :]
        v_tok = gl.arange(0, TILE, layout=gl.SliceLayout(1, V_LD))
        v_word = gl.arange(0, D // 4, layout=gl.SliceLayout(0, V_LD))
        v_offs = (v_tok % BLOCK_SIZE)[:, None] * stride_cs + kv_head * (D // 4) + v_word[None, :]

        bt_row_ptr = block_table_ptr + seq.to(gl.int64) * stride_bt
        n_tiles = gl.cdiv(seq_len, TILE)
        m_i = gl.full([16], float("-inf"), gl.float32, row_l)
        l_i = gl.zeros([16], gl.float32, row_l)
        acc = gl.zeros([16, D], gl.float32, MMA)
        pos0 = gl.arange(0, TILE, layout=col_l)
        kx, vx = _load_kv(k_cache_ptr, v_cache_ptr, bt_row_ptr, 0, seq_len, k_offs, v_offs,
                          k_tok, v_tok, stride_cb, TILE, BLOCK_SIZE)  # fmt: skip
        for j in range(n_tiles):
            nxt = gl.minimum(j + 1, n_tiles - 1)
            kx_n, vx_n = _load_kv(k_cache_ptr, v_cache_ptr, bt_row_ptr, nxt, seq_len, k_offs,
                                  v_offs, k_tok, v_tok, stride_cb, TILE, BLOCK_SIZE)  # fmt: skip
            # K^T as the B operand, its reduction order permuted (a register renaming).
            kf = _fp8x4_to_f16(kx).reshape([TILE, 4, 8, 2, 2]).permute([2, 3, 1, 4, 0])
            kb = gl.convert_layout(kf.reshape([D, TILE]), b_op)
            s = mma_v2(q, kb, gl.zeros([16, TILE], gl.float32, MMA))
            s = gl.where((j * TILE + pos0 < seq_len)[None, :], s * qk_scale, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, axis=1))
            p = gl.exp2(s - m_new[:, None])
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha + gl.sum(p, axis=1)
            acc = acc * alpha[:, None]
            m_i = m_new
            # V as the B operand with its output columns permuted (column 8j + g is dim 16g + j).
            vf = _fp8x4_to_f16(vx).reshape([TILE, 8, 16]).permute([0, 2, 1]).reshape([TILE, D])
            vb = gl.convert_layout(vf, b_op)
            pa = gl.convert_layout(p.to(gl.float16), a_op)
            acc = mma_v2(pa, vb, acc)
            kx = kx_n
            vx = vx_n

        # Store the G real rows; column n is head dim 16 (n % 8) + n // 8.
        res = acc * (out_scale / l_i)[:, None]
        m_o = gl.arange(0, 16, layout=row_l)
        n_o = gl.arange(0, D, layout=col_l)
        o_ptrs = (
            out_ptr + seq.to(gl.int64) * stride_ot + (kv_head * G + m_o)[:, None] * stride_oh
            + (16 * (n_o % 8) + n_o // 8)[None, :]
        )  # fmt: skip
        gl.store(o_ptrs, res.to(out_ptr.dtype.element_ty), mask=(m_o < G)[:, None])


def fp8_mma_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    k_scale: float,
    v_scale: float,
    tile: int = 16,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention (one query token a sequence) of q [B, Hq, D] over an fp8 cache
    [2, blocks, block_size, Hkv, D]; returns out [B, Hq, D] in q's dtype."""
    b, hq, d = q.shape
    _, _, bs, hkv, _ = kv_cache.shape
    assert hq // hkv <= ROWS and kv_cache.is_contiguous() and kv_cache.dtype.itemsize == 1
    assert tile == bs or (tile == 32 and bs == 16), (tile, bs)
    out = torch.empty_like(q) if out is None else out
    mma, k_ld, v_ld = layouts(tile, d)
    words = kv_cache.view(torch.int32)  # four e4m3 bytes a word; strides in words
    kc, vc = words[0], words[1]
    _fp8_mma_decode_kernel[(b, hkv)](
        out, q, kc, vc, block_table, seq_lens,
        float(scale * k_scale * LOG2E), float(v_scale),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), kc.stride(0), kc.stride(1),
        block_table.stride(0),
        G=hq // hkv, D=d, BLOCK_SIZE=bs, TILE=tile, MMA=mma, K_LD=k_ld, V_LD=v_ld,
        num_warps=1,
    )  # fmt: skip
    return out
