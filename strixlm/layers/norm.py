"""RMSNorm, optionally fused with the residual add that precedes it."""

from __future__ import annotations

import torch
from torch import nn

# use_triton: the Triton kernel on CUDA; the torch code (HF's numerics) on CPU or disabled.
from strixlm.kernels.dispatch import use_triton
from strixlm.layers.splitk_partials import SplitKPartials


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        # Compute in fp32 as HF does, cast back before the weight multiply.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)

    def forward(
        self, x: torch.Tensor | SplitKPartials, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """With a residual: returns (norm(x + residual), x + residual).

        On CUDA (Triton) the sum is written into `residual` in place and returned. x may be
        a linear layer's split-K partials: the fused kernel sums them itself; every other
        path sums them first (SplitKPartials.materialize) and goes on as for a tensor.
        """
        if isinstance(x, SplitKPartials) and (residual is None or not use_triton(x.parts)):
            x = x.materialize()
        if use_triton(x.parts if isinstance(x, SplitKPartials) else x):
            # Imported here so CPU-only runs never import triton.
            from strixlm.kernels.rmsnorm import fused_add_rmsnorm, rmsnorm

            if residual is None:
                return rmsnorm(x, self.weight, self.eps)
            return fused_add_rmsnorm(x, residual, self.weight, self.eps)
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x
