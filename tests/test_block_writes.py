"""A step's new block-table entries travel with its inputs: the state table groups them by
batch row (take_block_writes), the input-prep launch applies them, and whatever cannot go
that way is applied by the table's own copy. Checked on CPU against a table that applies
every write at once, with the staged arrays copied or read in place (host_read)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strixlm.engine.request import Request, SamplingParams
from strixlm.worker.input_batch import InputBuffers, gather_inputs
from strixlm.worker.states import RequestStateTable

BS = 4


def _table(groups: int = 1) -> RequestStateTable:
    return RequestStateTable(4, 64, 16, groups, "cpu")


def _add(table: RequestStateTable, rid: str, n: int, blocks: list[list[int]]) -> int:
    req = Request(rid, list(range(100, 100 + n)), SamplingParams(max_tokens=8))
    return table.add(req, blocks, 0)


def test_writes_grouped_by_batch_row():
    table = _table(groups=2)
    ra = _add(table, "a", 5, [[7, 8], [40]])
    rb = _add(table, "b", 3, [[9], [41]])
    table.append_blocks(ra, [[10], []])
    # Batch order b, a, then two padded rows.
    offsets, pairs = table.take_block_writes([rb, ra], 100, num_padded=4)
    n, m = table.block_table.shape[1:]
    assert offsets.tolist() == [0, 2, 6, 6, 6]
    flat = {int(f): int(v) for f, v in pairs}
    assert flat == {
        rb * m: 9,
        (n + rb) * m: 41,
        ra * m: 7,
        ra * m + 1: 8,
        ra * m + 2: 10,
        (n + ra) * m: 40,
    }
    # Row b's pairs come first, a's next.
    assert all((int(f) // m) % n == rb for f, _ in pairs[:2])
    assert table.take_block_writes([rb, ra], 100) is None  # nothing left pending


def test_a_later_write_to_an_entry_replaces_the_earlier():
    table = _table()
    r = _add(table, "a", 5, [[7, 8]])
    table.remove("a")
    r2 = _add(table, "b", 3, [[9]])  # the same row, reused before any step ran
    assert r2 == r
    offsets, pairs = table.take_block_writes([r], 100)
    m = table.block_table.shape[2]
    assert {int(f): int(v) for f, v in pairs} == {r * m: 9, r * m + 1: 8}
    assert offsets.tolist() == [0, 2]


@pytest.mark.parametrize("case", ["row not scheduled", "too many"])
def test_writes_that_cannot_travel_are_applied_by_the_table(case):
    table = _table()
    ra = _add(table, "a", 5, [[7, 8]])
    rb = _add(table, "b", 3, [[9]])
    rows, cap = ([ra], 100) if case == "row not scheduled" else ([ra, rb], 2)
    assert table.take_block_writes(rows, cap) is None
    assert table.block_table[0, ra, :2].tolist() == [7, 8]
    assert int(table.block_table[0, rb, 0]) == 9
    assert table.take_block_writes([ra, rb], 100) is None


def _steps(host_read: bool):
    """Three steps with new blocks each time: prefill of two requests, then decodes that
    cross into new blocks. Returns the inputs and block tables each step saw."""
    table = _table()
    bufs = InputBuffers(32, 4, "cpu", max_blocks=16)
    bufs.host_read = host_read
    seen = []

    def snapshot(b):  # the buffers are persistent: copy them before the next step
        fields = (b.input_ids, b.positions, b.slot_mapping, b.seq_lens_dev, b.rows_dev)
        rest = (b.query_start_loc, b.seq_order, b.block_table)
        return tuple(x.clone() for x in fields + rest)

    ra = _add(table, "a", 6, [[3, 5]])
    rb = _add(table, "b", 4, [[11]])
    table.flush([ra, rb], defer_blocks=True)
    batch = gather_inputs(table, bufs, ["a", "b"], [6, 4], BS, num_reqs_padded=4)
    seen.append(snapshot(batch))
    for step, new in enumerate(([[], [12]], [[6], []])):
        for rid, blocks in zip("ab", new, strict=True):
            table.append_blocks(table.rows[rid], [blocks])
            table.token_ids[table.rows[rid], int(table.num_tokens_cpu[table.rows[rid]])] = 50 + step
            table.num_tokens[table.rows[rid]] += 1
            table.num_tokens_cpu[table.rows[rid]] += 1
        table.flush([], defer_blocks=True)
        seen.append(snapshot(gather_inputs(table, bufs, ["b", "a"], [1, 1], BS, 4)))
    return seen


def test_gather_applies_the_writes_and_reads_staged_arrays_in_place():
    copied, in_place = _steps(False), _steps(True)
    for a, b in zip(copied, in_place, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    # The first decode step: b at position 4, in block 12 written that step.
    pos, slots, bt = copied[1][1], copied[1][2], copied[1][7]
    assert pos[:2].tolist() == [4, 6] and slots[:2].tolist() == [12 * BS, 5 * BS + 2]
    assert bt[0, :2].tolist() == [11, 12]
    # The second: a's new block 6 is in the table (written ahead of its first use).
    ids, pos, slots, seq, rows, qsl, order, bt = copied[2]
    assert pos[:2].tolist() == [5, 7]
    assert slots[:2].tolist() == [12 * BS + 1, 5 * BS + 3]
    assert seq[:2].tolist() == [6, 8]
    assert bt[0, :2].tolist() == [11, 12] and bt[1, :2].tolist() == [3, 5]
    assert np.array_equal(order[:2].numpy(), [1, 0])  # the longest (a) first


def test_a_step_that_does_not_fit_its_graph_keeps_the_writes():
    table = _table()
    bufs = InputBuffers(32, 4, "cpu", max_blocks=16)
    r = _add(table, "a", 6, [[3, 5]])
    table.flush([r], defer_blocks=True)
    with pytest.raises(ValueError, match="do not fit"):
        gather_inputs(table, bufs, ["a"], [6], BS, num_reqs_padded=4, num_tokens_padded=4)
    batch = gather_inputs(table, bufs, ["a"], [6], BS, num_reqs_padded=4, num_tokens_padded=8)
    assert table.block_table[0, r, :2].tolist() == [3, 5]
    assert batch.slot_mapping[:6].tolist() == [12, 13, 14, 15, 20, 21]
