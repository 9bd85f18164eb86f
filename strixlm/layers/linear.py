"""Linear layer that sends skinny inputs (small-batch decode) to the Triton GEMV kernel,
decode-sized batches of the measured shapes to the Triton tile GEMMs (pointer loads, or TMA
where that won; both take part in PDL, so they start while their producer drains), and can
hand mid-size batches' narrow outputs back as split-K partials (forward_partials)."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from strixlm.kernels import gate_up_silu as gate_up_kernel
from strixlm.kernels import gemv as gemv_kernel
from strixlm.kernels import splitk_linear as splitk
from strixlm.kernels import tma_linear as tma
from strixlm.kernels.dispatch import use_triton
from strixlm.layers.activation import silu_and_mul
from strixlm.layers.splitk_partials import SplitKPartials

_USE_GEMV = gemv_kernel.HAS_TRITON and os.environ.get("STRIXLM_DISABLE_GEMV", "0") != "1"
# STRIXLM_FUSE_SILU_DOWN=0 keeps silu_and_mul a launch of its own (A/B runs; read at import).
_FUSE_SILU = os.environ.get("STRIXLM_FUSE_SILU_DOWN", "1") != "0"


class Linear(nn.Linear):
    """nn.Linear; on CUDA with half-precision weights and at most gemv.MAX_ROWS rows (one by
    default), the product runs in the GEMV kernel, which reads the weight at close to full
    bandwidth; above that, measured shapes go to our tile GEMMs (splitk_linear.plan_dense,
    tma_linear.plan)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _skinny(x, self.weight, _HALF) and x.dtype == self.weight.dtype:
            return gemv_kernel.gemv(x, self.weight, self.bias)
        if _tile_operands(x, self.weight):
            y = _tile_gemm(x, self.weight, self.bias)
            if y is not None:
                return y
        return F.linear(x, self.weight, self.bias)

    def forward_partials(self, x: torch.Tensor) -> torch.Tensor | SplitKPartials:
        """forward(x), or, where split-K applies (see splitk_config), its unreduced fp32
        partials. Only for consumers that take SplitKPartials (RMSNorm with a residual): the
        reduction then rides in their kernel instead of costing a launch here."""
        cfg = splitk_config(x, self.weight, self.bias)
        if cfg is None:
            return self.forward(x)
        return splitk.splitk_partials(x, self.weight, cfg)

    def forward_silu_mul(
        self, gu: torch.Tensor, partials: bool = False
    ) -> torch.Tensor | SplitKPartials:
        """self(silu_and_mul(gu)) for gu = [gate | up] (forward_partials' result with
        partials). Where the GEMV takes the product (M <= gemv.MAX_ROWS), it computes the
        activation as it loads its input: one launch fewer per MLP, bit-equal to the separate
        silu_and_mul. H200, batch-1 decode step 1.23 -> 1.18 ms. Not in the split-K GEMM
        (M > gemv.MAX_ROWS): each of its output tiles would recompute the activation of all its
        rows, and the workload ran 2.7% slower with it there (26,362 -> 25,679 tok/s)."""
        k = self.in_features
        if _FUSE_SILU and gu.dim() == 2 and gu.shape[1] == 2 * k and gu.stride(1) == 1:
            if _skinny(gu, self.weight, _HALF) and gu.dtype == self.weight.dtype:
                return gemv_kernel.gemv(gu, self.weight, self.bias, silu_mul=True)
        h = silu_and_mul(gu)
        return self.forward_partials(h) if partials else self.forward(h)

    def forward_gate_up_silu(self, x: torch.Tensor) -> torch.Tensor | None:
        """silu_and_mul(self(x)) in one launch for this layer as the MLP's [gate | up]
        projection, where a fused kernel has a measured config (gate_up_silu.plan at decode
        rows, plan_tma's TMA kernel at prefill rows); None elsewhere, and the caller takes the
        two-step path."""
        w = self.weight
        if not (_tile_operands(x, w) and w.shape[0] % 2 == 0):
            return None
        m, k = x.shape
        has_bias = self.bias is not None
        cfg = gate_up_kernel.plan(
            m, w.shape[0] // 2, k, x_dtype=x.dtype, w_dtype=w.dtype, has_bias=has_bias
        )
        if cfg is not None:
            return gate_up_kernel.gate_up_silu(x, w, cfg)
        tcfg = gate_up_kernel.plan_tma(x, w, has_bias)
        return None if tcfg is None else gate_up_kernel.tma_gate_up_silu(x, w, tcfg)

    def forward_relu2(self, x: torch.Tensor) -> torch.Tensor:
        """relu(linear(x))^2 (NemotronH's MLP activation); fused into the GEMV's store for
        skinny inputs, which saves two elementwise launches per layer."""
        # Up to the kernel's 8 rows here: the alternative is cuBLAS plus two elementwise
        # launches, not the tile GEMM that replaced the GEMV above one row in forward().
        rows = gemv_kernel.KERNEL_ROWS
        if _skinny(x, self.weight, _HALF, rows) and x.dtype == self.weight.dtype:
            return gemv_kernel.gemv(x, self.weight, self.bias, relu2=True)
        return torch.square(F.relu(F.linear(x, self.weight, self.bias)))


