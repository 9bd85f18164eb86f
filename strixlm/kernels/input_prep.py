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
- block-table writes (`BlockWrites`): the step's new block ids, grouped by batch row. Each
  program applies its own row's writes, then reads the row; programs never read a row
  another program writes. Every write's row must be scheduled in the step.
- the attention's block table (`block_table_out[b] = block_table[rows[b]]`): the kernel
  copies the columns row b's sequence uses; the columns past them keep what an earlier step
  left there (block ids all the same: attention never reads past a row's length).
- with `HostSource`, the host's arrays are read straight from pinned host memory (no copy
  launched before the kernel) and the kernel writes their device copies for later kernels.

The CPU only sends rows, query_start_loc, the order and the new block ids; everything else is
already on the GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


@dataclass
class BlockWrites:
    """A step's new block-table entries, grouped by the batch row they belong to."""

    offsets: torch.Tensor  # [B + 1] int32: row b's entries are [offsets[b], offsets[b + 1])
    entries: torch.Tensor  # [2 * W] int32: (flat index into `table`, block id) pairs
    table: torch.Tensor  # the whole block table (every KV-cache group), contiguous
    count: int  # W


@dataclass
class HostSource:
    """The step's rows, query start offsets and order in pinned host memory; the kernel reads
    them there and writes the device copies (the `rows` / `query_start_loc` arguments and
    `order_out`) that later kernels read."""

    rows: torch.Tensor  # [B] int32, pinned
    query_start_loc: torch.Tensor  # [B + 1] int32, pinned
    order: torch.Tensor  # [B] int32, pinned
    order_out: torch.Tensor  # [B] int32, device


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
    writes: BlockWrites | None = None,
    host: HostSource | None = None,
) -> None:
    if host is not None:
        rows.copy_(host.rows)
        query_start_loc.copy_(host.query_start_loc)
        host.order_out.copy_(host.order)
    if writes is not None and writes.count:
        pairs = writes.entries[: 2 * writes.count].view(-1, 2).long()
        writes.table.view(-1)[pairs[:, 0]] = pairs[:, 1].to(writes.table.dtype)
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
    # num_real and num_writes follow the step: specializing on their values (== 1, divisible
    # by 16) would compile new variants mid-run.
    @triton.jit(do_not_specialize=["num_real", "num_writes"])
    def _prepare_inputs_kernel(
        token_ids_ptr, tok_stride,
        num_computed_ptr,
        block_table_ptr, bt_stride,
        rows_ptr, qsl_ptr,
        rows_out_ptr, qsl_out_ptr, order_ptr, order_out_ptr,
        woff_ptr, wentries_ptr, table_ptr,
        bt_out_ptr, bt_out_stride,
        input_ids_ptr, positions_ptr, slot_ptr, seq_lens_ptr,
        num_real, num_writes,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        COPY_META: tl.constexpr,
        GATHER_BT: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        first = tl.program_id(1) == 0
        row_in = tl.load(rows_ptr + b)
        row = row_in.to(tl.int64)
        q0 = tl.load(qsl_ptr + b)
        q1 = tl.load(qsl_ptr + b + 1)
        if COPY_META:
            if first:
                tl.store(rows_out_ptr + b, row_in)
                tl.store(qsl_out_ptr + b, q0)
                tl.store(order_out_ptr + b, tl.load(order_ptr + b))
                if b == tl.num_programs(0) - 1:
                    tl.store(qsl_out_ptr + b + 1, q1)
        if num_writes > 0:
            # This row's new block ids, before anything reads the row. Every program of the
            # row applies them (the same values), so each reads only its own stores, which
            # the barrier makes visible to all of its threads.
            w0 = tl.load(woff_ptr + b)
            w1 = tl.load(woff_ptr + b + 1)
            for i in range(w0, w1, 16):
                w = i + tl.arange(0, 16)
                m = w < w1
                flat = tl.load(wentries_ptr + 2 * w, mask=m, other=0)
                blk_id = tl.load(wentries_ptr + 2 * w + 1, mask=m, other=0)
                tl.store(table_ptr + flat, blk_id, mask=m)
            tl.debug_barrier()
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
    writes: BlockWrites | None = None,
    host: HostSource | None = None,
) -> None:
    """Fill the output buffers; Triton on CUDA, the torch reference elsewhere (use_kernel
    forces the kernel, e.g. under the interpreter). With num_real, also advance the first
    num_real rows' num_computed by their query lengths: inside the kernel when each row has
    one program (decode steps: no extra launch), else after it. block_table is group 0 of
    the state table (writes.table's first rows); block_table_out, writes and host: see the
    module docstring.

    input_ids int32, positions int64, slot_mapping int64, seq_lens int32.
    """
    if use_kernel is None:
        use_kernel = HAS_TRITON and token_ids.is_cuda
    if not use_kernel:
        prepare_inputs_ref(
            token_ids, num_computed, block_table, rows, query_start_loc, block_size,
            input_ids, positions, slot_mapping, seq_lens, num_real,
            block_table_out, writes, host,
        )  # fmt: skip
        return
    if writes is not None and writes.count and writes.table.data_ptr() != block_table.data_ptr():
        raise ValueError("writes.table must start with the block_table passed")
    num_rows = rows.numel()
    tile = 128
    # Long prefill rows get several programs along axis 1; decode rows need one.
    splits = max(1, min(16, -(-max_query_len // tile)))
    grid = (num_rows, splits)
    advance = num_real is not None and splits == 1 and ADVANCE_IN_KERNEL
    num_writes = writes.count if writes is not None else 0
    src_rows, src_qsl = (
        (host.rows, host.query_start_loc) if host is not None else (rows, query_start_loc)
    )
    order, order_out = (host.order, host.order_out) if host is not None else (rows, rows)
    woff, wentries = (writes.offsets, writes.entries) if num_writes else (rows, rows)
    bt_out = block_table_out if block_table_out is not None else block_table
    _prepare_inputs_kernel[grid](
        token_ids, token_ids.stride(0),
        num_computed,
        block_table, block_table.stride(0),
        src_rows, src_qsl,
        rows, query_start_loc, order, order_out,
        woff, wentries, block_table,
        bt_out, bt_out.stride(0),
        input_ids, positions, slot_mapping, seq_lens,
        num_real if advance else 0, num_writes,
        BLOCK_SIZE=block_size,
        TILE=tile,
        COPY_META=host is not None,
        GATHER_BT=block_table_out is not None,
    )  # fmt: skip
    if num_real is not None and not advance:
        # Several programs per row read its count: advance it after they all have.
        advance_rows(num_computed, rows, query_start_loc, num_real)
