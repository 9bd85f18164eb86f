"""profile_run.py's split of a run's time above the memory floor by region (CPU: the
arithmetic only; the profile itself needs a GPU)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import profile_run  # noqa: E402


def test_excess_by_region_buckets_steps_by_prompts_then_decode_rows():
    # (decode rows, context, prompt tokens) a step: two admission steps, then decodes at
    # 256, 129, 128, 65, 64 and 1 rows.
    steps = [(0, 0, 8192), (14, 5000, 8000), (256, 9, 0), (129, 9, 0), (128, 9, 0),
             (65, 9, 0), (64, 9, 0), (1, 9, 0)]  # fmt: skip
    spans = [10.0, 20.0, 5.0, 4.0, 3.0, 2.5, 2.0, 1.0]
    floors = [1.0, 2.0, 4.0, 3.0, 2.0, 2.0, 1.0, 0.5]
    bounds = [6.0, 7.0, 4.5, 3.0, 2.0, 2.0, 1.0, 0.5]
    rows = profile_run.excess_by_region(spans, floors, bounds, steps)
    got = {name: (n, meas, fl, bd) for name, n, meas, fl, bd in rows}
    assert got["admission steps"] == (2, 30.0, 3.0, 13.0)
    assert got["decode, 129-256 rows"] == (2, 9.0, 7.0, 7.5)
    assert got["decode, 65-128 rows"] == (2, 5.5, 4.0, 4.0)
    assert got["decode, 1-64 rows"] == (2, 3.0, 1.5, 1.5)
    assert got["whole run"] == (
        8,
        pytest.approx(sum(spans)),
        pytest.approx(sum(floors)),
        pytest.approx(sum(bounds)),
    )
    # The regions partition the run.
    parts = [r for r in rows if r[0] != "whole run"]
    assert sum(r[1] for r in parts) == len(steps)
    assert sum(r[2] for r in parts) == pytest.approx(sum(spans))


def test_excess_by_region_keeps_empty_regions():
    rows = profile_run.excess_by_region([1.0], [0.5], [0.6], [(3, 30, 0)])
    assert [r[:2] for r in rows] == [
        ("admission steps", 0),
        ("decode, 129-256 rows", 0),
        ("decode, 65-128 rows", 0),
        ("decode, 1-64 rows", 1),
        ("whole run", 1),
    ]
