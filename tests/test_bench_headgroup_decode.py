"""The heads-a-program decode probe (benchmarks/gpu/bench_headgroup_decode.py) against the
torch reference under the Triton interpreter, and its sm90 compile: K / V must be copied by
cp.async (the block ids a tile ahead are what lets Triton pipeline them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_headgroup_decode as bench  # noqa: E402

from strixlm.kernels.paged_attention import paged_attention_ref  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
HQ, HKV, D, BS = 16, 8, 32, 16


def _case(ctxs: list[int], seed: int = 0):
    from bench_headfused_decode import make_case

    return make_case(ctxs, BS, seed, device="cpu", hq=HQ, hkv=HKV, d=D, dtype=torch.float32)


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize(("nb", "sms"), [(1, 1), (2, 1), (1, 8)])
def test_headgroup_decode_matches_torch(group, nb, sms):
    # sms=1: one program a head group walks every sequence (item changes mid-loop, the ids
    # ahead crossing into the next sequence); sms=8: several programs, some with no item.
    ctxs = [5, 40, 17, 33, 1, 64, 16]
    q, cache, sl, bt, order = _case(ctxs, seed=group + nb)
    scale = D**-0.5
    got = bench.headgroup_decode(
        q, cache, sl, bt, order, scale, group=group, nb=nb, per_sm=2, warps=4, stages=3, sms=sms
    )
    ref = paged_attention_ref(q, cache, [1] * len(ctxs), ctxs, bt, scale)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


AOT = r"""
import sys
sys.path.insert(0, "benchmarks/gpu")
import bench_headgroup_decode as bench

for group, nb, warps in ((1, 2, 2), (2, 1, 4), (4, 1, 4)):
    sig = dict(out_ptr="*bf16", q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", bt_ptr="*i32",
               seq_lens_ptr="*i32", order_ptr="*i32", qk_scale="fp32", num_seqs="i32",
               stride_qt="i32", stride_ot="i32", stride_bt="i32", stride_cb="i32")
    c = dict(NUM_KV_HEADS=8, G=2, GROUP=group, HEAD_DIM=128, BLOCK_SIZE=16, NB=nb,
             MAX_ITEMS=4, BLOCK_M=16)
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12)}
    src = ASTSource(bench._headgroup_decode_kernel, {**sig, **{k: "constexpr" for k in c}}, c,
                    attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=3))
    assert "cp.async" in k.asm["ptx"], (group, nb)
    assert k.metadata.shared <= 227 * 1024, (group, nb, k.metadata.shared)
print("compiled")
"""


def test_compiles_for_sm90_with_async_copies() -> None:
    from aot_compile import assert_compiles

    assert_compiles(AOT)
