"""The Triton input-preparation kernel against its torch reference (TRITON_INTERPRET=1)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

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


@pytest.mark.parametrize("programs_per_row", [1, 2, 3])
def test_kernel_matches_reference(programs_per_row):
    bs = 4
    token_ids, block_table = _tables(block_size=bs)
    num_computed = torch.tensor([0, 10, 33, 7, 0, 50], dtype=torch.int32)
    rows = torch.tensor([2, 0, 5, 1], dtype=torch.int32)  # scheduled order != row order
    counts = [1, 17, 1, 40]
    qsl = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32)
    total = int(qsl[-1])
    outs = []
    for fn in (input_prep.prepare_inputs_ref, None):
        ids = torch.full((total,), 777, dtype=torch.int32)
        pos = torch.full((total,), 777, dtype=torch.int64)
        slot = torch.full((total,), 777, dtype=torch.int64)
        seq = torch.full((rows.numel(),), 777, dtype=torch.int32)
        args = (token_ids, num_computed, block_table, rows, qsl, bs, ids, pos, slot, seq)
        if fn is None:
            input_prep._prepare_inputs_kernel[(rows.numel(), programs_per_row)](
                token_ids,
                token_ids.stride(0),
                num_computed,
                block_table,
                block_table.stride(0),
                rows,
                qsl,
                ids,
                pos,
                slot,
                seq,
                0,  # num_real: no row advances here
                BLOCK_SIZE=bs,
                TILE=8,
            )
        else:
            fn(*args)
        outs.append((ids, pos, slot, seq))
    for ref, got in zip(outs[0], outs[1], strict=True):
        assert torch.equal(ref.long(), got.long())
    ids, pos, slot, seq = outs[0]
    # Spot-check the reference against the definition.
    assert int(pos[0]) == 33 and int(ids[0]) == int(token_ids[2, 33])
    assert int(slot[0]) == int(block_table[2, 33 // bs]) * bs + 33 % bs
    assert pos[1:18].tolist() == list(range(17))
    assert seq.tolist() == [34, 17, 51, 50]


def test_no_per_step_constexpr():
    """Only model constants are compile-time: a constexpr that follows the step (as the
    programs per row once did, from the longest chunk) compiles a new kernel mid-run."""
    import inspect

    kernel = input_prep._prepare_inputs_kernel
    fn = getattr(kernel, "fn", kernel)  # the Python function under the JIT wrapper
    sig = inspect.signature(fn)
    constexprs = [n for n, p in sig.parameters.items() if "constexpr" in str(p.annotation)]
    assert constexprs == ["BLOCK_SIZE", "TILE"]


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
           input_ids_ptr="*i32", positions_ptr="*i64", slot_ptr="*i64", seq_lens_ptr="*i32",
           num_real="i32")
consts = dict(BLOCK_SIZE=16, TILE=128)
names = list(sig) + list(consts)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")}
src = ASTSource(input_prep._prepare_inputs_kernel, {**sig, **{k: "constexpr" for k in consts}},
                consts, attrs)
triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
# The real row count follows the step: no specialization on its value (== 1, % 16).
k = input_prep._prepare_inputs_kernel
dns = [k.arg_names[n] if isinstance(n, int) else n for n in k.do_not_specialize]
assert dns == ["num_real"], dns
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)