_HALF = (torch.bfloat16, torch.float16)


def _skinny(
    x: torch.Tensor,
    w: torch.Tensor,
    weight_dtypes: tuple[torch.dtype, ...],
    max_rows: int | None = None,
) -> bool:
    rows = gemv_kernel.MAX_ROWS if max_rows is None else max_rows
    return (
        _USE_GEMV
        and x.is_cuda
        and x.dim() == 2
        and x.shape[0] <= rows
        and w.dtype in weight_dtypes
        and x.stride(1) == 1
    )


def _tile_operands(x: torch.Tensor, w: torch.Tensor) -> bool:
    """What the Triton tile GEMMs need beyond their planners' dtype / shape checks: the
    Triton path (CUDA), 2-D x and w with matching K and contiguous last dims. A mismatch
    goes to the plain path, which raises its own shape error."""
    return (
        use_triton(x)
        and x.dim() == 2
        and w.dim() == 2
        and w.shape[1] == x.shape[1]
        and x.stride(1) == 1
        and w.stride(1) == 1
    )


def splitk_config(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None
) -> splitk.SplitKConfig | None:
    """The split-K tile config for x @ w.T, or None for the plain path; splitk.plan checks
    dtypes, bias, rows (GEMV rows < M <= STRIXLM_SPLITK_MAX_ROWS) and shape."""
    if not _tile_operands(x, w):
        return None
    m, k = x.shape
    return splitk.plan(
        m, w.shape[0], k, x_dtype=x.dtype, w_dtype=w.dtype, has_bias=bias is not None
    )


def _tile_gemm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """x @ w.T in one of our Triton tile GEMMs where it beat cuBLAS at this shape and row
    count: the pointer-load kernel (splitk.plan_dense), else the TMA one (tma_linear.plan,
    when both operands suit TMA); None for cuBLAS. The caller has checked _tile_operands."""
    m, k = x.shape
    kw = dict(x_dtype=x.dtype, w_dtype=w.dtype, has_bias=bias is not None)
    cfg = splitk.plan_dense(m, w.shape[0], k, **kw)
    if cfg is not None:
        return splitk.dense_linear(x, w, cfg)
    tcfg = tma.plan(m, w.shape[0], k, **kw)
    if tcfg is None or not (tma.tma_ready(x) and tma.tma_ready(w)):
        return None
    return tma.tma_linear(x, w, tcfg)


def fp32_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x.float() @ weight.float().T (MoE routers stay fp32); for skinny inputs one GEMV
    launch that upcasts as it reads instead of a cast plus a cuBLAS fp32 GEMV (two kernels)."""
    if _skinny(x, weight, (torch.float32,), gemv_kernel.KERNEL_ROWS) and x.dtype in _HALF:
        return gemv_kernel.gemv(x, weight, out_dtype=torch.float32)
    return F.linear(x.float(), weight.float())
