"""thinking_token_budget end to end: a real `strixlm serve` with --reasoning-parser qwen3 on
the tiny scripted model (it writes `<think>\\nTwo plus two is four.\\n</think>\\n\\nThe answer
is 4.`), the official openai client sending extra_body={"thinking_token_budget": N},
streamed and not; a second server without a reasoning parser, which must refuse it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from scripted_model import MATH, SCRIPTS, scripted_model_dir
from server_utils import openai_clients
from transformers import AutoTokenizer

from strixlm.engine.thinking_budget import ReasoningMarkers

COMMON = ("--max-model-len", "512", "--kv-cache-memory", str(16 << 20), "--device", "cpu")
SERVERS = {
    "reasoning": ("--served-model-name", "reasoning", "--reasoning-parser", "qwen3"),
    "plain": ("--served-model-name", "plain"),
}
THINK = next(s for s in SCRIPTS if s.name == "think")
NO_THINK = {"enable_thinking": False}
BUDGETS = [0, 1, 3, 6, 1000]


@pytest.fixture(scope="module")
def model_dir(smollm2_dir) -> str:
    return scripted_model_dir(smollm2_dir)


@pytest.fixture(scope="module")
def tok(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def clients(model_dir):
    with openai_clients(model_dir, SERVERS, COMMON) as clients:
        yield clients


def chat(client: openai.OpenAI, budget=None, template_kwargs=None, **kw):
    extra = {}
    if budget is not None:
        extra["thinking_token_budget"] = budget
    if template_kwargs:
        extra["chat_template_kwargs"] = template_kwargs
    return client.chat.completions.create(
        model=client.models.list().data[0].id,
        messages=MATH,
        temperature=0.0,
        max_tokens=60,
        extra_body=extra,
        **kw,
    )


def streamed(client: openai.OpenAI, budget=None, **kw) -> dict:
    out = {"reasoning": "", "content": "", "finish": None, "usage": None}
    for chunk in chat(client, budget, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            out["usage"] = chunk.usage.completion_tokens
        for c in chunk.choices:
            out["reasoning"] += getattr(c.delta, "reasoning_content", None) or ""
            out["content"] += c.delta.content or ""
            out["finish"] = c.finish_reason or out["finish"]
    return out


@pytest.fixture(scope="module")
def results(clients) -> dict:
    """Every generation at once (the engine batches them)."""
    reasoning = clients["reasoning"]
    jobs = {("free", None): lambda: chat(reasoning, logprobs=True)}
    for b in BUDGETS:
        jobs[("full", b)] = lambda b=b: chat(reasoning, b, logprobs=True)
        jobs[("stream", b)] = lambda b=b: streamed(reasoning, b)
    jobs[("n2", 3)] = lambda: chat(reasoning, 3, n=2)
    jobs[("no_think", None)] = lambda: chat(reasoning, template_kwargs=NO_THINK)
    jobs[("no_think", 0)] = lambda: chat(reasoning, 0, template_kwargs=NO_THINK)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(fn) for k, fn in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def reasoning_of(message) -> str | None:
    return getattr(message, "reasoning_content", None)


def pieces(tok, ids) -> list[str]:
    return [tok.decode([i]) for i in ids]


@pytest.mark.parametrize("budget", [1, 3, 6])
def test_reasoning_is_cut_at_the_budget_and_the_answer_follows(results, tok, budget):
    markers = ReasoningMarkers.from_parser(tok, "qwen3")
    reply = tok.encode(THINK.reply, add_special_tokens=False)
    s, forced = len(markers.start_token_ids), list(markers.forced_token_ids)
    choice = results[("full", budget)].choices[0]
    # The logprobs list every returned token: the tag, `budget` reasoning tokens of the
    # unbudgeted reply, then the forced close; the answer comes after.
    tokens = [t.token for t in choice.logprobs.content]
    assert tokens[: s + budget] == pieces(tok, reply[: s + budget])
    assert tokens[s + budget : s + budget + len(forced)] == pieces(tok, forced)
    reasoning = reasoning_of(choice.message) or ""  # None when it is empty
    assert reasoning == tok.decode(reply[s : s + budget]).strip("\n")
    after = "".join(tokens[s + budget + len(forced) :])
    assert choice.message.content and after.startswith(choice.message.content)
    assert choice.finish_reason == "stop"
    usage = results[("full", budget)].usage
    assert usage.completion_tokens == len(tokens)  # forced tokens are counted

    s = results[("stream", budget)]
    assert (s["reasoning"], s["content"]) == (reasoning, choice.message.content)
    assert s["usage"] == usage.completion_tokens and s["finish"] == "stop"


def test_budget_zero_closes_reasoning_at_once(results):
    msg = results[("full", 0)].choices[0].message
    assert not reasoning_of(msg) and msg.content
    assert results[("full", 0)].choices[0].logprobs.content[3].token == "</"


def test_a_budget_never_reached_changes_nothing(results):
    free, big = results[("free", None)].choices[0], results[("full", 1000)].choices[0]
    assert reasoning_of(free.message) == "Two plus two is four."
    assert free.message.content == "The answer is 4."
    assert big.message == free.message
    assert [t.token for t in big.logprobs.content] == [t.token for t in free.logprobs.content]
    s = results[("stream", 1000)]
    assert (s["reasoning"], s["content"]) == ("Two plus two is four.", "The answer is 4.")


def test_every_choice_gets_the_budget(results):
    choices = results[("n2", 3)].choices
    assert len(choices) == 2
    for c in choices:
        assert reasoning_of(c.message) == "Two plus" and c.message.content


def test_no_reasoning_means_no_budget(results):
    free, zero = results[("no_think", None)], results[("no_think", 0)]
    assert free.choices[0].message.content == "The answer is 4."
    assert zero.choices[0].message == free.choices[0].message
    assert zero.usage.completion_tokens == free.usage.completion_tokens


def bad_request(client: openai.OpenAI, budget) -> dict:
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, budget)
    assert e.value.status_code == 400
    body = e.value.body
    body = body.get("error", body) if isinstance(body, dict) else body
    assert body["type"] == "invalid_request_error"
    return body


@pytest.mark.parametrize("budget", [-1, 2.5, "8", True, [4]])
def test_bad_budgets_are_400(clients, budget):
    body = bad_request(clients["reasoning"], budget)
    assert body["param"] == "thinking_token_budget"
    assert "thinking_token_budget" in body["message"]


def test_without_a_reasoning_parser_it_is_400(clients):
    body = bad_request(clients["plain"], 8)
    assert body["param"] == "thinking_token_budget"
    assert "--reasoning-parser" in body["message"]
    # The server stays healthy and serves requests without a budget.
    assert chat(clients["plain"]).choices[0].message.content
