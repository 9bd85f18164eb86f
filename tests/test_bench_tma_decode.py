"""The TMA decode-attention experiment's kernel (benchmarks/gpu/bench_tma_decode.py), both
load paths, against the torch paged-attention reference under the Triton interpreter (fp16:
the interpreter mishandles bf16 descriptor loads)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_tma_decode as bench  # noqa: E402

from strixlm.kernels.paged_attention import paged_attention_ref  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("tma", [True, False])
def test_simplified_decode_matches_reference(bs, tma):
    g = torch.Generator().manual_seed(bs)
    hkv, d, hq = 2, 32, 4
    ctxs = [5, 40, 33, 64, 1]
    nblk = [-(-c // bs) for c in ctxs]
    nb = sum(nblk) + 2
    perm = torch.randperm(nb, generator=g).to(torch.int32)
    bt = torch.zeros((len(ctxs), max(nblk)), dtype=torch.int32)
    off = 0
    for i, n in enumerate(nblk):
        bt[i, :n] = perm[off : off + n]
        off += n
    cache = torch.randn(2, nb, bs, hkv, d, generator=g).to(torch.float16)
    q = torch.randn(len(ctxs), hq, d, generator=g).to(torch.float16)
    lens = torch.tensor(ctxs, dtype=torch.int32)
    order = torch.argsort(lens, descending=True, stable=True).to(torch.int32)
    ref = paged_attention_ref(q, cache, [1] * len(ctxs), ctxs, bt, d**-0.5)
    for per_sm in (1, 2):  # 2 or 1 sequences per program (two kv heads, one SM)
        got = bench.tma_decode(
            q, cache, lens, bt, order, d**-0.5, tma=tma, per_sm=per_sm, warps=2, stages=2, sms=1
        )
        torch.testing.assert_close(got, ref, rtol=2e-3, atol=2e-3)
