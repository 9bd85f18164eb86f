"""Stateless, counter-based random numbers for the Gumbel-max sampler.

Every uniform is a pure function of (seed, position, token id): no generator state is kept
between steps, so a request samples the same tokens whatever else shares its batch, in
whatever row order, and a preempted or re-batched request replays identically.

The exact hash (the Triton kernel must compute these same bits). All values are unsigned
32-bit; ``+`` and ``*`` wrap modulo 2**32; ``^`` is xor; ``>>`` is a logical shift::

    fmix32(x):                       # MurmurHash3 32-bit finalizer
        x ^= x >> 16; x *= 0x85EBCA6B
        x ^= x >> 13; x *= 0xC2B2AE35
        x ^= x >> 16
    absorb(k, x) = fmix32((k ^ x) + 0x9E3779B9)

    seed_lo, seed_hi = low, high 32 bits of the seed's 64-bit two's-complement pattern
    pos_lo,  pos_hi  = low, high 32 bits of the position
    k    = absorb(absorb(absorb(absorb(0x243F6A88, seed_lo), seed_hi), pos_lo), pos_hi)
    a[v] = fmix32(v + 0x7F4A7C15)    # per token id; the same for every row
    h    = fmix32(k ^ a[v])
    u    = (2 * (h >> 9) + 1) * 2**-24  # odd multiples of 2**-24: exact in float32,
                                      # strictly inside (0, 1): [2**-24, 1 - 2**-24]
    gumbel = -log(-log(u))            # float32

For a fixed seed, ``absorb`` is a bijection in the position, so two positions of one
sequence never share a row key. Hashing the token id before the xor (rather than adding
``v * const``) keeps two rows from ever being shifted copies of one another.

In torch the 32-bit lanes live in int64 tensors; a product of two 32-bit values may pass
2**63 and wrap, which torch does (two's complement) on CPU and CUDA alike, and the low 32
bits kept by the mask are exact either way. In Triton, cast to ``tl.uint32`` and use plain
``*`` / ``+`` (which wrap mod 2**32) and ``>>`` (logical on unsigned): the bits match.
"""

from __future__ import annotations

import functools

import torch

MASK32 = 0xFFFFFFFF
FMIX_C1 = 0x85EBCA6B
FMIX_C2 = 0xC2B2AE35
ABSORB_C = 0x9E3779B9
KEY_INIT = 0x243F6A88
VOCAB_C = 0x7F4A7C15

# Rows are processed in chunks so the int64 temporaries stay around 2**24 elements.
_CHUNK_ELEMS = 1 << 24


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32): the wrapped int64 product keeps the low bits."""
    return (x * c) & MASK32


def fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3 finalizer on uint32 values held in an int64 tensor."""
    x = x ^ (x >> 16)
    x = _mul32(x, FMIX_C1)
    x = x ^ (x >> 13)
    x = _mul32(x, FMIX_C2)
    return x ^ (x >> 16)


def _absorb(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return fmix32(((k ^ x) + ABSORB_C) & MASK32)


def row_keys(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[B] int64 row keys in [0, 2**32) from int64 seeds and positions."""
    seeds = seeds.to(torch.int64)
    positions = positions.to(torch.int64)
    # `& MASK32` after an arithmetic shift gives the two's-complement high word.
    k = torch.full_like(seeds, KEY_INIT)
    k = _absorb(k, seeds & MASK32)
    k = _absorb(k, (seeds >> 32) & MASK32)
    k = _absorb(k, positions & MASK32)
    return _absorb(k, (positions >> 32) & MASK32)


@functools.lru_cache(maxsize=8)
def vocab_keys(vocab_size: int, device: torch.device | str) -> torch.Tensor:
    """[V] int64 per-token-id keys a[v]; the same every step, so computed once."""
    v = torch.arange(vocab_size, dtype=torch.int64, device=device)
    return fmix32((v + VOCAB_C) & MASK32)


def hash_bits(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, V] int64 32-bit hashes h (mainly for tests; the sampler uses gumbel_noise)."""
    k = row_keys(seeds, positions)
    a = vocab_keys(vocab_size, seeds.device)
    return fmix32(k[:, None] ^ a[None, :])


def bits_to_uniform(h: torch.Tensor) -> torch.Tensor:
    """Top 23 bits to a float32 uniform strictly inside (0, 1), exactly representable.

    2 * m + 1 < 2**24 fits float32's 24-bit significand; with 24 bits, (m + 0.5) * 2**-24
    would round up to exactly 1.0 at the top.
    """
    return (((h >> 9) << 1) | 1).to(torch.float32) * (2.0**-24)


def gumbel_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, V] float32 standard Gumbel noise, a pure function of (seed, position, token id)."""
    num_rows = seeds.shape[0]
    out = torch.empty(num_rows, vocab_size, dtype=torch.float32, device=seeds.device)
    if num_rows == 0 or vocab_size == 0:
        return out
    k = row_keys(seeds, positions)
    a = vocab_keys(vocab_size, seeds.device)
    step = max(1, _CHUNK_ELEMS // vocab_size)
    for start in range(0, num_rows, step):
        h = fmix32(k[start : start + step, None] ^ a[None, :])
        u = bits_to_uniform(h)
        out[start : start + step] = -_log_f32(-_log_f32(u))
    return out


def _log_f32(x: torch.Tensor) -> torch.Tensor:
    """float32 log: on CUDA torch's (libdevice logf, the sampler kernel's exact bits); on
    CPU the float64 log rounded to float32, because torch's float32 CPU log came out up to
    1e-4 off in about one process in eight (torch 2.13, this 2-core box), which made the CPU
    sampler's tokens depend on the process."""
    return torch.log(x) if x.is_cuda else torch.log(x.double()).float()
