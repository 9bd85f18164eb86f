"""check_decode_paths.compare: when a greedy divergence between two runs counts as rounding."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

import check_decode_paths as cdp  # noqa: E402


def _run(tokens: list[int], logprobs: list, gaps: list, seconds: list) -> list:
    """A run's rows; the top-K of a position is its token and a runner-up 'gap' below it."""
    tops = [
        None if lp is None else [[t, lp], [s2, lp - g]]
        for t, lp, g, s2 in zip(tokens, logprobs, gaps, seconds, strict=True)
    ]
    return [list(t) for t in zip(tokens, logprobs, gaps, tops, strict=True)]


def test_swing_within_twice_the_noise_is_rounding() -> None:
    # Shared first token: noise |(-1.0) - (-1.2)| = 0.2. They part at position 1: the
    # reference chose 7 over 8 by 0.25, the variant 8 over 7 by 0.125: swing 0.375 <= 0.4.
    ref = [_run([5, 7], [-1.0, -0.5], [1.0, 0.25], [6, 8])]
    var = [_run([5, 8], [-1.2, -0.6], [1.0, 0.125], [6, 7])]
    r = cdp.compare(var, ref)
    assert abs(r["noise"] - 0.2) < 1e-9
    assert r["parted_gaps"] == [0.25]
    assert r["parted_swings"] == [0.375]
    assert r["ok"] and r["unexplained"] == 0 and r["exact"] == 0


def test_swing_beyond_twice_the_noise_fails() -> None:
    ref = [_run([5, 7], [-1.0, -0.5], [1.0, 0.25], [6, 8])]
    var = [_run([5, 8], [-1.1, -0.6], [1.0, 0.125], [6, 7])]  # noise 0.1, swing 0.375
    r = cdp.compare(var, ref)
    assert not r["ok"] and r["unexplained"] == 1


def test_reference_token_outside_the_variants_top_k_is_never_rounding() -> None:
    ref = [_run([5, 7], [-1.0, -0.5], [1.0, 0.0625], [6, 8])]
    var = [_run([5, 8], [-3.0, -0.6], [1.0, 0.0625], [6, 9])]  # 7 is not the runner-up
    r = cdp.compare(var, ref)
    assert r["outside_top_k"] == 1 and r["unexplained"] == 1 and not r["ok"]


def test_equal_runs_pass_and_tokens_only_runs_use_the_reference_gap() -> None:
    ref = [_run([5, 7], [-1.0, -0.5], [1.0, 0.25], [6, 8]), _run([3], [-0.1], [2.0], [4])]
    r = cdp.compare(ref, ref)
    assert r["ok"] and r["exact"] == 2 and r["token_match"] == 1.0 and r["noise"] == 0.0
    tokens_only = [
        _run([5, 8], [None] * 2, [None] * 2, [None] * 2),
        _run([3], [None], [None], [None]),
    ]
    assert cdp.compare(tokens_only, ref, noise=0.3)["ok"]  # g_ref 0.25 <= 0.3
    assert not cdp.compare(tokens_only, ref, noise=0.2)["ok"]
