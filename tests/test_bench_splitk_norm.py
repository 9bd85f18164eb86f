"""The split-K GEMM + reducing add/RMSNorm experiment (benchmarks/gpu/bench_splitk_norm.py)
against its torch reference, under the Triton interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

import bench_splitk_norm  # noqa: E402


def test_splitk_reducing_norm_matches_torch():
    assert bench_splitk_norm.cpu_check() == 0
