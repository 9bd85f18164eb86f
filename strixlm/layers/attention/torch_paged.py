"""Paged attention in plain PyTorch: the reference backend, on CPU and CUDA.

Decode rows (one query each) are batched: their K/V are gathered through the block table
into a padded [B, S] view and attended with one SDPA call. Rows with several queries
(prefill chunks) are attended one by one with a causal mask offset by their cached context.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from strixlm.kernels.kv_write import copy_to_slots
from strixlm.layers.attention.backend import AttentionBackend
from strixlm.layers.attention.metadata import AttentionMetadata


def write_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    copy_to_slots(kv_cache, slots, k, v)


def gather_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, num_kv: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of the first num_kv tokens of each row: [B, Hkv, num_kv, D]."""
    _, _, bs, h, d = kv_cache.shape
    nblk = -(-num_kv // bs)
    bt = block_table[:, :nblk].long()
    k = kv_cache[0][bt].reshape(bt.shape[0], nblk * bs, h, d)[:, :num_kv]
    v = kv_cache[1][bt].reshape(bt.shape[0], nblk * bs, h, d)[:, :num_kv]
    return k.transpose(1, 2), v.transpose(1, 2)


class TorchPagedAttention(AttentionBackend):
    name = "torch"

    def write_kv(self, k, v, kv_cache, md: AttentionMetadata) -> None:
        write_kv(kv_cache, k, v, md.slot_mapping)

    def attend(self, q, kv_cache, md: AttentionMetadata):
        out = torch.empty_like(q)
        gqa = self.num_heads != self.num_kv_heads
        if md.decode_rows is not None:
            self._decode(q, kv_cache, md, out, gqa)
        for i, qlen in enumerate(md.query_lens_cpu):
            if qlen <= 1:
                continue
            start = md.query_start_loc_cpu[i]
            seq_len = md.seq_lens_cpu[i]
            kk, vv = gather_kv(kv_cache, md.block_table[i : i + 1], seq_len)
            qq = q[start : start + qlen].transpose(0, 1).unsqueeze(0)
            # Query j sits at position seq_len - qlen + j and sees keys 0..that position.
            qpos = torch.arange(seq_len - qlen, seq_len, device=q.device).unsqueeze(1)
            kpos = torch.arange(seq_len, device=q.device).unsqueeze(0)
            mask = kpos <= qpos
            o = F.scaled_dot_product_attention(
                qq,
                kk.to(q.dtype),
                vv.to(q.dtype),
                attn_mask=mask,
                scale=self.scale,
                enable_gqa=gqa,
            )
            out[start : start + qlen] = o[0].transpose(0, 1)
        return out

    def _decode(self, q, kv_cache, md, out, gqa):
        idx = md.decode_rows
        token_idx = md.query_start_loc[idx].long()
        seq_lens = md.seq_lens[idx]
        max_len = md.max_decode_seq_len
        kk, vv = gather_kv(kv_cache, md.block_table[idx], max_len)
        qq = q[token_idx].unsqueeze(2)  # [B, Hq, 1, D]
        mask = torch.arange(max_len, device=q.device).unsqueeze(0) < seq_lens.unsqueeze(1)
        o = F.scaled_dot_product_attention(
            qq,
            kk.to(q.dtype),
            vv.to(q.dtype),
            attn_mask=mask[:, None, None, :],
            scale=self.scale,
            enable_gqa=gqa,
        )
        out[token_idx] = o.squeeze(2)
