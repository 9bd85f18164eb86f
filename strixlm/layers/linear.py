"""Linear layer that sends skinny inputs (small-batch decode) to the Triton GEMV kernel."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from strixlm.kernels import gemv as gemv_kernel

_USE_GEMV = gemv_kernel.HAS_TRITON and os.environ.get("STRIXLM_DISABLE_GEMV", "0") != "1"


class Linear(nn.Linear):
    """nn.Linear; on CUDA with half-precision weights and at most gemv.MAX_ROWS rows, the
    product runs in the GEMV kernel, which reads the weight at close to full bandwidth."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _skinny(x, self.weight, _HALF) and x.dtype == self.weight.dtype:
            return gemv_kernel.gemv(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def forward_relu2(self, x: torch.Tensor) -> torch.Tensor:
        """relu(linear(x))^2 (NemotronH's MLP activation); fused into the GEMV's store for
        skinny inputs, which saves two elementwise launches per layer."""
        if _skinny(x, self.weight, _HALF) and x.dtype == self.weight.dtype:
            return gemv_kernel.gemv(x, self.weight, self.bias, relu2=True)
        return torch.square(F.relu(F.linear(x, self.weight, self.bias)))


_HALF = (torch.bfloat16, torch.float16)


def _skinny(x: torch.Tensor, w: torch.Tensor, weight_dtypes: tuple[torch.dtype, ...]) -> bool:
    return (
        _USE_GEMV
        and x.is_cuda
        and x.dim() == 2
        and x.shape[0] <= gemv_kernel.MAX_ROWS
        and w.dtype in weight_dtypes
        and x.stride(1) == 1
    )


def fp32_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x.float() @ weight.float().T (MoE routers stay fp32); for skinny inputs one GEMV
    launch that upcasts as it reads instead of a cast plus a cuBLAS fp32 GEMV (two kernels)."""
    if _skinny(x, weight, (torch.float32,)) and x.dtype in _HALF:
        return gemv_kernel.gemv(x, weight, out_dtype=torch.float32)
    return F.linear(x.float(), weight.float())
