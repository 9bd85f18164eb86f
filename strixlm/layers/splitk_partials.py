"""SplitKPartials: a linear layer's output left unreduced for its consumer to sum.

Kept apart from the kernel (strixlm/kernels/splitk_linear.py) so that the layers that only
need to recognise partials (RMSNorm) never import triton.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SplitKPartials:
    """x @ w.T not yet reduced: parts is fp32 [S, M, N] with x @ w.T == sum over s of
    parts[s]; dtype is what F.linear would have returned (x's dtype)."""

    parts: torch.Tensor
    dtype: torch.dtype

    @property
    def shape(self) -> torch.Size:
        return self.parts.shape[1:]

    @property
    def device(self) -> torch.device:
        return self.parts.device

    def materialize(self) -> torch.Tensor:
        """The plain [M, N] output: parts summed in order s = 0..S-1 in fp32 (the order the
        reducing norm kernel uses), rounded once to dtype."""
        acc = self.parts[0].clone()
        for s in range(1, self.parts.shape[0]):
            acc += self.parts[s]
        return acc.to(self.dtype)
