"""Sampled tokens into the state table, on the device, in one launch.

For each sampled row b (state-table row rows[b]), unless rows[b] is `skip_row`:
    token_ids[rows[b], num_tokens[rows[b]]] = sampled[b]
    num_tokens[rows[b]] += 1
The next step's input preparation reads the token from there, so it never visits the host.
`skip_row` is the state table's dummy row in a CUDA graph padded past the real rows (their
writes would pile up on it); -1 when every row is real. The rows of one call are distinct.
Torch spells this as four indexing ops and their int casts (~7 launches a step on the
host's critical path); the kernel is one.
"""

from __future__ import annotations

import torch

from strixlm.kernels.dispatch import HAS_TRITON, use_triton

if HAS_TRITON:
    import triton
    import triton.language as tl


def append_tokens_ref(
    token_ids: torch.Tensor,  # [R, L] int32
    num_tokens: torch.Tensor,  # [R] int32
    rows: torch.Tensor,  # [B] int32
    sampled: torch.Tensor,  # [B] any int dtype
    skip_row: int = -1,
) -> None:
    # No boolean indexing (a host sync on CUDA): skipped rows rewrite what they hold.
    keep = rows != skip_row
    r = rows.long()
    n = num_tokens[r].long()
    token_ids[r, n] = torch.where(keep, sampled.to(token_ids.dtype), token_ids[r, n])
    num_tokens[r] += keep.to(num_tokens.dtype)


if HAS_TRITON:
    # The row count follows the step: specialized, each new value class would compile.
    @triton.jit(do_not_specialize=["num_rows", "skip_row"])
    def _append_tokens_kernel(token_ids_ptr, tok_stride, num_tokens_ptr, rows_ptr, sampled_ptr,
                              num_rows, skip_row, BLOCK: tl.constexpr):  # fmt: skip
        b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        # Lanes past the batch read as skip_row: the last block is partly empty.
        row = tl.load(rows_ptr + b, mask=b < num_rows, other=skip_row)
        ok = row != skip_row
        row = tl.where(ok, row, 0).to(tl.int64)
        n = tl.load(num_tokens_ptr + row, mask=ok, other=0)
        tok = tl.load(sampled_ptr + b, mask=ok, other=0)
        tl.store(token_ids_ptr + row * tok_stride + n, tok.to(tl.int32), mask=ok)
        tl.store(num_tokens_ptr + row, n + 1, mask=ok)


_BLOCK = 128


def append_tokens(
    token_ids: torch.Tensor,
    num_tokens: torch.Tensor,
    rows: torch.Tensor,
    sampled: torch.Tensor,
    skip_row: int = -1,
) -> None:
    """Append one sampled token per row (see the module docstring); Triton on CUDA."""
    n = rows.numel()
    if n == 0:
        return
    if not use_triton(token_ids):
        append_tokens_ref(token_ids, num_tokens, rows, sampled, skip_row)
        return
    _append_tokens_kernel[(triton.cdiv(n, _BLOCK),)](
        token_ids, token_ids.stride(0), num_tokens, rows, sampled, n, skip_row, BLOCK=_BLOCK
    )
