"""benchmarks/gpu/check_pingpong.py on CPU: it takes one decode step's model inputs from a
running engine and compares the ping-pong's forward with the plain one (the lanes are one
here; the halves' matmuls may round differently from the whole batch's), and it flags a
split that mixes up the halves."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import check_pingpong  # noqa: E402
from dummy_engine import start_decoding  # noqa: E402

from strixlm.entrypoints.llm import LLM  # noqa: E402
from strixlm.models import pingpong  # noqa: E402


@pytest.fixture(scope="module")
def decoding(tiny_qwen3_dir):
    llm = LLM(
        tiny_qwen3_dir,
        device="cpu",
        dtype="float32",
        skip_tokenizer_init=True,
        attention_backend="triton",
        max_num_seqs=6,
        enforce_eager=True,
    )
    start_decoding(llm.engine, 6, 5, max_tokens=200)
    model = llm.engine.core.runner.model
    return model, check_pingpong.capture_decode_inputs(llm.engine, model, 6)


def test_the_split_matches_the_plain_forward(decoding):
    model, inputs = decoding
    ids, _, md = inputs
    assert ids.shape[0] == 6 and md.is_pure_decode and md.seq_lens.shape[0] == 6
    res = check_pingpong.compare(model, inputs, sms=8, graphs=False)
    assert res["ok"] and res["on_runs_equal"] and res["graph_equal"] is None
    assert res["rel_diff_vs_plain"] < 1e-5  # the halves' matmuls may round differently
    assert pingpong.SMS == 0 and pingpong.MIN_ROWS == 129  # restored


def test_a_broken_split_is_flagged(decoding, monkeypatch):
    model, inputs = decoding
    real = pingpong.half_metadata

    def first_rows_tables(md, lo, hi):  # every half reads the first rows' block tables
        half = real(md, lo, hi)
        half.block_table = md.block_table[: hi - lo]
        return half

    monkeypatch.setattr(pingpong, "half_metadata", first_rows_tables)
    res = check_pingpong.compare(model, inputs, sms=8, graphs=False)
    assert not res["ok"] and res["rel_diff_vs_plain"] > 5e-2
