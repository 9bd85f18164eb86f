"""The split path's merge inside the attention kernel (strixlm/kernels/segment_merge.py)
against the separate merge launch and the torch reference, under the Triton interpreter."""

from __future__ import annotations

import importlib
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
_MODULES = (
    "strixlm.kernels.kv_write",
    "strixlm.kernels.segment_merge",
    "strixlm.kernels.paged_attention",
)
reimport_interpreted(*_MODULES)
kvw, sm, pa = (importlib.import_module(n) for n in _MODULES)

from test_triton_attention import Batch, rel_err  # noqa: E402

# Decodes (one with fewer tiles than segments: empty segments), a 3-token verification row.
ROWS = [(70, 1), (5, 1), (130, 1), (40, 3)]


def _attend(b: Batch, segs: int) -> torch.Tensor:
    return pa.paged_attention(
        b.q, b.kv_cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.3,
        max_query_len=b.md.max_query_len, max_seq_len=b.md.max_seq_len, num_splits=segs,
        config=pa.AttnConfig(16, 16, 2, 1, segs),
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_in_kernel_merge_matches_the_merge_launch(monkeypatch, dtype):
    b = Batch(ROWS, 4, 2, 32, 4, dtype, seed=7, pad_tokens=2, pad_seqs=1)
    ref = pa.paged_attention_ref(b.q, b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.3)
    launches = []
    real = pa.merge_segments
    monkeypatch.setattr(pa, "merge_segments", lambda *a: launches.append(1) or real(*a))
    separate = _attend(b, 4)
    assert launches == [1]
    monkeypatch.setattr(sm, "ENABLED", True)
    monkeypatch.setattr(sm, "_COUNTERS", {})
    t = b.t
    for _ in range(2):  # the second launch finds the counters back at zero
        fused = _attend(b, 4)
        assert launches == [1]  # no merge launch
        assert int(sm._COUNTERS[torch.device("cpu")].abs().sum()) == 0
        tol = 1e-5 if dtype == torch.float32 else 3e-3
        assert rel_err(fused[:t], ref[:t])[0] < tol
        assert rel_err(fused[:t], separate[:t])[0] < tol


def test_counters_are_bounded_and_off_by_default(monkeypatch):
    assert not sm.ENABLED
    assert sm.merge_counters(torch.device("cpu"), 8) is None
    monkeypatch.setattr(sm, "ENABLED", True)
    monkeypatch.setattr(sm, "_COUNTERS", {})
    assert sm.merge_counters(torch.device("cpu"), sm._COUNTER_SLOTS + 1) is None
    ctr = sm.merge_counters(torch.device("cpu"), 8)
    assert ctr is not None and ctr.dtype == torch.int32 and int(ctr.abs().sum()) == 0
    assert sm.merge_counters(torch.device("cpu"), 16) is ctr  # one buffer per device
