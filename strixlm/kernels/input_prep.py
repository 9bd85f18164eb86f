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

The CPU only sends rows and query_start_loc; everything else is already on the GPU.
"""

from __future__ import annotations

import os

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
) -> None:
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
    # num_real follows the step: specializing on its value (== 1, divisible by 16) would
    # compile new variants mid-run.
    @triton.jit(do_not_specialize=["num_real"])
    def _prepare_inputs_kernel(
        token_ids_ptr, tok_stride,
        num_computed_ptr,
        block_table_ptr, bt_stride,
        rows_ptr, qsl_ptr,
        input_ids_ptr, positions_ptr, slot_ptr, seq_lens_ptr,
        num_real,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        row = tl.load(rows_ptr + b).to(tl.int64)
        q0 = tl.load(qsl_ptr + b)
        q1 = tl.load(qsl_ptr + b + 1)
        start = tl.load(num_computed_ptr + row)
        if tl.program_id(1) == 0:
            tl.store(seq_lens_ptr + b, start + q1 - q0)
            # Rows below num_real advance: the caller passes 0 unless each row has one
            # program, so no other program reads this row's count after the store; padded
            # rows (the dummy row) are never advanced.
            if b < num_real:
                tl.store(num_computed_ptr + row, start + q1 - q0)
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
) -> None:
    """Fill the output buffers; Triton on CUDA, the torch reference elsewhere (use_kernel
    forces the kernel, e.g. under the interpreter). With num_real, also advance the first
    num_real rows' num_computed by their query lengths: inside the kernel when each row has
    one program (decode steps: no extra launch), else after it.

    input_ids int32, positions int64, slot_mapping int64, seq_lens int32.
    """
    if use_kernel is None:
        use_kernel = HAS_TRITON and token_ids.is_cuda
    if not use_kernel:
        prepare_inputs_ref(
            token_ids, num_computed, block_table, rows, query_start_loc, block_size,
            input_ids, positions, slot_mapping, seq_lens, num_real,
        )  # fmt: skip
        return
    num_rows = rows.numel()
    tile = 128
    # Long prefill rows get several programs along axis 1; decode rows need one.
    splits = max(1, min(16, -(-max_query_len // tile)))
    grid = (num_rows, splits)
    advance = num_real is not None and splits == 1 and ADVANCE_IN_KERNEL
    _prepare_inputs_kernel[grid](
        token_ids, token_ids.stride(0),
        num_computed,
        block_table, block_table.stride(0),
        rows, query_start_loc,
        input_ids, positions, slot_mapping, seq_lens,
        num_real if advance else 0,
        BLOCK_SIZE=block_size,
        TILE=tile,
    )  # fmt: skip
    if num_real is not None and not advance:
        # Several programs per row read its count: advance it after they all have.
        advance_rows(num_computed, rows, query_start_loc, num_real)
