"""STRIXLM_* tuning knobs: a value that does not parse names its variable, at import of the
kernel module that reads it, instead of a bare ValueError from int() / float()."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strixlm.kernels.env_knobs import env_float, env_int


def test_unset_knobs_keep_their_default_and_set_ones_parse(monkeypatch):
    monkeypatch.delenv("STRIXLM_TEST_KNOB", raising=False)
    assert env_int("STRIXLM_TEST_KNOB", 7) == 7
    assert env_float("STRIXLM_TEST_KNOB", 2.5) == 2.5
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "3")
    assert env_int("STRIXLM_TEST_KNOB", 7) == 3
    assert env_float("STRIXLM_TEST_KNOB", 2.5) == 3.0
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "2.9")
    assert env_float("STRIXLM_TEST_KNOB", 2.0) == 2.9
    with pytest.raises(ValueError, match="STRIXLM_TEST_KNOB must be an integer, got '2.9'"):
        env_int("STRIXLM_TEST_KNOB", 7)
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "four")
    with pytest.raises(ValueError, match="STRIXLM_TEST_KNOB must be a number, got 'four'"):
        env_float("STRIXLM_TEST_KNOB", 2.0)


@pytest.mark.parametrize(
    ("var", "value"),
    [("STRIXLM_ATTN_SPLIT_CTAS", "two"), ("STRIXLM_ATTN_PERSISTENT_CTAS", "4.5")],
)
def test_a_bad_knob_names_itself_when_the_kernels_load(var, value):
    env = {**os.environ, var: value}
    r = subprocess.run(
        [sys.executable, "-c", "import strixlm.kernels.paged_decode"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert f"{var} must be" in r.stderr and repr(value) in r.stderr, r.stderr[-2000:]
