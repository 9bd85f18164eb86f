"""How a hybrid (Mamba-2 + attention) model keeps both kinds of state in one block pool.

The pool is one uint8 tensor [num_slots, 2, num_blocks, half_page]. A block id names the
same page (both halves) in every slot; whichever KV-cache group owns the block uses it in
each of its slots. Every group has num_slots "layer slots":
  - an attention layer takes a whole slot and sees it as its usual KV cache
    [2, num_blocks, block_size, num_kv_heads, head_dim] (K in half 0, V in half 1), so the
    attention backends run unchanged;
  - a Mamba layer takes one half of a slot: its conv state and fp32 SSM state of one
    request sit inside one half-page. Two Mamba layers share a slot.
The attention block size is raised (in multiples of 16 tokens) until a K half-page holds one
Mamba layer's state, so no Mamba page needs padding beyond that half-page.

A request holds ceil(tokens / block_size) blocks of each attention group and exactly one
block of each Mamba group (its running state).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strixlm.core.kv_cache_manager import KVCacheGroupSpec

# Byte alignment of the SSM state inside a half-page and of a half-page itself.
_ALIGN = 64


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _elem(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class AttentionShape:
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype  # the KV cache dtype

    @property
    def bytes_per_token_half(self) -> int:
        """Bytes of K (or V) of one token of one layer."""
        return self.num_kv_heads * self.head_dim * _elem(self.dtype)


@dataclass(frozen=True)
class MambaStateShape:
    conv_dim: int
    conv_width: int  # the conv kernel size; the state keeps width - 1 past inputs
    num_heads: int
    head_dim: int
    state_size: int
    conv_dtype: torch.dtype
    ssm_dtype: torch.dtype = torch.float32

    @property
    def conv_bytes(self) -> int:
        return self.conv_dim * (self.conv_width - 1) * _elem(self.conv_dtype)

    @property
    def ssm_offset(self) -> int:
        return _round_up(self.conv_bytes, _ALIGN)

    @property
    def ssm_bytes(self) -> int:
        return self.num_heads * self.head_dim * self.state_size * _elem(self.ssm_dtype)

    @property
    def nbytes(self) -> int:
        """One request's state of one layer, as laid out in a half-page."""
        return self.ssm_offset + self.ssm_bytes


@dataclass(frozen=True)
class LayerPlace:
    group: int  # KV-cache group index
    slot: int
    half: int  # 0 or 1 for a Mamba layer; -1 for attention (both halves)


