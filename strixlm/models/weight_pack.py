"""The decoder layers' projection weights in one buffer, in the order the ping-pong's GEMM
lane reads them (models/pingpong.py).

Layer by layer: qkv, o_proj, gate_up, down. What the GEMM lane runs for one half-batch
between two of its attentions is o_proj, gate_up and down of layer L, then qkv of layer
L + 1: in this order, one contiguous range, which one L2 access-policy window can cover
(kernels/l2_window.py). Packed once after loading, before any graph records a pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

ALIGN_BYTES = 256  # each weight starts on a 256-byte boundary (vector loads, TMA)


def layer_weights(layer: nn.Module) -> list[nn.Parameter]:
    """A Llama-family decoder layer's projection weights, in the GEMM lane's order."""
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.qkv_proj.weight, attn.o_proj.weight, mlp.gate_up_proj.weight, mlp.down_proj.weight]


@dataclass(frozen=True)
class PackedWeights:
    """The buffer and, per layer, byte ranges [start, end) from its first byte: the qkv
    weight, and o_proj's start to down's end."""

    buffer: torch.Tensor
    qkv: list[tuple[int, int]]
    post: list[tuple[int, int]]

    @property
    def base(self) -> int:
        return self.buffer.data_ptr()

    def layer(self, layer: int) -> tuple[int, int]:
        """All four of a layer's weights: its qkv's start to its down's end."""
        return self.qkv[layer][0], self.post[layer][1]

    def chunk(self, layer: int) -> tuple[int, int]:
        """Bytes a half-batch's GEMMs read after layer `layer`'s attention: its o_proj,
        gate_up and down, and the next layer's qkv (none after the last)."""
        end = self.qkv[layer + 1][1] if layer + 1 < len(self.qkv) else self.post[layer][1]
        return self.post[layer][0], end


def pack_layer_weights(layers: list[nn.Module]) -> PackedWeights:
    """Copy the layers' projection weights into one buffer, in order, and make each
    parameter a view of its place there. Values and shapes are unchanged."""
    params = [p for layer in layers for p in layer_weights(layer)]
    dtype, device = params[0].dtype, params[0].device
    if any(p.dtype != dtype or p.device != device for p in params):
        raise ValueError("packing needs every projection weight in one dtype, on one device")
    align = max(1, ALIGN_BYTES // params[0].element_size())
    offsets, total = [], 0
    for p in params:
        offsets.append(total)
        total += -(-p.numel() // align) * align
    buffer = torch.empty(total, dtype=dtype, device=device)
    with torch.no_grad():
        for p, off in zip(params, offsets, strict=True):
            view = buffer[off : off + p.numel()].view(p.shape)
            view.copy_(p.data)
            p.data = view
    if device.type == "cuda":  # the old weights' blocks: back to the device before KV sizing
        torch.cuda.empty_cache()
    size = params[0].element_size()

    def span(i: int, j: int) -> tuple[int, int]:  # params i..j (inclusive), in bytes
        return offsets[i] * size, (offsets[j] + params[j].numel()) * size

    qkv = [span(4 * n, 4 * n) for n in range(len(layers))]
    post = [span(4 * n + 1, 4 * n + 3) for n in range(len(layers))]
    return PackedWeights(buffer, qkv, post)
