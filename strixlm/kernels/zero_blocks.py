"""Zero whole pages of the KV block pool: one batched Triton kernel, with a torch reference.

The pool is seen as a flat int64 buffer. A "region" is one half-page array of the pool (for
a hybrid model: K or V of one layer slot); block b of region r starts at word
region_offsets[r] + b * words_per_block. One launch zeroes every (block, region) pair:
programs along axis 0 walk the block ids, axis 1 the regions, axis 2 the chunks of a page.

Used for blocks newly handed to attention layers of a hybrid model: a block that last held
fp32 Mamba state reads as NaN/Inf in bf16/fp8, and 0 x NaN = NaN leaks through masked
attention. The region offsets are computed once; block ids change every step.
"""

from __future__ import annotations

import torch

from strixlm.kernels.dispatch import use_triton

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU-only installs without triton
    HAS_TRITON = False

# Words (int64) zeroed per program; a 4 MiB page is 128 programs.
_CHUNK_WORDS = 4096


def zero_blocks_ref(
    words: torch.Tensor,
    region_offsets: torch.Tensor,
    block_ids: torch.Tensor,
    words_per_block: int,
) -> None:
    """Torch reference: words[off_r + b * wpb : off_r + (b + 1) * wpb] = 0 for all r, b."""
    _check(words, region_offsets, block_ids)
    if block_ids.numel() == 0 or region_offsets.numel() == 0:
        return
    starts = region_offsets.long()[:, None] + block_ids.long()[None, :] * words_per_block
    idx = starts.reshape(-1, 1) + torch.arange(words_per_block, device=words.device)
    words.index_fill_(0, idx.reshape(-1), 0)


def _check(words: torch.Tensor, region_offsets: torch.Tensor, block_ids: torch.Tensor) -> None:
    if words.dtype != torch.int64 or words.dim() != 1 or not words.is_contiguous():
        raise ValueError("words must be a contiguous 1-D int64 view of the pool")
    if region_offsets.dtype != torch.int64:
        raise ValueError("region_offsets must be int64")
    if block_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError("block_ids must be an integer tensor")


if HAS_TRITON:

    @triton.jit
    def _zero_blocks_kernel(
        words_ptr,
        region_offsets_ptr,
        block_ids_ptr,
        words_per_block,
        CHUNK: tl.constexpr,
    ):
        blk = tl.load(block_ids_ptr + tl.program_id(0)).to(tl.int64)
        start = tl.load(region_offsets_ptr + tl.program_id(1)) + blk * words_per_block
        offs = tl.program_id(2).to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
        zeros = tl.zeros([CHUNK], dtype=tl.int64)
        tl.store(words_ptr + start + offs, zeros, mask=offs < words_per_block)

    def zero_blocks_triton(
        words: torch.Tensor,
        region_offsets: torch.Tensor,
        block_ids: torch.Tensor,
        words_per_block: int,
    ) -> None:
        """Triton path: one launch; the grid comes from host shapes only (no device read)."""
        _check(words, region_offsets, block_ids)
        n = block_ids.numel()
        r = region_offsets.numel()
        if n == 0 or r == 0:
            return
        chunk = min(_CHUNK_WORDS, triton.next_power_of_2(words_per_block))
        grid = (n, r, triton.cdiv(words_per_block, chunk))
        _zero_blocks_kernel[grid](
            words, region_offsets, block_ids, words_per_block, CHUNK=chunk, num_warps=4
        )


def zero_blocks(
    words: torch.Tensor,
    region_offsets: torch.Tensor,
    block_ids: torch.Tensor,
    words_per_block: int,
) -> None:
    """Triton on CUDA, the torch reference elsewhere."""
    if use_triton(words):
        zero_blocks_triton(words, region_offsets, block_ids, words_per_block)
    else:
        zero_blocks_ref(words, region_offsets, block_ids, words_per_block)
