"""The Mamba-2 mixer over packed sequences, with its state in the shared block pool.

in_proj -> [z | xBC | dt]; xBC goes through a causal depthwise conv (SiLU), splits into
x, B, C; the SSD scan (A = -exp(A_log), dt' = clamp(softplus(dt + dt_bias)), D skip) runs
per sequence from the request's saved state; y is gated by z and normalised per group
(gated grouped RMSNorm), then out_proj. The runner binds conv_states / ssm_states (views
into the pool, indexed by block id) and the step's MambaMetadata picks each request's
slot: the block it holds in this layer's KV-cache group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from strixlm.kernels.dispatch import use_triton
from strixlm.kernels.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_ref
from strixlm.kernels.mamba import (
    SSDChunks,
    causal_conv1d_update,
    causal_conv1d_varlen,
    prepare_ssd_chunks,
    selective_state_update,
    ssd_scan_varlen,
)
from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.layers.linear import Linear


@dataclass
class MambaMetadata:
    """Per-step inputs shared by every Mamba layer."""

    num_tokens: int
    query_start_loc: torch.Tensor  # [B+1] int32, device
    # [num_mamba_groups, B] int32: the block (state slot) each request holds in each group.
    state_indices: torch.Tensor
    has_initial_state: torch.Tensor  # [B] bool: the request has computed tokens before
    # Every request continues a state with exactly one token: the recurrent kernels run.
    is_decode: bool
    # Chunk tables of the varlen scan, built once per chunk size and shared by the layers.
    _chunks: dict[int, SSDChunks] = field(default_factory=dict)

    def chunks(self, chunk_size: int) -> SSDChunks:
        table = self._chunks.get(chunk_size)
        if table is None:
            table = prepare_ssd_chunks(self.query_start_loc, self.num_tokens, chunk_size)
            self._chunks[chunk_size] = table
        return table


@dataclass
class HybridMetadata:
    """What a hybrid model's forward gets: attention and Mamba metadata of one step."""

    attn: AttentionMetadata
    mamba: MambaMetadata


class GatedGroupRMSNorm(nn.Module):
    """y = weight * rmsnorm_per_group(x * silu(z)), in fp32, cast back to x's dtype."""

    def __init__(self, hidden_size: int, group_size: int, eps: float) -> None:
        super().__init__()
        if hidden_size % group_size:
            raise ValueError(f"hidden size {hidden_size} is not a multiple of {group_size}")
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.group_size = group_size
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        # One Triton launch on CUDA; the torch reference (HF's numerics) elsewhere.
        if use_triton(x) and x.dim() == 2 and x.stride(1) == 1 and z.stride(1) == 1:
            return gated_rmsnorm(x, z, self.weight, self.group_size, self.eps)
        return gated_rmsnorm_ref(x, z, self.weight, self.group_size, self.eps)


@dataclass(frozen=True)
class Mamba2Dims:
    hidden_size: int
    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    chunk_size: int
    use_conv_bias: bool
    use_bias: bool
    norm_eps: float
    dt_limit: tuple[float, float]

    @property
    def intermediate_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate_size + 2 * self.n_groups * self.state_size


class Mamba2Mixer(nn.Module):
    def __init__(self, dims: Mamba2Dims) -> None:
        super().__init__()
        self.dims = dims
        inter, conv_dim, heads = dims.intermediate_size, dims.conv_dim, dims.num_heads
        self.in_proj = Linear(dims.hidden_size, inter + conv_dim + heads, bias=dims.use_bias)
        # The depthwise conv filter, one row per channel (HF's conv1d.weight[:, 0, :]).
        self.conv_weight = nn.Parameter(torch.empty(conv_dim, dims.conv_kernel))
        self.conv_bias = nn.Parameter(torch.empty(conv_dim)) if dims.use_conv_bias else None
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.norm = GatedGroupRMSNorm(inter, inter // dims.n_groups, dims.norm_eps)
        self.out_proj = Linear(inter, dims.hidden_size, bias=dims.use_bias)
        # Bound by the runner after the pool is allocated.
        self.conv_states: torch.Tensor | None = None  # [num_blocks, conv_dim, width - 1]
        self.ssm_states: torch.Tensor | None = None  # [num_blocks, heads, head_dim, state]
        self.state_group = 0  # row of MambaMetadata.state_indices this layer reads
        self._a: tuple[int, torch.Tensor] | None = None  # (A_log version, -exp(A_log))

    def _decay(self) -> torch.Tensor:
        """A = -exp(A_log) in fp32, computed once per value of A_log (three small kernels
        per layer and step otherwise); a weight load bumps the parameter's version."""
        version = self.A_log._version
        if self._a is None or self._a[1].device != self.A_log.device:
            self._a = (version, -torch.exp(self.A_log.detach().float()))
        elif self._a[0] != version:
            # In place: a captured CUDA graph keeps reading this tensor.
            self._a[1].copy_(-torch.exp(self.A_log.detach().float()))
            self._a = (version, self._a[1])
        return self._a[1]

    def forward(self, hidden: torch.Tensor, md: MambaMetadata) -> torch.Tensor:
        d = self.dims
        t = hidden.shape[0]
        inter, conv_dim, heads = d.intermediate_size, d.conv_dim, d.num_heads
        z, xbc, dt = self.in_proj(hidden).split([inter, conv_dim, heads], dim=-1)
        slots = md.state_indices[self.state_group]
        if md.is_decode:
            xbc = causal_conv1d_update(
                xbc, self.conv_weight, self.conv_bias, self.conv_states, slots, "silu"
            )
        else:
            xbc = causal_conv1d_varlen(
                xbc,
                self.conv_weight,
                self.conv_bias,
                self.conv_states,
                md.query_start_loc,
                slots,
                md.has_initial_state,
                "silu",
            )
        gn = d.n_groups * d.state_size
        x, b, c = xbc.split([inter, gn, gn], dim=-1)
        x = x.reshape(t, heads, d.head_dim)
        b = b.reshape(t, d.n_groups, d.state_size)
        c = c.reshape(t, d.n_groups, d.state_size)
        a = self._decay()
        if md.is_decode:
            y = selective_state_update(
                self.ssm_states, x, dt, a, b, c, self.D, self.dt_bias, slots, True, d.dt_limit
            )
        else:
            y = ssd_scan_varlen(
                x,
                dt,
                a,
                b,
                c,
                self.D,
                self.dt_bias,
                self.ssm_states,
                md.query_start_loc,
                slots,
                md.has_initial_state,
                d.chunk_size,
                dt_softplus=True,
                dt_limit=d.dt_limit,
                # The reference path ignores the chunk table: build it only for the kernels.
                chunks=md.chunks(d.chunk_size) if hidden.is_cuda else None,
            )
        y = self.norm(y.reshape(t, inter), z)
        return self.out_proj(y)
