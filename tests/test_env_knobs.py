"""STRIXLM_* tuning knobs: a value that does not parse names its variable, at import of the
kernel module that reads it, instead of a bare ValueError from int() / float()."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strixlm.kernels.env_knobs import env_float, env_int, env_ints


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


def test_integer_tuples_parse_to_their_length(monkeypatch):
    monkeypatch.delenv("STRIXLM_TEST_KNOB", raising=False)
    assert env_ints("STRIXLM_TEST_KNOB", (64, 32, 4, 3)) == (64, 32, 4, 3)
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "128,64,8,2")
    assert env_ints("STRIXLM_TEST_KNOB", (64, 32, 4, 3)) == (128, 64, 8, 2)
    for bad in ("128,64,8", "128,64,8,2,1", "128,64,x,2", ""):
        monkeypatch.setenv("STRIXLM_TEST_KNOB", bad)
        with pytest.raises(ValueError, match="STRIXLM_TEST_KNOB must be 4 comma-separated"):
            env_ints("STRIXLM_TEST_KNOB", (64, 32, 4, 3))
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "3,4")
    assert env_ints("STRIXLM_TEST_KNOB", (1, 2), lambda c: c[0] < c[1]) == (3, 4)
    monkeypatch.setenv("STRIXLM_TEST_KNOB", "4,3")
    with pytest.raises(ValueError, match="STRIXLM_TEST_KNOB must be ascending, got '4,3'"):
        env_ints("STRIXLM_TEST_KNOB", (1, 2), lambda c: c[0] < c[1], "ascending")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("STRIXLM_ATTN_SPLIT_CTAS", "two"),
        ("STRIXLM_ATTN_PERSISTENT_CTAS", "4.5"),
        ("STRIXLM_ATTN_PREFILL_CONFIG", "64,32"),
        ("STRIXLM_ATTN_PREFILL_CONFIG", "48,32,4,3"),
    ],
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


def test_the_prefill_config_knob_reaches_the_long_prefill_config():
    probe = (
        "from strixlm.kernels import paged_attention as pa\n"
        "c = pa.select_config(16, 8, 128, 13, 600, 600, 132)\n"
        "print(c.block_m, c.tile, c.num_warps, c.num_stages, c.num_splits, c.persistent)\n"
    )
    outs = []
    for value in (None, "128,64,8,2"):
        env = {k: v for k, v in os.environ.items() if k != "STRIXLM_ATTN_PREFILL_CONFIG"}
        if value:
            env["STRIXLM_ATTN_PREFILL_CONFIG"] = value
        r = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.split())
    assert outs == [["64", "32", "4", "3", "1", "False"], ["128", "64", "8", "2", "1", "False"]]
