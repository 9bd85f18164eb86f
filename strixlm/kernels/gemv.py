"""Skinny matmul (a few rows times a weight matrix) in Triton, for batch-1 decode.

At batch 1 a linear layer is a matrix-vector product bound by reading the weight once;
cuBLAS picks tile shapes built for larger M and reaches about a quarter of the bandwidth on
the H200 (profile: 12.4 us for a 1024x6144 bf16 weight that moves in ~3.5 us). Here each
program owns BLOCK_N output columns, streams their weight rows [BLOCK_N, K] in BLOCK_K chunks
(contiguous along K, so loads are wide), and reuses every loaded chunk for all M rows of x.
Accumulation is fp32; a bias is added at the end.
"""

from __future__ import annotations

import torch

from strixlm.kernels.env_knobs import env_int
from strixlm.kernels.kv_write import HAS_TRITON
from strixlm.kernels.pdl import pdl_enabled

if HAS_TRITON:
    import triton
    import triton.language as tl

    from strixlm.kernels.activation import silu_mul
    from strixlm.kernels.pdl import pdl_prologue

# Rows of x the kernel handles (one accumulator each).
KERNEL_ROWS = 8


# Rows up to which the engine's Linear sends a product here (STRIXLM_GEMV_MAX_ROWS, read at
# import, 0..KERNEL_ROWS); above it the tile GEMMs take over (splitk_linear, cuBLAS). Each
# row costs this kernel a reduction per weight chunk: on the H200 (profile_step.py, contexts
# 1,800, 2026-12-01) a launch took 18.8 us at 8 rows against 4.8 us in the tile kernel, and
# decode steps at batch 2 / 4 / 8 took 1.52 / 2.19 / 3.20 ms with it against 1.22 / 1.39 /
# 1.58 ms without. One row is where it reads the weight at close to full bandwidth.
def _env_max_rows() -> int:
    return max(0, min(KERNEL_ROWS, env_int("STRIXLM_GEMV_MAX_ROWS", 1)))


MAX_ROWS = _env_max_rows()


def gemv_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype | None = None,
    relu2: bool = False,
) -> torch.Tensor:
    """x [M, K] @ weight[N, K].T (+ bias), accumulated in fp32, in out_dtype (x's dtype by
    default); relu2: then relu(y)^2, each step rounded to out_dtype as torch does it."""
    out = x.float() @ weight.float().t()
    if bias is not None:
        out = out + bias.float()
    out = out.to(out_dtype or x.dtype)
    return torch.square(torch.relu(out)) if relu2 else out


