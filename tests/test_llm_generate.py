"""LLM.generate adds the requests past the first step's share while that step runs: the
results are those of adding everything first, and a bad prompt anywhere in the list leaves
nothing running (tiny Llama, CPU)."""

from __future__ import annotations

import pytest

from strixlm.engine.processor import InvalidRequestError
from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

PROMPTS = [[5 + i, 17, 23 + i, 42, 7] * (2 + i % 3) for i in range(8)]


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    # A 24-token budget: the first step's share is two of these prompts.
    return LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=256,
        max_num_batched_tokens=24,
        cpu_kv_cache_bytes=32 << 20,
        enable_prefix_caching=False,  # each run computes every prompt the same way
    )


def _tokens(outs):
    return [o.outputs[0].token_ids for o in outs]


def test_late_requests_give_the_same_tokens(llm):
    """Against adding every request before the first step (what generate did before): the
    same schedule, so the same tokens."""
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    late = llm.generate(PROMPTS, greedy, use_tqdm=False)
    assert [o.prompt_token_ids for o in late] == PROMPTS  # in the order given
    engine = llm.engine
    ids = [engine.add_request(p, greedy, kind="final") for p in PROMPTS]
    done = {}
    while engine.has_unfinished():
        done.update({o.request_id: o for o in engine.step() if o.finished})
    assert _tokens(late) == _tokens(done[i] for i in ids)


@pytest.mark.parametrize("bad_at", [1, 6])
def test_a_bad_prompt_leaves_nothing_running(llm, bad_at):
    """bad_at 1 fails inside the first step's share, 6 after the first step launched."""
    prompts = list(PROMPTS)
    prompts[bad_at] = [10_000_000]  # outside the vocabulary
    with pytest.raises(InvalidRequestError, match="out of range"):
        llm.generate(prompts, SamplingParams(max_tokens=50, ignore_eos=True), use_tqdm=False)
    # What was added is aborted: at most the step in flight is left to drain, and it
    # finishes no request.
    steps = 0
    while llm.engine.has_unfinished():
        assert not [o for o in llm.engine.step() if o.finished]
        steps += 1
        assert steps <= 2
    assert llm.engine.core.kv_manager.usage == 0.0
    out = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=3), use_tqdm=False)
    assert len(out) == 1 and out[0].finished
