"""The append-sampled-tokens kernel against its torch reference (TRITON_INTERPRET=1)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402

triton = pytest.importorskip("triton")

from strixlm.kernels import append_tokens as at  # noqa: E402


def _state(num_rows=7, width=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    token_ids = torch.randint(0, 500, (num_rows, width), generator=g, dtype=torch.int32)
    num_tokens = torch.randint(0, width - 1, (num_rows,), generator=g, dtype=torch.int32)
    return token_ids, num_tokens


# (row to skip, padded rows on it): eager steps skip nothing; graphs pad on the dummy row.
@pytest.mark.parametrize(("skip_row", "num_padded"), [(-1, 0), (6, 0), (6, 3)])
def test_kernel_matches_reference(skip_row, num_padded):
    rows = torch.tensor([4, 0, 2, 5] + [skip_row] * num_padded, dtype=torch.int32)
    sampled = torch.tensor([101, 102, 103, 104] + [999] * num_padded, dtype=torch.int64)
    token_ids, num_tokens = _state()
    before_ids, before_n = token_ids.clone(), num_tokens.clone()
    ref = (token_ids.clone(), num_tokens.clone())
    at.append_tokens_ref(*ref, rows, sampled, skip_row)
    got = (token_ids.clone(), num_tokens.clone())
    at._append_tokens_kernel[(1,)](
        got[0], got[0].stride(0), got[1], rows, sampled, rows.numel(), skip_row, BLOCK=8
    )
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    # The reference against the definition: each real row gained its token at its end.
    for b, r in enumerate([4, 0, 2, 5]):
        n = int(before_n[r])
        assert int(ref[1][r]) == n + 1 and int(ref[0][r, n]) == 101 + b
    untouched = [1, 3, 6]
    assert torch.equal(ref[0][untouched], before_ids[untouched])
    assert torch.equal(ref[1][untouched], before_n[untouched])


def test_rows_past_one_block():
    """More rows than a program's block: every block writes its own rows only."""
    token_ids, num_tokens = _state(num_rows=40, width=6, seed=1)
    rows = torch.randperm(39, generator=torch.Generator().manual_seed(2))[:21].to(torch.int32)
    sampled = torch.arange(21, dtype=torch.int64) + 300
    ref = (token_ids.clone(), num_tokens.clone())
    at.append_tokens_ref(*ref, rows, sampled)
    got = (token_ids.clone(), num_tokens.clone())
    at._append_tokens_kernel[(3,)](
        got[0], got[0].stride(0), got[1], rows, sampled, rows.numel(), -1, BLOCK=8
    )
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])


def test_cpu_dispatch_runs_the_reference():
    token_ids, num_tokens = _state()
    rows = torch.tensor([3], dtype=torch.int32)
    n = int(num_tokens[3])
    at.append_tokens(token_ids, num_tokens, rows, torch.tensor([7]))
    assert int(token_ids[3, n]) == 7 and int(num_tokens[3]) == n + 1


AOT_SCRIPT = r"""
from strixlm.kernels import append_tokens as at

sig = dict(token_ids_ptr="*i32", tok_stride="i32", num_tokens_ptr="*i32", rows_ptr="*i32",
           sampled_ptr="*i64", num_rows="i32", skip_row="i32")
consts = dict(BLOCK=128)
names = list(sig) + list(consts)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")}
src = ASTSource(at._append_tokens_kernel, {**sig, **{k: "constexpr" for k in consts}},
                consts, attrs)
triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)
