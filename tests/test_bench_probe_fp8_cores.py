"""The fp8 CUDA-core decode probe's kernel (benchmarks/gpu/probe_fp8_cores.py) against the
engine's attention reference over the dequantized fp8 cache, under the Triton interpreter,
with and without its register prefetch (sequences shorter and longer than a tile)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import check_attention as ca  # noqa: E402
import probe_fp8_cores as probe  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("prefetch", [False, True])
def test_probe_matches_the_reference(monkeypatch, prefetch):
    monkeypatch.setattr(ca, "DEV", "cpu")
    q, _, _, cache, md = ca.make_batch([(37, 1), (5, 1), (70, 1)], kvw.FP8_DTYPE)
    ref = pa.paged_attention_ref(
        q.float(), cache, md.query_lens_cpu, md.seq_lens_cpu, md.block_table, ca.SCALE,
        ca.FP8_SCALE, ca.FP8_SCALE,
    )  # fmt: skip
    out = probe.fp8_cores(q, cache, md, tile=16, warps=2, prefetch=prefetch)
    assert ca.rel_err(out, ref)[0] < ca.REL_TOL