if HAS_TRITON:

    @triton.jit
    def _gemv_kernel(
        out_ptr,
        x_ptr,
        w_ptr,
        b_ptr,
        N,
        K,
        stride_xm,
        stride_wn,
        stride_om,
        M: tl.constexpr,
        HAS_BIAS: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        EVEN_K: tl.constexpr,
        RELU2: tl.constexpr,
        SILU_MUL: tl.constexpr,
        PDL: tl.constexpr,
    ):
        pdl_prologue(PDL)
        pid = tl.program_id(0)
        offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        n_ok = offs_n < N
        w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
        acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc4 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc5 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc6 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc7 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + offs_k
            if EVEN_K:
                w = tl.load(w_rows + kk[None, :], mask=n_ok[:, None], other=0.0).to(tl.float32)
            else:
                k_ok = kk < K
                w = tl.load(w_rows + kk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(
                    tl.float32
                )
            acc0 += tl.sum(w * _row(x_ptr, 0, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], axis=1)
            # Further rows reuse the loaded weight chunk (M is a compile-time constant).
            if M > 1:
                acc1 += tl.sum(w * _row(x_ptr, 1, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 2:
                acc2 += tl.sum(w * _row(x_ptr, 2, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 3:
                acc3 += tl.sum(w * _row(x_ptr, 3, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 4:
                acc4 += tl.sum(w * _row(x_ptr, 4, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 5:
                acc5 += tl.sum(w * _row(x_ptr, 5, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 6:
                acc6 += tl.sum(w * _row(x_ptr, 6, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
            if M > 7:
                acc7 += tl.sum(w * _row(x_ptr, 7, stride_xm, kk, K, EVEN_K, SILU_MUL)[None, :], 1)
        if HAS_BIAS:
            bias = tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)
        else:
            bias = tl.zeros([BLOCK_N], dtype=tl.float32)
        ty = out_ptr.dtype.element_ty
        tl.store(out_ptr + offs_n, _epilogue(acc0 + bias, ty, RELU2), mask=n_ok)
        if M > 1:
            tl.store(out_ptr + stride_om + offs_n, _epilogue(acc1 + bias, ty, RELU2), mask=n_ok)
        if M > 2:
            tl.store(out_ptr + 2 * stride_om + offs_n, _epilogue(acc2 + bias, ty, RELU2), mask=n_ok)
        if M > 3:
            tl.store(out_ptr + 3 * stride_om + offs_n, _epilogue(acc3 + bias, ty, RELU2), mask=n_ok)
        if M > 4:
            tl.store(out_ptr + 4 * stride_om + offs_n, _epilogue(acc4 + bias, ty, RELU2), mask=n_ok)
        if M > 5:
            tl.store(out_ptr + 5 * stride_om + offs_n, _epilogue(acc5 + bias, ty, RELU2), mask=n_ok)
        if M > 6:
            tl.store(out_ptr + 6 * stride_om + offs_n, _epilogue(acc6 + bias, ty, RELU2), mask=n_ok)
        if M > 7:
            tl.store(out_ptr + 7 * stride_om + offs_n, _epilogue(acc7 + bias, ty, RELU2), mask=n_ok)

    @triton.jit
    def _epilogue(acc, ty, RELU2: tl.constexpr):
        # Rounded to the output dtype first, as the separate torch ops would see it.
        y = acc.to(ty)
        if RELU2:
            r = tl.where(y > 0, y, 0.0).to(tl.float32)
            y = (r * r).to(ty)
        return y

    @triton.jit
    def _row(
        x_ptr, m: tl.constexpr, stride_xm, kk, K, EVEN_K: tl.constexpr, SILU_MUL: tl.constexpr
    ):
        # Row m of x at columns kk, in fp32; SILU_MUL: x is [gate | up] (2K wide) and the
        # row is silu(gate) * up there, as silu_and_mul would have written it.
        ptrs = x_ptr + m * stride_xm + kk
        if SILU_MUL:
            if EVEN_K:
                x = silu_mul(tl.load(ptrs), tl.load(ptrs + K))
            else:
                x = silu_mul(tl.load(ptrs, mask=kk < K, other=0.0),
                             tl.load(ptrs + K, mask=kk < K, other=0.0))  # fmt: skip
        elif EVEN_K:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=kk < K, other=0.0)
        return x.to(tl.float32)


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int | None = None,
    block_k: int = 512,
    *,
    out_dtype: torch.dtype | None = None,
    relu2: bool = False,
    silu_mul: bool = False,
) -> torch.Tensor:
    """x [M <= KERNEL_ROWS, K] @ weight[N, K].T (+ bias) -> [M, N] in out_dtype (x's dtype by
    default), optionally followed by relu(y)^2 in the same launch. silu_mul: x is
    [gate | up], [M, 2K], and the product takes silu_and_mul(x) (computed as it loads)."""
    if block_n is None:
        # Enough programs to cover every SM about twice (narrow outputs get narrower blocks).
        block_n = 16
        while block_n > 4 and triton.cdiv(weight.shape[0], block_n) < 264:
            block_n //= 2
    m, k = x.shape
    k = k // 2 if silu_mul else k
    n, k2 = weight.shape
    assert k == k2 and 1 <= m <= KERNEL_ROWS, (x.shape, weight.shape, silu_mul)
    assert x.stride(1) == 1 and weight.stride(1) == 1
    out = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    block_k = min(block_k, triton.next_power_of_2(k))
    pdl = pdl_enabled(x)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        out,
        x,
        weight,
        bias if bias is not None else weight,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        out.stride(0),
        M=m,
        HAS_BIAS=bias is not None,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        EVEN_K=k % block_k == 0,
        RELU2=relu2,
        SILU_MUL=silu_mul,
        PDL=pdl,
        num_warps=4,
        launch_pdl=pdl,
    )
    return out
