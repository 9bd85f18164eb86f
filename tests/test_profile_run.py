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


def _synthetic_run(n: int) -> tuple[list, list]:
    """n steps of one 50 us attention launch and one 10 us sampling launch, 2 us apart;
    three admission steps, then 256 decode rows, then 40."""
    recs, steps, t = [], [], 0.0
    for i in range(n):
        recs.append((t, t + 50.0, "_paged_decode_persistent_kernel"))
        recs.append((t + 52.0, t + 62.0, "_lm_head_argmax_kernel"))
        t += 64.0
        steps.append((256 if i < n // 2 else 40, 1000, 8192 if i < 3 else 0))
    return recs, steps


def test_where_gaps_go_prints_the_floor_and_bound_by_region(capsys):
    recs, steps = _synthetic_run(60)
    profile_run.where_gaps_go(recs, steps, 2, [30.0] * 60, [40.0] * 60)
    out = capsys.readouterr().out
    assert "floor ms, fraction of it, bound ms, fraction of it" in out
    region = {
        line.split()[0] + line.split()[1]: line.split()
        for line in out.splitlines()
        if line.startswith("  admission") or line.startswith("  decode") or "whole run" in line
    }
    # Three admission steps: the first spans 62 us (from the first kernel), the others 64.
    assert region["admissionsteps"][2:] == ["3", "0.2", "0.1", "0.1", "0.1", "0.1"]
    assert region["wholerun"][2] == "60"
    assert float(region["wholerun"][4]) == pytest.approx(1.8)  # 60 x 30 us of floor


def test_where_gaps_go_without_a_matching_schedule(capsys):
    recs, steps = _synthetic_run(60)
    profile_run.where_gaps_go(recs, steps, 2, [30.0] * 59, [40.0] * 59)
    out = capsys.readouterr().out
    assert "no floor column" in out and "time above the floor" not in out
    profile_run.where_gaps_go(recs, steps, 2, [30.0] * 60, None)
    assert "time above the floor" not in capsys.readouterr().out
