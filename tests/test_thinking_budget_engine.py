"""Thinking budget through the engine (offline API, CPU) on the tiny scripted model, which
greedily writes `<think>\\nTwo plus two is four.\\n</think>\\n\\nThe answer is 4.` (see
scripted_model.py). Its reasoning is R = 8 tokens between the tags; `</think>` is 3 tokens
(`</`, `think`, `>`), so it closes on its own when 11 reasoning tokens have been counted."""

from __future__ import annotations

import pytest
from scripted_model import MATH, SCRIPTS, scripted_model_dir

from strixlm.engine.processor import InvalidRequestError
from strixlm.engine.request import SamplingParams
from strixlm.engine.thinking_budget import ReasoningMarkers, ThinkingBudgetTracker
from strixlm.entrypoints.llm import LLM

THINK = next(s for s in SCRIPTS if s.name == "think")
R = 8  # reasoning tokens the model writes: "\n Two plus two is four . \n"
ENGINE = dict(device="cpu", dtype="float32", max_model_len=512)


@pytest.fixture(scope="module")
def model_dir(smollm2_dir) -> str:
    return scripted_model_dir(smollm2_dir)


@pytest.fixture(scope="module")
def llm(model_dir) -> LLM:
    return LLM(model_dir, **ENGINE)


@pytest.fixture(scope="module")
def tok(llm):
    return llm.get_tokenizer()


def prompt_of(tok, **kwargs) -> tuple[str, list[int]]:
    text = tok.apply_chat_template(MATH, tokenize=False, add_generation_prompt=True, **kwargs)
    return text, tok.encode(text, add_special_tokens=False)


def markers(tok, parser: str, prompt: str) -> ReasoningMarkers:
    return ReasoningMarkers.from_parser(tok, parser, prompt)


def greedy(budget: int | None, m: ReasoningMarkers | None, **kw) -> SamplingParams:
    return SamplingParams(
        temperature=0.0, max_tokens=32, thinking_token_budget=budget, reasoning_markers=m, **kw
    )


def run(llm: LLM, prompt_ids: list[int], params: list[SamplingParams]) -> list[list[list[int]]]:
    outs = llm.generate([prompt_ids] * len(params), params, use_tqdm=False)
    return [[c.token_ids for c in o.outputs] for o in outs]


def check_against_reference(tokens: list[int], prompt: list[int], sp: SamplingParams) -> int:
    """Every position the reference rules force holds the forced token; returns how many."""
    tracker = ThinkingBudgetTracker(sp.thinking_token_budget, sp.reasoning_markers, len(prompt))
    seq = prompt + tokens
    n = 0
    for pos in range(len(prompt), len(seq)):
        want = tracker.step(seq, pos)
        if want is not None:
            assert seq[pos] == want, (pos - len(prompt), tokens)
            n += 1
    return n


def test_the_scripted_model_reasons_as_expected(llm, tok):
    _, ids = prompt_of(tok)
    natural = run(llm, ids, [greedy(None, None)])[0][0]
    assert natural == tok.encode(THINK.reply, add_special_tokens=False) + [tok.eos_token_id]
    m = markers(tok, "qwen3", "")
    s = len(m.start_token_ids)
    assert natural[:s] == list(m.start_token_ids)
    assert natural[s + R : s + R + len(m.end_token_ids)] == list(m.end_token_ids)


@pytest.mark.parametrize("parser", ["nemotron_v3", "qwen3"])
def test_budget_cuts_reasoning_at_exactly_n_tokens(llm, tok, parser):
    """nemotron_v3 reads this prompt as starting inside reasoning, qwen3 as waiting for the
    model's `<think>`: both count from after the tag the model writes."""
    text, ids = prompt_of(tok)
    m = markers(tok, parser, text)
    assert m.starts_in_reasoning == (parser == "nemotron_v3")
    s, e, f = len(m.start_token_ids), len(m.end_token_ids), m.forced_token_ids
    budgets = [1, 3, 5, 7, R, R + 1, R + 2, R + e, 1000]
    natural, *outs = run(llm, ids, [greedy(None, None)] + [greedy(b, m) for b in budgets])
    natural = natural[0]
    for b, (out,) in zip(budgets, outs, strict=True):
        check_against_reference(out, ids, greedy(b, m))
        if b <= R:  # cut inside the reasoning: tag, b reasoning tokens, the forced close
            assert out[:s] == natural[:s]
            assert out[s : s + b] == natural[s : s + b], b
            assert out[s + b : s + b + len(f)] == list(f), b
        elif b < R + e:  # the model was writing `</think>`: forcing finishes it
            assert out[: s + R + e] == natural[: s + R + e], b
            assert out[s + R + e] == f[-1], b
        else:  # closed by the model within the budget: nothing forced, same output
            assert out == natural, b


def test_budget_zero(llm, tok):
    text, ids = prompt_of(tok)
    nemotron, qwen3 = markers(tok, "nemotron_v3", text), markers(tok, "qwen3", text)
    (a,), (b,) = run(llm, ids, [greedy(0, nemotron), greedy(0, qwen3)])
    f = list(nemotron.forced_token_ids)
    assert a[: len(f)] == f  # reasoning open from the first token: closed at once
    s = list(qwen3.start_token_ids)
    assert b[: len(s) + len(f)] == s + f  # closed right after the model opened it


