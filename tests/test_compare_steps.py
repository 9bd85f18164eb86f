"""benchmarks/gpu/compare_steps.py: step times parsed from profile_step logs, tabulated as
ratios to the first log."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import compare_steps  # noqa: E402


def test_parses_and_tabulates(tmp_path, capsys):
    base = (
        "noise\n##### batch 96: 2.00 ms/step (48000 tok/s)\n"
        "\n##### batch 256: 6.40 ms/step (1 tok/s)\n"
    )
    other = "##### batch 96: 2.10 ms/step (x)\n##### batch 256: 5.12 ms/step (x)\n"
    (tmp_path / "pingstep_off.log").write_text(base)
    (tmp_path / "pingstep_s112.log").write_text(other)
    (tmp_path / "pingstep_fail.log").write_text("Traceback ...\n")
    assert compare_steps.step_times(base) == {96: 2.0, 256: 6.4}
    compare_steps.main([str(tmp_path / n) for n in ("pingstep_off.log", "pingstep_s112.log",
                                                     "pingstep_fail.log")])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert "pingstep_off" in out[0] and "pingstep_s112" in out[0] and "pingstep_fail" in out[0]
    row256 = next(line for line in out if line.startswith("  256"))
    assert "x1.000" in row256 and "x0.800" in row256 and row256.rstrip().endswith("-")
    row96 = next(line for line in out if line.startswith("   96"))
    assert "x1.050" in row96
