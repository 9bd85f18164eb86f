"""Thinking budget, unit level: the decision rules (ThinkingBudgetTracker), the device path
(ThinkingBudgetTable / decide_forced_tokens) against them on random histories, the samplers
substituting forced tokens, and validation. Token ids here are small made-up numbers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from strixlm.engine.model_info import ModelInfo
from strixlm.engine.processor import InputProcessor, InvalidRequestError
from strixlm.engine.request import Request, SamplingParams
from strixlm.engine.thinking_budget import (
    MAX_MARKER_TOKENS,
    ReasoningMarkers,
    ThinkingBudgetTracker,
    template_framing,
)
from strixlm.sample.forced_tokens import ThinkingBudgetTable
from strixlm.sample.logprobs import raw_logprobs
from strixlm.sample.metadata import SamplingMetadata, SamplingRow
from strixlm.sample.sampler import Sampler
from strixlm.sample.triton_sampler import TritonSampler, triton_enabled

START, END, FORCED = (1, 2), (3, 4), (3, 4, 5)
PROMPT = [9, 9, 9]


def markers(starts: bool = True, start=START, end=END, forced=FORCED) -> ReasoningMarkers:
    return ReasoningMarkers(start, end, forced, starts)


def generate(budget: int, m: ReasoningMarkers, script: list[int]) -> list[int]:
    """What the engine outputs when the model would write script[i] at output index i."""
    tracker = ThinkingBudgetTracker(budget, m, len(PROMPT))
    tokens = list(PROMPT)
    for i, proposed in enumerate(script):
        forced = tracker.step(tokens, len(PROMPT) + i)
        tokens.append(proposed if forced is None else forced)
    return tokens[len(PROMPT) :]


# ---- the rules ------------------------------------------------------------------------
def test_forces_the_closing_sequence_after_budget_tokens():
    script = [7] * 10
    out = generate(3, markers(), script)
    assert out[:3] == [7, 7, 7]
    assert out[3:6] == list(FORCED)
    assert out[6:] == script[6:]  # the model continues normally


def test_budget_zero_closes_at_once():
    assert generate(0, markers(), [7] * 5)[:3] == list(FORCED)
    # Reasoning opened by the model's tag: closed right after the tag.
    assert generate(0, markers(starts=False), [1, 2, 7, 7, 7, 7])[:5] == [1, 2, *FORCED]


def test_model_closing_before_the_budget_forces_nothing():
    script = [7, 3, 4, 7, 7, 7, 7, 7]
    assert generate(3, markers(), script) == script


def test_closing_exactly_at_the_budget_forces_nothing():
    script = [7, 7, 3, 4, 7, 7, 7]  # the tag completes as reasoning tokens 3 and 4
    assert generate(4, markers(), script) == script


def test_a_closing_tag_under_way_is_continued_not_restarted():
    script = [7, 7, 3, 8, 8, 8, 8]  # the model wrote "3" (the tag's start) as token 3
    assert generate(3, markers(), script)[:5] == [7, 7, 3, 4, 5]


def test_counting_starts_after_the_opening_tag():
    script = [1, 2, 7, 7, 7, 7, 7, 7]
    for starts in (True, False):
        assert generate(2, markers(starts), script)[:7] == [1, 2, 7, 7, *FORCED]


def test_no_reasoning_means_no_budget():
    # The prompt closed thinking (enable_thinking=false) and the model answers.
    script = [7, 7, 7, 7, 7]
    assert generate(0, markers(starts=False), script) == script
    assert generate(0, markers(starts=False, start=()), script) == script


def test_nothing_is_forced_inside_the_opening_tag():
    # Budget 1 would force at output index 1, but [1] may be the start of <think>; [1, 7]
    # is not the tag after all, so reasoning counted from the first token: force now.
    assert generate(1, markers(), [1, 7, 7, 7, 7, 7])[:5] == [1, 7, *FORCED]


def test_replay_rebuilds_the_state_anywhere_in_the_history():
    m = markers()
    tracker = ThinkingBudgetTracker(2, m, len(PROMPT))
    tokens = list(PROMPT)
    states = []
    for _ in range(8):
        states.append((tracker.closed, tracker.forced))
        f = tracker.step(tokens, len(tokens))
        tokens.append(7 if f is None else f)
    states.append((tracker.closed, tracker.forced))
    for cut in range(len(PROMPT), len(tokens) + 1):
        again = ThinkingBudgetTracker(2, m, len(PROMPT)).replay(tokens[:cut])
        assert (again.closed, again.forced) == states[cut - len(PROMPT)], cut


# ---- the device path against the rules ---------------------------------------------------
def _random_case(rng: random.Random) -> tuple[SamplingParams, list[int]]:
    start = tuple(rng.choice([(), (1,), (1, 2), (1, 2, 1)]))
    end = tuple(rng.choice([(3,), (3, 4), (3, 3, 4)]))
    forced = end + tuple(rng.choice([(), (5,), (5, 5)]))
    m = ReasoningMarkers(start, end, forced, rng.random() < 0.6)
    budget = rng.choice([None, 0, 1, 2, 3, 5, 8])
    sp = SamplingParams(thinking_token_budget=budget, reasoning_markers=m)
    prompt = [rng.randrange(1, 8) for _ in range(rng.randrange(1, 5))]
    return sp, prompt


def _propose(rng: random.Random) -> int:
    # Markers are 1..5: they turn up by chance, whole and in part.
    return rng.choice([1, 2, 3, 3, 4, 5, 6, 7, 6, 7, 6, 7])


def test_device_decision_matches_the_reference_on_random_histories():
    rng = random.Random(0)
    num_rows, width, steps = 64, 80, 60
    table = ThinkingBudgetTable(2 * num_rows, "cpu")
    token_ids = torch.zeros(2 * num_rows, width, dtype=torch.int32)
    num_tokens = torch.zeros(2 * num_rows, dtype=torch.int64)
    reqs, trackers = [], []
    for row in range(num_rows):
        sp, prompt = _random_case(rng)
        req = Request(f"r{row}", prompt, sp)
        reqs.append(req)
        b = sp.thinking_token_budget
        trackers.append(
            None if b is None else ThinkingBudgetTracker(b, sp.reasoning_markers, len(prompt))
        )
        table.add(row, req)
        token_ids[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.int32)
        num_tokens[row] = len(prompt)
    table.flush()
    row_of = list(range(num_rows))  # request -> its current row (changes on "preemption")
    free = list(range(num_rows, 2 * num_rows))
    seen = dict(forced=0, continued=0, closed_unforced=0, moved_while_forcing=0)
    for step in range(steps):
        # Re-admit some requests on other rows (as after preemption): their state comes
        # from replaying their history. Those in the middle of forcing go too.
        forcing = [i for i, t in enumerate(trackers) if t and t.forced >= 0 and not t.closed]
        moved = set(forcing) | set(rng.sample(range(num_rows), 3))
        for i in moved:
            seen["moved_while_forcing"] += i in forcing
            free.insert(0, row_of[i])
            row_of[i] = new = free.pop()
            table.add(new, reqs[i])
            hist = reqs[i].all_token_ids
            token_ids[new, : len(hist)] = torch.tensor(hist, dtype=torch.int32)
            num_tokens[new] = len(hist)
        table.flush()
        active = [i for i in range(num_rows) if rng.random() < 0.8]  # a batch, any order
        rng.shuffle(active)
        rows = torch.tensor([row_of[i] for i in active])
        assert table.any_budget(np.array([row_of[i] for i in active]))
        got = table.forced_tokens(token_ids, rows, num_tokens[rows]).tolist()
        for i, forced in zip(active, got, strict=True):
            req, tr = reqs[i], trackers[i]
            want = None
            if tr is not None:
                before = (tr.closed, tr.forced)
                want = tr.step(req.all_token_ids, req.num_tokens)
                seen["continued"] += before[1] < 0 and tr.forced > 1
                seen["closed_unforced"] += tr.closed and before == (False, -1)
            assert forced == (-1 if want is None else want), (req.request_id, step)
            seen["forced"] += forced >= 0
            token = _propose(rng) if forced < 0 else forced
            req.append_token(token)
            r = row_of[i]
            token_ids[r, num_tokens[r]] = token
            num_tokens[r] += 1
    # The random cases went through every branch, several times.
    assert min(seen.values()) >= 3, seen


# ---- the samplers substitute forced tokens -----------------------------------------------
def _metadata(logits: torch.Tensor, forced: list[int]) -> SamplingMetadata:
    rows = [
        SamplingRow(temperature=0.0, num_logprobs=2),
        SamplingRow(temperature=1.0, seed=5, position=3, num_logprobs=2),
        SamplingRow(temperature=0.7, top_k=5, seed=9, position=4, num_logprobs=2),
    ]
    md = SamplingMetadata.build(rows, logits.device, logits.shape[-1])
    md.forced_token_ids = torch.tensor(forced)
    return md


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Triton interpreter noise
@pytest.mark.parametrize("sampler", ["torch", "triton"])
def test_samplers_emit_forced_tokens_with_their_logprobs(sampler):
    torch.manual_seed(0)
    logits = torch.randn(3, 64)
    if sampler == "triton":
        if not triton_enabled(logits, interpret=True):
            pytest.skip("Triton kernels are not available in this run")
        sample = TritonSampler(interpret=True)
    else:
        sample = Sampler()
    free = sample(logits, _metadata(logits, [-1, -1, -1])).sampled_token_ids
    out = sample(logits, _metadata(logits, [-1, 17, 40]))
    assert out.sampled_token_ids.tolist() == [free[0].item(), 17, 40]
    lp = raw_logprobs(logits)
    want = [lp[0, free[0]], lp[1, 17], lp[2, 40]]
    torch.testing.assert_close(out.logprobs.sampled_logprobs, torch.stack(want))


# ---- validation --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_bad_budgets_are_rejected(bad):
    with pytest.raises(ValueError, match="thinking_token_budget must be a non-negative integer"):
        SamplingParams(thinking_token_budget=bad)


def test_markers_are_validated():
    with pytest.raises(ValueError, match="at most"):
        ReasoningMarkers((), (3,) * (MAX_MARKER_TOKENS + 1), (3,))
    with pytest.raises(ValueError, match="required"):
        ReasoningMarkers((1,), (), (3,))
    with pytest.raises(ValueError, match="token ids"):
        ReasoningMarkers((1,), (-3,), (3,))


def test_processor_needs_markers_in_the_vocabulary():
    from transformers import LlamaConfig

    info = ModelInfo("m", None, LlamaConfig(vocab_size=100), max_model_len=64, eos_token_id=2)
    proc = InputProcessor(info)
    with pytest.raises(InvalidRequestError, match="needs reasoning_markers"):
        proc.make_requests("a", [5, 6], SamplingParams(thinking_token_budget=4))
    far = ReasoningMarkers((1,), (3,), (3, 500))
    sp = SamplingParams(thinking_token_budget=4, reasoning_markers=far)
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        proc.make_requests("a", [5, 6], sp)
    ok = SamplingParams(thinking_token_budget=4, reasoning_markers=markers())
    assert len(proc.make_requests("a", [5, 6], ok)) == 1


# Chat templates, rendered by a real tokenizer: Qwen3-style (thinking switch), one without
# a switch (SmolLM2's own), one whose closed block has no framing, one that raises.
SWITCH = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}"
)
TIGHT = "{% for m in messages %}{{ m.content }}{% endfor %}<think></think>"
TEXT_AFTER = "{% for m in messages %}{{ m.content }}{% endfor %}<think></think>Answer:"
RAISES = "{{ raise_exception('this template needs a system message') }}"


@pytest.mark.parametrize(
    "template, framing",
    [(SWITCH, "\n\n"), (None, ""), (TIGHT, ""), (TEXT_AFTER, ""), (RAISES, "")],
)
def test_template_framing(smollm2_dir, template, framing):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    if template is not None:
        tok.chat_template = template
    assert template_framing(tok, "</think>") == framing


def test_markers_from_a_parser_with_single_token_tags(smollm2_dir):
    """Qwen3-like: `<think>` / `</think>` are added tokens, the template frames with "\\n\\n"."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    tok.add_tokens(["<think>", "</think>"])
    tok.chat_template = SWITCH
    think, end = tok.convert_tokens_to_ids(["<think>", "</think>"])
    newlines = tok.encode("\n\n", add_special_tokens=False)
    open_prompt = "<|im_start|>assistant\n<think>\n"
    m = ReasoningMarkers.from_parser(tok, "qwen3", open_prompt)
    assert m == ReasoningMarkers((think,), (end,), (end, *newlines), starts_in_reasoning=True)
    closed_prompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert not ReasoningMarkers.from_parser(tok, "qwen3", closed_prompt).starts_in_reasoning
    # Qwen3's fallback (no tag in the prompt): the model opens <think> itself.
    assert not ReasoningMarkers.from_parser(
        tok, "qwen3", "<|im_start|>assistant\n"
    ).starts_in_reasoning
    assert ReasoningMarkers.from_parser(tok, "deepseek_r1", "").starts_in_reasoning
