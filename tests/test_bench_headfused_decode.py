"""The head-fused decode-attention experiment's kernel (benchmarks/gpu/bench_headfused_decode.py)
against the torch paged-attention reference under the Triton interpreter (fp32 and fp16; the
interpreter's dots on bf16 are wrong)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_headfused_decode as bench  # noqa: E402

from strixlm.kernels.paged_attention import paged_attention_ref  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("nb", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_head_fused_decode_matches_reference(nb, dtype):
    bs, hkv, d, hq = 4, 2, 32, 4
    ctxs = [5, 17, 8, 1, 12]  # partial and full last blocks, a one-token context
    q, cache, lens, bt, order = bench.make_case(
        ctxs, bs, seed=nb, device="cpu", hq=hq, hkv=hkv, d=d, dtype=dtype
    )
    ref = paged_attention_ref(q, cache, [1] * len(ctxs), ctxs, bt, d**-0.5)
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    for per_sm in (1, 2):  # several sequences per program, then fewer
        got = bench.headfused_decode(
            q, cache, lens, bt, order, d**-0.5, nb=nb, per_sm=per_sm, warps=4, stages=2, sms=2
        )
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
