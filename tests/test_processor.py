"""Request intake: prompt token ids checked against the vocabulary (vocab_error's fast path
and its scan must agree) and the validation errors make_requests raises."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig

from strixlm.engine.model_info import ModelInfo
from strixlm.engine.processor import InputProcessor, InvalidRequestError, vocab_error
from strixlm.engine.request import SamplingParams


def _scan(ids, vocab):
    """The first id outside [0, vocab), by a plain loop: what vocab_error must report."""
    for t in ids:
        if not 0 <= t < vocab:
            return t
    return None


@pytest.mark.parametrize(
    "ids",
    [
        [0, 5, 99],
        [99] * 1000,
        [3, 100, 7],  # one past the end
        [3, -1, 200],  # the first bad id is reported, not the largest
        [150, -4, 2],
        [-1],
        (1, 2, 100),  # a tuple takes the scan
        {0: 1.0, 100: -2.0},  # logit_bias: its keys are the ids
    ],
)
def test_vocab_error_reports_the_first_bad_id(ids):
    bad = _scan(ids, 100)
    msg = vocab_error(ids, 100)
    if bad is None:
        assert msg is None
    else:
        assert msg == f"token id {bad} is out of range for vocab size 100"


def test_vocab_error_unorderable_items_still_raise():
    with pytest.raises(TypeError):
        vocab_error([1, "2", 3], 100)


def _processor(vocab: int = 100) -> InputProcessor:
    info = ModelInfo("m", None, LlamaConfig(vocab_size=vocab), max_model_len=64, eos_token_id=2)
    return InputProcessor(info)


def test_make_requests_rejects_out_of_vocab_prompts():
    proc = _processor()
    with pytest.raises(InvalidRequestError, match="token id 100 is out of range"):
        proc.make_requests("r", [1, 100], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="token id -3 is out of range"):
        proc.make_requests("r", [-3, 5], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="logit_bias token id 500"):
        proc.make_requests("r", [1, 2], SamplingParams(max_tokens=4, logit_bias={500: 1.0}))
    (req,) = proc.make_requests("r", [0, 99], SamplingParams(max_tokens=4))
    assert req.prompt_token_ids == [0, 99]
