"""Rotary position embedding (neox layout: the two halves of each head are rotated)."""

from __future__ import annotations

import math

import torch
from torch import nn

# use_triton: the Triton kernel on CUDA; the torch code (HF's numerics) on CPU or disabled.
from strixlm.kernels.dispatch import use_triton


def _llama3_inv_freq(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    factor = params["factor"]
    low = params.get("low_freq_factor", 1.0)
    high = params.get("high_freq_factor", 4.0)
    old_len = params["original_max_position_embeddings"]
    low_wavelen = old_len / low
    high_wavelen = old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(
        self, head_dim: int, max_position: int, base: float, scaling: dict | None = None
    ) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        rope_type = (scaling or {}).get("rope_type", "default")
        if rope_type == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, scaling)
        elif rope_type != "default":
            raise NotImplementedError(f"rope type {rope_type!r} is not supported yet")
        t = torch.arange(max_position, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)
        self.head_dim = head_dim

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q: [T, Hq, D], k: [T, Hk, D]; rotation computed in fp32 like HF.

        On CUDA (Triton) q and k are rotated in place and returned.
        """
        if use_triton(q):
            from strixlm.kernels.rotary import rotary_inplace

            rotary_inplace(positions, q, k, self.cos, self.sin)
            return q, k
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        cos = torch.cat([cos, cos], dim=-1)
        sin = torch.cat([sin, sin], dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return (xf * cos + rotated * sin).to(x.dtype)
