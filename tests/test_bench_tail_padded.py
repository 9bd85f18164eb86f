"""benchmarks/gpu/sweep_tail_padded.py's bookkeeping on CPU: the decode steps per graph size
it weights its timings by, the workload step it takes each batch's contexts from, and the
two picks it compares (the default rule, and the opt-in tail rule)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import sweep_tail_padded as tail  # noqa: E402
from bench_decode_timeline import workload_shapes  # noqa: E402

from strixlm.kernels import decode_tail  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.worker.cuda_graphs import capture_sizes  # noqa: E402

STEPS = tail.decode_steps(first=30)


def test_steps_per_graph_cover_the_decode_steps() -> None:
    counts = tail.steps_per_graph(STEPS)
    sizes = set(capture_sizes(256))
    assert set(counts) <= sizes
    steps = workload_shapes(list(range(30, 1037)))
    assert sum(counts.values()) == sum(1 for _, ctxs in steps if ctxs)
    assert counts[256] > 0 and counts[1] > 0  # the full batch early, one request at the end


def test_step_of_batch_has_that_many_requests() -> None:
    for b in (40, 33, 16, 1):
        step = tail.step_of_batch(b, STEPS)
        assert step is not None and step >= 700
        assert len(workload_shapes([step])[0][1]) == b
    assert tail.step_of_batch(6, STEPS) is None  # the workload's batch goes from 7 to 5


def test_picks_differ_only_where_the_rule_applies() -> None:
    knob = decode_tail.TAIL_TILE
    for padded in (1, 8, 16, 32):
        old, new = tail.pick(padded, 132, 0), tail.pick(padded, 132, 64)
        assert not old.persistent and not new.persistent
        assert (old.tile, new.tile) == (pa.DECODE_TILE, 64)
    assert tail.pick(40, 132, 0) == tail.pick(40, 132, 64)  # the persistent grid's split
    assert decode_tail.TAIL_TILE == knob  # pick() restores the module's knob
