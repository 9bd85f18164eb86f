"""The add + RMSNorm split across two GEMMs (benchmarks/gpu/bench_norm_prologue.py): the
producer's in-place residual and sums of squares, and the consumer's normalizing loads,
against the torch chain under the Triton interpreter (fp16 and fp32)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_norm_prologue as bench  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("m", [5, 37])
def test_split_norm_matches_the_torch_chain(dtype, m):
    g = torch.Generator().manual_seed(m)
    hidden, k_prod, n_cons = 64, 96, 48
    x = torch.randn(m, k_prod, generator=g).to(dtype)
    w_prod = (0.1 * torch.randn(hidden, k_prod, generator=g)).to(dtype)
    w_cons = (0.1 * torch.randn(n_cons, hidden, generator=g)).to(dtype)
    norm_w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype)
    res0 = torch.randn(m, hidden, generator=g).to(dtype)
    ref, ref_r = bench.chain_ref(x, w_prod, res0, norm_w, w_cons)
    r = res0.clone()
    sq = bench.linear_add_stats(x, w_prod, r, (16, 16, 32, 4, 2))
    assert sq.shape == (4, m)
    # The residual is the norm kernel's exactly; the sums are of that residual.
    torch.testing.assert_close(r, ref_r, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(sq.sum(0), r.float().pow(2).sum(-1), rtol=1e-5, atol=1e-5)
    got = bench.norm_linear(r, sq, norm_w, w_cons, (16, 16, 32, 4, 2))
    tol = 1e-5 if dtype == torch.float32 else 4e-3
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
