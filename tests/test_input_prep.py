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


AOT_SCRIPT = r"""
from strixlm.kernels import input_prep

sig = dict(token_ids_ptr="*i32", tok_stride="i32", num_computed_ptr="*i32",
           block_table_ptr="*i32", bt_stride="i32", rows_ptr="*i32", qsl_ptr="*i32",
           input_ids_ptr="*i32", positions_ptr="*i64", slot_ptr="*i64", seq_lens_ptr="*i32")
consts = dict(BLOCK_SIZE=16, TILE=128)
names = list(sig) + list(consts)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")}
src = ASTSource(input_prep._prepare_inputs_kernel, {**sig, **{k: "constexpr" for k in consts}},
                consts, attrs)
triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)