def test_no_reasoning_no_forcing(llm, tok):
    """enable_thinking=false closes an empty block in the prompt: the budget does nothing."""
    text, ids = prompt_of(tok, enable_thinking=False)
    for parser in ("nemotron_v3", "qwen3"):
        m = markers(tok, parser, text)
        assert not m.starts_in_reasoning
        natural, zero = run(llm, ids, [greedy(None, None), greedy(0, m)])
        assert zero == natural
        assert "The answer is 4." in tok.decode(natural[0])


def test_sync_scheduling_gives_the_same_tokens(model_dir, llm, tok):
    """Async scheduling decides step N+1 before step N's token reaches the host; the device
    decision makes that invisible."""
    text, ids = prompt_of(tok)
    m = markers(tok, "nemotron_v3", text)
    params = [greedy(b, m) for b in (0, 3, R + 1, R + 3)]
    params.append(SamplingParams(n=2, temperature=1.5, seed=3, max_tokens=20,
                                 thinking_token_budget=4, reasoning_markers=m))  # fmt: skip
    sync = LLM(model_dir, async_scheduling=False, **ENGINE)
    assert run(sync, ids, params) == run(llm, ids, params)


@pytest.fixture(scope="module")
def sampled(llm, tok) -> dict:
    """Four samples (temperature 1.5, seed 11) with budget 4, twice, and without a budget."""
    text, ids = prompt_of(tok)
    m = markers(tok, "nemotron_v3", text)

    def sampling(budget: int | None) -> SamplingParams:
        return SamplingParams(n=4, temperature=1.5, seed=11, max_tokens=28, ignore_eos=True,
                              thinking_token_budget=budget, reasoning_markers=m)  # fmt: skip

    budgeted = sampling(4)
    free, first, again = run(llm, ids, [sampling(None), budgeted, budgeted])
    return dict(ids=ids, m=m, sp=budgeted, free=free, first=first, again=again)


def test_sampling_n_samples_is_reproducible_and_forced_right(llm, sampled):
    ids, m, sp, first = sampled["ids"], sampled["m"], sampled["sp"], sampled["first"]
    assert sampled["again"] == first  # stateless seeds: the same samples, forced tokens and all
    forced = 0
    for out, unbudgeted in zip(first, sampled["free"], strict=True):
        forced += check_against_reference(out, ids, sp)
        # Up to the first forced token a sample is exactly what it is without a budget.
        seq = ids + out
        tracker = ThinkingBudgetTracker(4, m, len(ids))
        cut = next(
            (p - len(ids) for p in range(len(ids), len(seq)) if tracker.step(seq, p) is not None),
            len(out),
        )
        assert out[:cut] == unbudgeted[:cut]
    assert forced > 0
    # Alone or beside other requests, a sample draws the same tokens.
    mixed = run(llm, ids, [greedy(2, m), sp, greedy(None, None)])
    assert mixed[1] == first


def test_preemption_replays_the_budget_state(model_dir, sampled, monkeypatch):
    """A pool too small for four 45-token sequences: requests are preempted after their
    budget was forced and restart from their history, which must rebuild the state."""
    resumed = []  # (closed, forced) of each row state rebuilt from a history with outputs
    replay = ThinkingBudgetTracker.replay

    def watch(self, tokens):
        replay(self, tokens)
        if len(tokens) > self.prompt_len:
            resumed.append((self.closed, self.forced))
        return self

    monkeypatch.setattr(ThinkingBudgetTracker, "replay", watch)
    tight = LLM(model_dir, block_size=4, num_gpu_blocks_override=20, **ENGINE)
    assert run(tight, sampled["ids"], [sampled["sp"]]) == [sampled["first"]]
    assert tight.engine.core.scheduler.num_preemptions > 0
    assert any(forced >= 0 for _, forced in resumed), resumed


@pytest.mark.parametrize("parser", ["nemotron_v3", "qwen3"])
def test_chat_fills_the_markers_from_a_reasoning_parser(llm, tok, parser):
    """LLM.chat(..., reasoning_parser=...) reads the conversation as the server does and
    gives the same tokens as generate with markers built by hand; without a parser the
    budget is refused with a message that says what is missing."""
    text, ids = prompt_of(tok)
    by_hand = run(llm, ids, [greedy(3, markers(tok, parser, text))])[0][0]
    outs = llm.chat(MATH, greedy(3, None), use_tqdm=False, reasoning_parser=parser)
    assert outs[0].outputs[0].token_ids == by_hand
    natural = run(llm, ids, [greedy(None, None)])[0][0]
    assert by_hand != natural  # the budget did cut the reasoning
    with pytest.raises(InvalidRequestError, match="reasoning_markers"):
        llm.chat(MATH, greedy(3, None), use_tqdm=False)
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        llm.chat(MATH, greedy(3, None), use_tqdm=False, reasoning_parser="nope")
