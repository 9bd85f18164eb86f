"""The fp8 decode probes' kernels (benchmarks/gpu/probe_fp8_cores.py, probe_fp8_vt.py)
against the engine's attention reference over the same (dequantized) cache, under the
Triton interpreter, with sequences shorter and longer than a tile."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import bench_fp8_decode  # noqa: E402
import check_attention as ca  # noqa: E402
import probe_fp8_cores as probe  # noqa: E402
import probe_fp8_vt  # noqa: E402
import torch  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("prefetch", [False, True])
def test_probe_matches_the_reference(monkeypatch, prefetch):
    monkeypatch.setattr(ca, "DEV", "cpu")
    q, _, _, cache, md = ca.make_batch([(37, 1), (5, 1), (70, 1)], kvw.FP8_DTYPE)
    ref = ca.batch_reference(q, cache, md)
    out = probe.fp8_cores(q, cache, md, tile=16, warps=2, prefetch=prefetch)
    assert ca.rel_err(out, ref)[0] < ca.REL_TOL


@pytest.mark.parametrize(
    ("dtype", "transposed"),
    # fp16 stands for the 16-bit caches: the interpreter's bf16 dot is not exact enough.
    [(torch.float16, False), (kvw.FP8_DTYPE, False), (kvw.FP8_DTYPE, True)],
)
def test_vt_probe_matches_the_reference(monkeypatch, dtype, transposed):
    monkeypatch.setattr(ca, "DEV", "cpu")
    q, _, _, cache, md = ca.make_batch([(37, 1), (5, 1), (70, 1)], dtype)
    if dtype == torch.float16:  # make_batch's 16-bit tensors are bf16
        q, cache = q.to(dtype), cache.to(dtype)
    ref = ca.batch_reference(q, cache, md)
    s = ca.cache_scale(cache)
    v = probe_fp8_vt.transposed_v(cache[1]) if transposed else cache[1]
    assert (v.float() == cache[1].float()).all()  # same values, another memory order
    out = probe_fp8_vt.vt_decode(q, cache[0], v, md, s, tile=16, warps=2, stages=1)
    assert ca.rel_err(out, ref)[0] < ca.REL_TOL


def test_split_mixed_times_the_step_whole_and_in_two(monkeypatch):
    """bench_fp8_decode --split-mixed: the whole step, its decodes and its prompts each pass
    the reference check, and the two-launch timing runs both parts (timing stubbed)."""
    monkeypatch.setattr(ca, "DEV", "cpu")
    timed = []
    monkeypatch.setattr(
        bench_fp8_decode, "graph_time_us", lambda fn, calls=1: timed.append(fn()) or 1.0
    )
    r = bench_fp8_decode.split_mixed("t", [(20, 6), (5, 1), (33, 1), (0, 9)], (kvw.FP8_DTYPE,))
    assert r["fp8"]["ok"] and r["fp8"]["rel_err"] < ca.REL_TOL
    whole, both, decodes = timed
    assert whole.shape[0] == 6 + 1 + 1 + 9 and decodes.shape[0] == 2
    assert [x.shape[0] for x in both] == [2, 15]  # the decodes, then the prompts
