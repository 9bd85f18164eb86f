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
        w = self.weight
        if (
            _USE_GEMV
            and x.is_cuda
            and x.dim() == 2
            and x.shape[0] <= gemv_kernel.MAX_ROWS
            and w.dtype in (torch.bfloat16, torch.float16)
            and x.dtype == w.dtype
            and x.stride(1) == 1
        ):
            return gemv_kernel.gemv(x, w, self.bias)
        return F.linear(x, w, self.bias)
