"""The Triton input-preparation kernel against its torch reference (TRITON_INTERPRET=1)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402

triton = pytest.importorskip("triton")

from strixlm.kernels import input_prep  # noqa: E402


def _tables(num_rows=6, max_len=96, block_size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    token_ids = torch.randint(0, 1000, (num_rows, max_len), generator=g, dtype=torch.int32)
    max_blocks = max_len // block_size
    # Shuffled, non-contiguous block ids, as the pool hands them out.
    block_table = torch.randperm(num_rows * max_blocks, generator=g).view(num_rows, max_blocks)
    return token_ids, block_table.to(torch.int32)


def _run(fn, token_ids, num_computed, block_table, rows, counts, bs, **kw):
    """One prepare_inputs call into fresh (poisoned) buffers; returns the outputs."""
    qsl = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32)
    total = int(qsl[-1])
    ids = torch.full((total,), 777, dtype=torch.int32)
    pos = torch.full((total,), 777, dtype=torch.int64)
    slot = torch.full((total,), 777, dtype=torch.int64)
    seq = torch.full((rows.numel(),), 777, dtype=torch.int32)
    args = (token_ids, num_computed, block_table, rows, qsl, bs, ids, pos, slot, seq)
    if fn is input_prep.prepare_inputs_ref:
        fn(*args, **kw)
    else:
        fn(*args, use_kernel=True, **kw)
    return ids, pos, slot, seq


# max_query_len picks the programs per row (128-token tiles): 1, 2 and 3.
@pytest.mark.parametrize("max_query_len", [1, 200, 300])
def test_kernel_matches_reference(max_query_len):
    bs = 4
    token_ids, block_table = _tables(block_size=bs)
    num_computed = torch.tensor([0, 10, 33, 7, 0, 50], dtype=torch.int32)
    rows = torch.tensor([2, 0, 5, 1], dtype=torch.int32)  # scheduled order != row order
    counts = [1, 17, 1, 40]
    outs = []
    for fn in (input_prep.prepare_inputs_ref, input_prep.prepare_inputs):
        kw = {} if fn is input_prep.prepare_inputs_ref else {"max_query_len": max_query_len}
        outs.append(_run(fn, token_ids, num_computed, block_table, rows, counts, bs, **kw))
    for ref, got in zip(outs[0], outs[1], strict=True):
        assert torch.equal(ref.long(), got.long())
    ids, pos, slot, seq = outs[0]
    # Spot-check the reference against the definition.
    assert int(pos[0]) == 33 and int(ids[0]) == int(token_ids[2, 33])
    assert int(slot[0]) == int(block_table[2, 33 // bs]) * bs + 33 % bs
    assert pos[1:18].tolist() == list(range(17))
    assert seq.tolist() == [34, 17, 51, 50]


def _staged(table, rows, counts, order, per_row, order_out):
    """StagedMeta for a step: per_row maps a batch index to its writes (group, col, id)."""
    groups, n, m = table.shape
    offsets, pairs = [0], []
    for b in range(len(rows)):
        for g, col, blk in per_row.get(b, []):
            pairs.append(((g * n + rows[b]) * m + col, blk))
        offsets.append(len(pairs))
    qsl = np.concatenate([[0], np.cumsum(counts)])
    writes = (np.array(offsets), np.array(pairs).reshape(-1, 2)) if pairs else None
    buf = np.zeros(4 * (len(rows) + 1) + 2 * len(pairs), dtype=np.int32)
    nw = input_prep.pack_step_meta(buf, rows, qsl, np.array(order), writes, 4 * (len(rows) + 1))
    t = torch.from_numpy(buf)
    return input_prep.StagedMeta(
        t[: 4 * (len(rows) + 1)], t[4 * (len(rows) + 1) :], nw, table, order_out
    )


@pytest.mark.parametrize("max_query_len", [1, 300])
@pytest.mark.parametrize("with_writes", [True, False])
def test_staged_meta_block_writes_and_gather(max_query_len, with_writes):
    """The kernel's extra work against the reference: rows / offsets / order read from the
    packed structs and written to the device arrays, the step's block writes (two groups)
    landing before the slots are computed from them, and block_table_out holding each
    row's used columns."""
    bs, max_len = 4, 400
    g = torch.Generator().manual_seed(1)
    token_ids = torch.randint(0, 1000, (7, max_len), generator=g, dtype=torch.int32)
    m = max_len // bs
    start = torch.tensor([0, 10, 33, 7, 0, 50, 0], dtype=torch.int32)
    rows = [2, 0, 5, 1, 6]  # the last: padding on the dummy row 6
    counts = [1, 30, 1, 1, 1] if max_query_len == 1 else [1, 300, 1, 1, 1]
    # Row 0 (batch 1) gets its whole prefill's blocks, rows 2 / 5 / 1 one new block each, in
    # group 0 and (a Mamba-like slot) group 1; the padded row none.
    need0 = -(-counts[1] // bs)
    per_row = {  # by batch index
        0: [(0, 33 // bs, 501), (1, 0, 88)],
        1: [(0, c, 1000 + c) for c in range(need0)] + [(1, 0, 77)],
        2: [(0, 50 // bs, 502)],
        3: [(0, 7 // bs, 503)],
    }
    if not with_writes:
        per_row = {}
    results = []
    for fn in (input_prep.prepare_inputs_ref, input_prep.prepare_inputs):
        table = torch.randperm(2 * 7 * m, generator=torch.Generator().manual_seed(2))
        table = table.view(2, 7, m).to(torch.int32)
        table[:, 6] = 0  # the dummy row
        if not with_writes:  # row 0's prefill needs its blocks in the table already
            table[0, 0, :need0] = 1000 + torch.arange(need0, dtype=torch.int32)
        bt_out = torch.full((len(rows), m), -5, dtype=torch.int32)
        rows_dev = torch.full((len(rows),), -9, dtype=torch.int32)
        qsl_dev = torch.full((len(rows) + 1,), -9, dtype=torch.int32)
        order_out = torch.full((len(rows),), -9, dtype=torch.int32)
        staged = _staged(table, rows, counts, [1, 0, 2, 3, 4], per_row, order_out)
        total = sum(counts)
        outs = (
            torch.zeros(total, dtype=torch.int32),
            torch.zeros(total, dtype=torch.int64),
            torch.zeros(total, dtype=torch.int64),
            torch.zeros(len(rows), dtype=torch.int32),
        )
        kw = dict(block_table_out=bt_out, staged=staged)
        args = (token_ids, start.clone(), table[0], rows_dev, qsl_dev, bs, *outs)
        if fn is input_prep.prepare_inputs_ref:
            fn(*args, num_real=4, **kw)
        else:
            fn(*args, max_query_len=max_query_len, num_real=4, use_kernel=True, **kw)
        results.append((table, bt_out, rows_dev, qsl_dev, order_out, outs))
    (t_ref, bt_ref, r_ref, q_ref, o_ref, out_ref), (t, bt, r, q, o, out) = results
    assert torch.equal(t_ref, t)  # every write landed, in both groups
    if with_writes:
        assert int(t[1, 0, 0]) == 77 and int(t[1, 2, 0]) == 88 and int(t[0, 2, 33 // bs]) == 501
    for a, b in zip(out_ref, out, strict=True):
        assert torch.equal(a, b)
    # The slots of row 0's prefill come from the blocks written in the same launch.
    assert out[2][1 : 1 + bs].tolist() == [1000 * bs + i for i in range(bs)]
    assert r.tolist() == rows and torch.equal(r, r_ref)
    assert q.tolist() == [0] + np.cumsum(counts).tolist() and torch.equal(q, q_ref)
    assert torch.equal(o, o_ref) and o.tolist() == [1, 0, 2, 3, 4]
    seq = out[3].tolist()
    for b, row in enumerate(rows):
        used = -(-seq[b] // bs)
        assert torch.equal(bt[b, :used], t[0, row, :used]), b
        assert torch.equal(bt_ref[b], t_ref[0, row])  # the reference copies whole rows


def test_no_per_step_constexpr():
    """Only model constants are compile-time: a constexpr that follows the step (as the
    programs per row once did, from the longest chunk) compiles a new kernel mid-run."""
    import inspect

    kernel = input_prep._prepare_inputs_kernel
    fn = getattr(kernel, "fn", kernel)  # the Python function under the JIT wrapper
    sig = inspect.signature(fn)
    constexprs = [n for n, p in sig.parameters.items() if "constexpr" in str(p.annotation)]
    # Model constants and the call site's options (host source, gathered block table).
    assert constexprs == ["BLOCK_SIZE", "TILE", "STAGED", "GATHER_BT"]


@pytest.mark.parametrize("max_query_len", [1, 300])
def test_num_real_advances_the_real_rows(max_query_len):
    """prepare_inputs(num_real=n) advances num_computed by the query lengths for the first n
    rows only (the rest are graph padding on the dummy row): inside the kernel with one
    program per row (max_query_len 1), after it with several (300); the reference too."""
    bs = 4
    token_ids, block_table = _tables(num_rows=7, max_len=400, block_size=bs)
    start = [0, 10, 33, 7, 0, 50, 0]
    rows = torch.tensor([2, 0, 5, 1, 6, 6], dtype=torch.int32)  # the last two: padding
    counts = [1, max_query_len, 1, 3, 1, 1]
    qsl = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32)
    total = int(qsl[-1])
    results = []
    for fn in (input_prep.prepare_inputs_ref, input_prep.prepare_inputs):
        num_computed = torch.tensor(start, dtype=torch.int32)
        bufs = [torch.zeros(total, dtype=d) for d in (torch.int32, torch.int64, torch.int64)]
        seq = torch.zeros(rows.numel(), dtype=torch.int32)
        args = (token_ids, num_computed, block_table, rows, qsl, bs, *bufs, seq)
        if fn is input_prep.prepare_inputs_ref:
            fn(*args, num_real=4)
        else:
            fn(*args, max_query_len=max(counts), num_real=4, use_kernel=True)
        results.append((num_computed, seq, bufs))
    expect = list(start)
    for r, c in zip([2, 0, 5, 1], counts[:4], strict=True):
        expect[r] += c
    (ref_nc, ref_seq, ref_bufs), (got_nc, got_seq, got_bufs) = results
    assert ref_nc.tolist() == expect and got_nc.tolist() == expect
    assert torch.equal(ref_seq, got_seq)
    for a, b in zip(ref_bufs, got_bufs, strict=True):
        assert torch.equal(a, b)


AOT_SCRIPT = r"""
from strixlm.kernels import input_prep

sig = dict(token_ids_ptr="*i32", tok_stride="i32", num_computed_ptr="*i32",
           block_table_ptr="*i32", bt_stride="i32", rows_ptr="*i32", qsl_ptr="*i32",
           packed_ptr="*i32", entries_ptr="*i32", order_out_ptr="*i32",
           bt_out_ptr="*i32", bt_out_stride="i32",
           input_ids_ptr="*i32", positions_ptr="*i64", slot_ptr="*i64", seq_lens_ptr="*i32",
           num_real="i32", num_writes="i32")
consts = dict(BLOCK_SIZE=16, TILE=128, STAGED=True, GATHER_BT=True)
names = list(sig) + list(consts)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")}
src = ASTSource(input_prep._prepare_inputs_kernel, {**sig, **{k: "constexpr" for k in consts}},
                consts, attrs)
triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
# The real row count follows the step: no specialization on its value (== 1, % 16).
k = input_prep._prepare_inputs_kernel
dns = [k.arg_names[n] if isinstance(n, int) else n for n in k.do_not_specialize]
assert dns == ["num_real", "num_writes"], dns
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)
