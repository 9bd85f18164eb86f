"""GPU-native input preparation: a step's model inputs gathered from the state tables.

For each scheduled row b (state-table row rows[b]) and each of its new tokens t, with
pos = num_computed[rows[b]] + (t - query_start_loc[b]):
    input_ids[t]    = token_ids[rows[b], pos]
    positions[t]    = pos
    slot_mapping[t] = block_table[rows[b], pos // block_size] * block_size + pos % block_size
and seq_lens[b] = num_computed[rows[b]] + (query_start_loc[b+1] - query_start_loc[b]).
With num_real (the real rows, before CUDA-graph padding), num_computed[rows[b]] then advances
to seq_lens[b] for b < num_real. CUDA-graph padding needs nothing special here: padded rows
are one-token rows on the state table's dummy row (see worker/cuda_graphs.py), never advanced.

The same launch does the rest of the step's input work, so that a decode step's boundary
is this one kernel between two graphs instead of a chain of copies and small kernels (each
link of which the GPU waits on for a few microseconds):
- the host's arrays come packed (`StagedMeta`: one 16-byte struct per batch row, then the
  block writes), so that a program reads what it needs in one load, and the kernel writes
  the separate device arrays (rows, query_start_loc, order) later kernels read. The packed
  arrays may sit in pinned host memory, read in place (no copy launched before the kernel:
  one PCIe read per program), or in a device copy.
- block-table writes: the step's new block ids, grouped by batch row. Each program applies
  its own row's writes, then reads the row; programs never read a row another program
  writes. Every write's row must be scheduled in the step.
- the attention's block table (`block_table_out[b] = block_table[rows[b]]`): the kernel
  copies the columns row b's sequence uses; the columns past them keep what an earlier step
  left there (block ids all the same: attention never reads past a row's length).

The CPU only sends rows, query_start_loc, the order and the new block ids; everything else is
already on the GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # CPU-only installs run the torch reference
    HAS_TRITON = False


# STRIXLM_PREP_ADVANCE_IN_KERNEL=0: advance num_computed with the eager ops after the kernel
# even for one program per row (A/B runs of the launches saved; read at import). H200,
# 2026-12-02, standard workload alternating three rounds: in-kernel +0.16% (27,067 vs 27,024).
ADVANCE_IN_KERNEL = os.environ.get("STRIXLM_PREP_ADVANCE_IN_KERNEL", "1") != "0"


# Fields of a batch row's struct in StagedMeta.packed.
ROW, QSL, WRITES, ORDER = range(4)


@dataclass
class StagedMeta:
    """A step's host arrays, packed: struct b (4 int32) is (state-table row, query start,
    first block write, order) for b < B, and struct B is (0, total tokens, number of writes,
    0); then the block writes as (flat index into `table`, block id) pairs, row b's being
    pairs [struct b's first write, struct b + 1's). The kernel writes the device copies:
    `rows` and `query_start_loc` (its arguments) and `order_out`."""

    packed: torch.Tensor  # [4 * (B + 1)] int32: pinned host memory or a device tensor
    entries: torch.Tensor  # [2 * num_writes] int32, same memory as packed
    num_writes: int
    table: torch.Tensor  # the whole block table (every KV-cache group), contiguous
    order_out: torch.Tensor  # [B] int32, device


def pack_step_meta(
    out: np.ndarray,
    rows: list[int] | np.ndarray,
    qsl: np.ndarray,
    order: np.ndarray,
    writes: tuple[np.ndarray, np.ndarray] | None,
    entries_at: int,
) -> int:
    """Write StagedMeta's layout into out (int32): structs from 0, pairs from entries_at.
    writes: (offsets [B + 1], pairs [W, 2]) as RequestStateTable.take_block_writes gives
    them. Returns the number of writes."""
    b = len(rows)
    packed = out[: 4 * (b + 1)].reshape(b + 1, 4)
    packed[:b, ROW] = rows
    packed[:, QSL] = qsl
    packed[:b, ORDER] = order
    packed[b, ROW] = packed[b, ORDER] = 0
    if writes is None:
        packed[:, WRITES] = 0
        return 0
    offsets, pairs = writes
    packed[:, WRITES] = offsets
    out[entries_at : entries_at + pairs.size] = pairs.reshape(-1)
    return len(pairs)


def prepare_inputs_ref(
    token_ids: torch.Tensor,  # [R, L]
    num_computed: torch.Tensor,  # [R]
    block_table: torch.Tensor,  # [R, M]
    rows: torch.Tensor,  # [B]
    query_start_loc: torch.Tensor,  # [B+1]
    block_size: int,
    input_ids: torch.Tensor,  # [T_pad] out
    positions: torch.Tensor,  # [T_pad] out
    slot_mapping: torch.Tensor,  # [T_pad] out
    seq_lens: torch.Tensor,  # [B] out
    num_real: int | None = None,
    block_table_out: torch.Tensor | None = None,  # [B, M] out
    staged: StagedMeta | None = None,  # then rows, query_start_loc are outputs too
) -> None:
    if staged is not None:
        packed = staged.packed.view(-1, 4).to(rows.device)
        b = rows.numel()
        rows.copy_(packed[:b, ROW])
        query_start_loc.copy_(packed[:, QSL])
        staged.order_out.copy_(packed[:b, ORDER])
        if staged.num_writes:
            pairs = staged.entries.view(-1, 2).long().to(rows.device)
            staged.table.view(-1)[pairs[:, 0]] = pairs[:, 1].to(staged.table.dtype)
    if block_table_out is not None:
        block_table_out.copy_(block_table.index_select(0, rows.long()))
    rows = rows.long()
    qsl = query_start_loc.long()
    counts = qsl[1:] - qsl[:-1]
    total = int(qsl[-1])
    row_of_tok = torch.repeat_interleave(torch.arange(rows.numel(), device=rows.device), counts)
    start = num_computed[rows].long()
    pos = start[row_of_tok] + torch.arange(total, device=rows.device) - qsl[:-1][row_of_tok]
    r = rows[row_of_tok]
    input_ids[:total] = token_ids[r, pos].to(input_ids.dtype)
    positions[:total] = pos.to(positions.dtype)
    blk = block_table[r, pos // block_size].long()
    slot_mapping[:total] = (blk * block_size + pos % block_size).to(slot_mapping.dtype)
    seq_lens.copy_((start + counts).to(seq_lens.dtype))
    if num_real is not None:
        advance_rows(num_computed, rows, query_start_loc, num_real)


def advance_rows(
    num_computed: torch.Tensor, rows: torch.Tensor, query_start_loc: torch.Tensor, n: int
) -> None:
    """num_computed[rows[b]] += query length of b, for b < n (eager ops)."""
    counts = query_start_loc[1 : n + 1] - query_start_loc[:n]
    num_computed.index_add_(0, rows[:n], counts.to(num_computed.dtype))


if HAS_TRITON:

    @triton.jit
    def _field(v, k: tl.constexpr):
        """Element k of a small loaded vector, as a scalar."""
        return tl.sum(tl.where(tl.arange(0, 8) == k, v, 0))

    # num_real and num_writes follow the step: specializing on their values (== 1, divisible
    # by 16) would compile new variants mid-run.
    @triton.jit(do_not_specialize=["num_real", "num_writes"])
    def _prepare_inputs_kernel(
        token_ids_ptr, tok_stride,
        num_computed_ptr,
        block_table_ptr, bt_stride,
        rows_ptr, qsl_ptr,
        packed_ptr, entries_ptr, order_out_ptr,
        bt_out_ptr, bt_out_stride,
        input_ids_ptr, positions_ptr, slot_ptr, seq_lens_ptr,
        num_real, num_writes,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        STAGED: tl.constexpr,
        GATHER_BT: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        first = tl.program_id(1) == 0
        if STAGED:
            # Structs b and b + 1 in one load (one PCIe read when they sit in host memory).
            v = tl.load(packed_ptr + 4 * b + tl.arange(0, 8))
            row_in = _field(v, 0)
            q0 = _field(v, 1)
            q1 = _field(v, 5)
            if first:
                tl.store(rows_ptr + b, row_in)
                tl.store(qsl_ptr + b, q0)
                tl.store(order_out_ptr + b, _field(v, 3))
                if b == tl.num_programs(0) - 1:
                    tl.store(qsl_ptr + b + 1, q1)
            if num_writes > 0:
                # This row's new block ids, before anything reads the row. Every program of
                # the row applies them (the same values), so each reads only its own
                # stores, which the barrier makes visible to all of its threads.
                w1 = _field(v, 6)
                for i in range(_field(v, 2), w1, 16):
                    w = i + tl.arange(0, 16)
                    m = w < w1
                    flat = tl.load(entries_ptr + 2 * w, mask=m, other=0)
                    blk_id = tl.load(entries_ptr + 2 * w + 1, mask=m, other=0)
                    tl.store(block_table_ptr + flat, blk_id, mask=m)
                tl.debug_barrier()
        else:
            row_in = tl.load(rows_ptr + b)
            q0 = tl.load(qsl_ptr + b)
            q1 = tl.load(qsl_ptr + b + 1)
        row = row_in.to(tl.int64)
        start = tl.load(num_computed_ptr + row)
        if first:
            tl.store(seq_lens_ptr + b, start + q1 - q0)
            # Rows below num_real advance: the caller passes 0 unless each row has one
            # program, so no other program reads this row's count after the store; padded
            # rows (the dummy row) are never advanced.
            if b < num_real:
                tl.store(num_computed_ptr + row, start + q1 - q0)
            if GATHER_BT:
                # The attention's block table: the columns this row's sequence uses.
                nblk = tl.cdiv(start + q1 - q0, BLOCK_SIZE)
                for c0 in range(0, nblk, 128):
                    c = c0 + tl.arange(0, 128)
                    m = c < nblk
                    ids = tl.load(block_table_ptr + row * bt_stride + c, mask=m)
                    tl.store(bt_out_ptr + b * bt_out_stride + c, ids, mask=m)
        n_tiles = tl.cdiv(q1 - q0, TILE)
        # The programs along axis 1 share the row's tiles. Their count is the grid's, not a
        # constexpr: it follows each step's longest chunk, and a constexpr would compile a
        # new variant (tens of ms, mid-run) for every count the warm-up did not meet.
        for i in range(tl.program_id(1), n_tiles, tl.num_programs(1)):
            t = q0 + i * TILE + tl.arange(0, TILE)
            m = t < q1
            pos = start + (t - q0)
            tok = tl.load(token_ids_ptr + row * tok_stride + pos, mask=m, other=0)
            blk = tl.load(block_table_ptr + row * bt_stride + pos // BLOCK_SIZE, mask=m, other=0)
            slot = blk.to(tl.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
            tl.store(input_ids_ptr + t, tok, mask=m)
            tl.store(positions_ptr + t, pos, mask=m)
            tl.store(slot_ptr + t, slot, mask=m)


def prepare_inputs(
    token_ids: torch.Tensor,
    num_computed: torch.Tensor,
    block_table: torch.Tensor,
    rows: torch.Tensor,
    query_start_loc: torch.Tensor,
    block_size: int,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    seq_lens: torch.Tensor,
    max_query_len: int = 1,
    num_real: int | None = None,
    use_kernel: bool | None = None,
    block_table_out: torch.Tensor | None = None,
    staged: StagedMeta | None = None,
) -> None:
    """Fill the output buffers; Triton on CUDA, the torch reference elsewhere (use_kernel
    forces the kernel, e.g. under the interpreter). With num_real, also advance the first
    num_real rows' num_computed by their query lengths: inside the kernel when each row has
    one program (decode steps: no extra launch), else after it. block_table is group 0 of
    the state table (staged.table's first rows). With staged, rows and query_start_loc are
    written from it rather than read; block_table_out and staged: see the module docstring.

    input_ids int32, positions int64, slot_mapping int64, seq_lens int32.
    """
    if use_kernel is None:
        use_kernel = HAS_TRITON and token_ids.is_cuda
    if not use_kernel:
        prepare_inputs_ref(
            token_ids, num_computed, block_table, rows, query_start_loc, block_size,
            input_ids, positions, slot_mapping, seq_lens, num_real,
            block_table_out, staged,
        )  # fmt: skip
        return
    if staged is not None and staged.table.data_ptr() != block_table.data_ptr():
        raise ValueError("staged.table must start with the block_table passed")
    num_rows = rows.numel()
    tile = 128
    # Long prefill rows get several programs along axis 1; decode rows need one.
    splits = max(1, min(16, -(-max_query_len // tile)))
    grid = (num_rows, splits)
    advance = num_real is not None and splits == 1 and ADVANCE_IN_KERNEL
    num_writes = staged.num_writes if staged is not None else 0
    packed, entries, order_out = (
        (staged.packed, staged.entries if num_writes else staged.packed, staged.order_out)
        if staged is not None
        else (rows, rows, rows)
    )
    bt_out = block_table_out if block_table_out is not None else block_table
    _prepare_inputs_kernel[grid](
        token_ids, token_ids.stride(0),
        num_computed,
        block_table, block_table.stride(0),
        rows, query_start_loc,
        packed, entries, order_out,
        bt_out, bt_out.stride(0),
        input_ids, positions, slot_mapping, seq_lens,
        num_real if advance else 0, num_writes,
        BLOCK_SIZE=block_size,
        TILE=tile,
        STAGED=staged is not None,
        GATHER_BT=block_table_out is not None,
    )  # fmt: skip
    if num_real is not None and not advance:
        # Several programs per row read its count: advance it after they all have.
        advance_rows(num_computed, rows, query_start_loc, num_real)
