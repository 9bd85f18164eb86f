"""benchmarks/gpu/lane_account.py: GPU time per stream from a chrome trace, and the time two
streams ran at once; compare_steps.py's table of it."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import compare_steps  # noqa: E402
import lane_account  # noqa: E402


def kernel(name: str, stream: int, ts: float, dur: float, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}


def two_lane_trace() -> dict:
    """Two steps of 100 us. Stream 7: attention 0-60 (two launches overlapping 10 us), a
    memset at 90-95. Stream 20: GEMMs 40-70 and 75-85 beside it. Plus host events, which
    do not count. Step 2 repeats it 100 us later."""
    events = []
    for t0 in (0.0, 100.0):
        events += [
            kernel("_paged_decode_persistent_kernel", 7, t0 + 0, 35),
            kernel("_merge_segments_kernel", 7, t0 + 25, 35),
            kernel("Memset (Device)", 7, t0 + 90, 5, cat="gpu_memset"),
            kernel("nvjet_tst_128x64", 20, t0 + 40, 30),
            kernel("_splitk_partials_kernel", 20, t0 + 75, 10),
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t0, "dur": 99},
        ]
    return {"traceEvents": events}


def test_union_length_counts_overlaps_once():
    assert lane_account.union_length([]) == 0.0
    assert lane_account.union_length([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20.0


def test_account_per_stream_and_overlap():
    acc = lane_account.account(lane_account.gpu_events(two_lane_trace()))
    assert set(acc.streams) == {7, 20}
    a, g = acc.streams[7], acc.streams[20]
    assert a.busy_us == pytest.approx(2 * 65) and a.attention_us == pytest.approx(2 * 60)
    assert g.busy_us == pytest.approx(2 * 40) and g.attention_us == 0
    assert a.launches == 6 and g.launches == 4
    # Union per step: 0-70, 75-85, 90-95 = 85 us. By kind: attention 0-60, other (GEMMs
    # and the memset) 40-70, 75-85, 90-95 = 45; attention and other at once 40-60 = 20.
    assert acc.any_busy_us == pytest.approx(2 * 85)
    assert acc.span_us == pytest.approx(195)
    assert acc.attention_us == pytest.approx(2 * 60) and acc.other_us == pytest.approx(2 * 45)
    assert acc.overlap_us == pytest.approx(2 * 20)


def test_overlap_by_kind_survives_one_stream_for_everything():
    """A graph replay's kernels filed under one stream: the by-kind overlap still shows."""
    trace = two_lane_trace()
    for ev in trace["traceEvents"]:
        ev.get("args", {})["stream"] = 7
    acc = lane_account.account(lane_account.gpu_events(trace))
    assert set(acc.streams) == {7}
    assert acc.overlap_us == pytest.approx(2 * 20)


def test_report_lines_per_step(tmp_path, capsys):
    lines = lane_account.report(two_lane_trace(), steps=2, label=" batch 256")
    assert lines[0] == (
        "##### lanes batch 256: span 0.098 ms/step, GPU busy 0.085, idle 0.013,"
        " overlap 0.020, attention 0.060, other 0.045"
    )
    assert lines[1].startswith("    stream 7: busy 0.065 ms/step, attention 0.060, other 0.005")
    assert lines[2].startswith("    stream 20: busy 0.040 ms/step, attention 0.000")
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(two_lane_trace()))
    lane_account.main([str(path), "--steps", "2"])
    assert capsys.readouterr().out.splitlines()[0] == lines[0].replace(" batch 256", "")
    assert lane_account.report({"traceEvents": []})[0].endswith("no GPU work in the trace")


def test_compare_steps_tabulates_the_lanes(tmp_path, capsys):
    off = "##### batch 256: 6.00 ms/step (x)\n"
    lines = lane_account.report(two_lane_trace(), steps=2, label=" batch 256")
    on = "##### batch 256: 5.00 ms/step (x)\n" + "\n".join(lines) + "\n"
    (tmp_path / "off.log").write_text(off)
    (tmp_path / "on.log").write_text(on)
    assert compare_steps.lane_times(on) == {256: (0.06, 0.045, 0.02)}
    compare_steps.main([str(tmp_path / "off.log"), str(tmp_path / "on.log")])
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("attention / other / overlap")
    row = out[-1]
    assert row.startswith("  256") and row.rstrip().endswith("0.060/0.045/0.020")
    assert row.split()[1] == "-"


def test_profile_step_prints_the_lanes_of_its_profile():
    """profile_step.py's lanes_of: its profiler's chrome trace, through lane_account."""
    import profile_step

    class FakeProfile:
        def export_chrome_trace(self, path: str) -> None:
            with open(path, "w") as f:
                json.dump(two_lane_trace(), f)

    lines = profile_step.lanes_of(FakeProfile(), steps=2, label=" batch 256")
    assert lines == lane_account.report(two_lane_trace(), steps=2, label=" batch 256")
