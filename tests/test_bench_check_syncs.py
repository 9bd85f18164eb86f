"""benchmarks/gpu/check_syncs.py's bookkeeping on CPU (debug_mode=False): sync warnings are
recorded with their stacks, and the one that switching the debug mode on raises itself is
set apart from the step's syncs."""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import check_syncs  # noqa: E402

MESSAGE = "called a synchronizing CUDA operation"


def set_sync_debug_mode() -> None:  # named like torch's switch, which warns once itself
    warnings.warn(MESSAGE, UserWarning, stacklevel=1)


def a_step_that_syncs() -> None:
    warnings.warn(MESSAGE, UserWarning, stacklevel=1)


def test_step_sync_is_flagged_and_the_switch_is_not() -> None:
    cap = check_syncs.Capture()
    with check_syncs.capture_syncs(cap, debug_mode=False):
        set_sync_debug_mode()
        a_step_that_syncs()
        a_step_that_syncs()
    assert len(cap.syncs) == 2
    assert all(frames[-1][2] == "a_step_that_syncs" for frames in cap.syncs)
    assert cap.other == {"set_sync_debug_mode (this check's set-up)": 1}
    summary = check_syncs.summarize(cap, steps=2)
    assert summary["flagged_per_step"] == 1.0
