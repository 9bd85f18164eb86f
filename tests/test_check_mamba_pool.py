"""benchmarks/gpu/check_mamba.py keeps its own handle on the buffer behind its strided state
views: under inference_mode a view has no `._base` (the script failed on the H200 there)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

from check_mamba import pool  # noqa: E402


def test_state_pool_under_inference_mode():
    with torch.inference_mode():
        states = pool(3, (4, 2), torch.bfloat16, "cpu")
        assert states.view._base is None  # what broke `v._base.clone()`
        assert states.view.shape == (3, 4, 2) and not states.view.is_contiguous()
        assert states.view.data_ptr() == states.base.data_ptr()
        assert states.base.shape == (3, 8 + 64)
        copy = states.clone()
        assert torch.equal(copy.base, states.base) and torch.equal(copy.view, states.view)
        copy.view[1].fill_(7)  # writes through the view land in the copy's buffer only
        assert bool((copy.base[1, :8] == 7).all()) and not bool((states.base[1, :8] == 7).all())
        assert torch.equal(copy.base[:, 8:], states.base[:, 8:])  # the padding is untouched