@dataclass(frozen=True)
class HybridCacheLayout:
    block_size: int
    half_page_bytes: int
    num_slots: int
    attention: tuple[LayerPlace, ...]
    mamba: tuple[LayerPlace, ...]
    groups: tuple[KVCacheGroupSpec, ...]
    attn_shape: AttentionShape | None
    mamba_shape: MambaStateShape

    @property
    def bytes_per_block(self) -> int:
        return self.num_slots * 2 * self.half_page_bytes

    @property
    def mamba_group_range(self) -> tuple[int, int]:
        """Mamba groups come after the attention groups: [first, end)."""
        first = min((p.group for p in self.mamba), default=len(self.groups))
        return first, len(self.groups)

    def attention_regions(self) -> list[int]:
        """Half-page regions (slot * 2 + half) that attention layers use: zeroed on reuse."""
        slots = sorted({p.slot for p in self.attention})
        return [s * 2 + h for s in slots for h in (0, 1)]

    def allocate(self, num_blocks: int, device: str | torch.device) -> torch.Tensor:
        return torch.zeros(
            self.num_slots, 2, num_blocks, self.half_page_bytes, dtype=torch.uint8, device=device
        )

    def attention_view(self, pool: torch.Tensor, layer: int) -> torch.Tensor:
        """The KV cache of attention layer `layer`: [2, num_blocks, block_size, Hkv, D]."""
        a = self.attn_shape
        place = self.attention[layer]
        nb = pool.shape[2]
        raw = pool[place.slot].view(a.dtype)  # [2, nb, half / elem], contiguous
        return raw.view(2, nb, self.block_size, a.num_kv_heads, a.head_dim)

    def mamba_views(self, pool: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Strided state views of Mamba layer `layer`, indexed by block id:
        conv [num_blocks, conv_dim, width - 1], ssm [num_blocks, heads, head_dim, state]."""
        m = self.mamba_shape
        place = self.mamba[layer]
        nb = pool.shape[2]
        raw = pool[place.slot, place.half]  # [nb, half_page]
        conv = raw[:, : m.conv_bytes].view(m.conv_dtype).view(nb, m.conv_dim, m.conv_width - 1)
        ssm_raw = raw[:, m.ssm_offset : m.ssm_offset + m.ssm_bytes].view(m.ssm_dtype)
        ssm = ssm_raw.view(nb, m.num_heads, m.head_dim, m.state_size)
        return conv, ssm


def _slots_per_group(num_attn: int, num_mamba: int) -> int:
    """Layer slots per group: a divisor of the attention layer count (so attention pages
    are never padded) that wastes the fewest Mamba half-pages; ties go to fewer groups."""
    if num_attn == 0:
        return 1

    def mamba_waste(s: int) -> int:
        return 2 * s * -(-num_mamba // (2 * s)) - num_mamba

    divisors = [s for s in range(1, num_attn + 1) if num_attn % s == 0]
    return min(divisors, key=lambda s: (mamba_waste(s), -s))


def choose_block_size(min_block_size: int, attn: AttentionShape | None, mamba_bytes: int) -> int:
    """Smallest block size >= min_block_size whose K half-page holds one Mamba state;
    raised in multiples of 16 tokens."""
    if attn is None:
        return min_block_size
    per_tok = attn.bytes_per_token_half
    bs = min_block_size
    if bs * per_tok < mamba_bytes or (bs * per_tok) % _ALIGN:
        bs = _round_up(max(min_block_size, -(-mamba_bytes // per_tok)), 16)
        while (bs * per_tok) % _ALIGN:
            bs += 16
    return bs


def plan_hybrid_layout(
    attn: AttentionShape | None,
    num_attn: int,
    mamba: MambaStateShape,
    num_mamba: int,
    min_block_size: int,
) -> HybridCacheLayout:
    """Groups, slots and block size of a hybrid model's pool (see the module docstring)."""
    if num_mamba <= 0:
        raise ValueError("a hybrid layout needs at least one Mamba layer")
    if num_attn > 0 and attn is None:
        raise ValueError("attention layers need an AttentionShape")
    bs = choose_block_size(min_block_size, attn if num_attn else None, mamba.nbytes)
    if num_attn:
        half = bs * attn.bytes_per_token_half
    else:
        half = _round_up(mamba.nbytes, _ALIGN)
    slots = _slots_per_group(num_attn, num_mamba)
    groups: list[KVCacheGroupSpec] = []
    attention: list[LayerPlace] = []
    mamba_places: list[LayerPlace] = []
    for start in range(0, num_attn, slots):
        g = len(groups)
        names = []
        for i in range(start, min(start + slots, num_attn)):
            attention.append(LayerPlace(g, i - start, -1))
            names.append(f"attention.{i}")
        groups.append(KVCacheGroupSpec("full_attention", tuple(names), bs))
    per_group = 2 * slots
    for start in range(0, num_mamba, per_group):
        g = len(groups)
        names = []
        for i in range(start, min(start + per_group, num_mamba)):
            k = i - start
            mamba_places.append(LayerPlace(g, k // 2, k % 2))
            names.append(f"mamba.{i}")
        groups.append(KVCacheGroupSpec("mamba", tuple(names), bs))
    return HybridCacheLayout(
        block_size=bs,
        half_page_bytes=half,
        num_slots=slots,
        attention=tuple(attention),
        mamba=tuple(mamba_places),
        groups=tuple(groups),
        attn_shape=attn if num_attn else None,
        mamba_shape=mamba,
    )
