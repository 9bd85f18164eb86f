"""The real `strixlm serve` in a subprocess, driven by the official openai client.

Most tests use a tiny random Llama (SmolLM2's tokenizer, so text works); the greedy
equivalence with the offline LLM uses the embedded SmolLM2 default model.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import openai
import pytest
from server_utils import RemoteServer, boot_early_for, metric

API_KEY = "sk-strixlm-test"
MAX_LEN = 512


@pytest.fixture(scope="module", autouse=True)
def early_default_server(request):
    """The default model's server (the last test's) boots in the background meanwhile."""
    args = ("--max-model-len", "512", "--kv-cache-memory", str(32 << 20))
    # The default model is converted before the server looks for it.
    yield from boot_early_for(request, "default_server", None, *args, first=("smollm2_dir",))


@pytest.fixture(scope="module")
def default_server(early_default_server) -> RemoteServer:
    return early_default_server.get()


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    srv = RemoteServer(
        tiny_llama_dir,
        "--served-model-name", "tiny",
        "--max-model-len", str(MAX_LEN),
        "--kv-cache-memory", str(64 << 20),
        "--api-key", API_KEY,
        "--log-stats-interval", "2",
    )  # fmt: skip
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


CHAT = [{"role": "user", "content": "Tell me a story about a cat."}]


def test_models(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny"]
    assert models[0].owned_by == "strixlm"
    assert models[0].model_extra["max_model_len"] == MAX_LEN


def test_completion_and_stream(client):
    kw = dict(model="tiny", prompt="The cat sat on", max_tokens=6, temperature=0.0)
    full = client.completions.create(**kw, extra_body={"ignore_eos": True})
    assert full.object == "text_completion"
    (choice,) = full.choices
    assert choice.finish_reason == "length" and choice.text
    assert full.usage.completion_tokens == 6
    assert full.usage.total_tokens == full.usage.prompt_tokens + 6 and full.usage.prompt_tokens > 0

    chunks = list(
        client.completions.create(
            **kw,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_token_prompts_and_batch(client):
    ids = [[504, 2988, 314], [28, 1500, 33, 77]]
    out = client.completions.create(
        model="tiny", prompt=ids, max_tokens=3, temperature=0.0, extra_body={"ignore_eos": True}
    )
    assert [c.index for c in out.choices] == [0, 1]
    assert out.usage.prompt_tokens == 7 and out.usage.completion_tokens == 6
    single = client.completions.create(
        model="tiny", prompt=ids[1], max_tokens=3, temperature=0.0, extra_body={"ignore_eos": True}
    )
    assert single.choices[0].text == out.choices[1].text


def test_chat_and_stream(client):
    full = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=8, temperature=0.0, extra_body={"ignore_eos": True}
    )
    assert full.object == "chat.completion"
    msg = full.choices[0].message
    assert msg.role == "assistant" and msg.content
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 8

    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            max_completion_tokens=8,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].choices == []
    assert chunks[-1].usage.model_dump()["prompt_tokens"] == full.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == 8


def test_n_with_seed_is_reproducible(client):
    def run():
        return client.chat.completions.create(
            model="tiny", messages=CHAT, n=2, seed=7, temperature=1.0, max_tokens=4,
            extra_body={"ignore_eos": True},
        )  # fmt: skip

    a, b = run(), run()
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert a.choices[0].message.content != a.choices[1].message.content
    assert a.usage.completion_tokens == 8


def test_logprobs(client):
    chat = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=4, temperature=0.0, logprobs=True,
        top_logprobs=3, extra_body={"ignore_eos": True},
    )  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert len(content) == 4
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.bytes == list(t.token.encode())
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].token == t.token and abs(lps[0] - t.logprob) < 1e-5

    comp = client.completions.create(
        model="tiny", prompt="Once upon a time", max_tokens=4, temperature=0.0, logprobs=2,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == comp.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]
    for tok, top in zip(lp.tokens, lp.top_logprobs, strict=True):
        assert 2 <= len(top) <= 3 and tok in top


def test_logit_bias(client, tiny_llama_dir):
    """OpenAI's logit_bias: +100 makes a token win even when sampling at temperature 1, in
    chat and completions; a bias on one token leaves the rest of the choice to the model."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    cat = tok.encode(" cat", add_special_tokens=False)[-1]
    forced = client.completions.create(
        model="tiny", prompt="Once upon a time", max_tokens=3, temperature=1.0, seed=1,
        logit_bias={str(cat): 100}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert forced.choices[0].text == tok.decode([cat] * 3)
    stream = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=3, temperature=0.0, stream=True,
        logit_bias={str(cat): 100}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == tok.decode(
        [cat] * 3
    )
    # Banning the greedy token (every id that spells it): the answer is another one.
    kw = dict(model="tiny", prompt=[5, 6, 7], max_tokens=1, temperature=0.0)
    first = client.completions.create(**kw).choices[0].text
    spelled = tok.batch_decode([[i] for i in range(len(tok))])
    ban = {str(i): -100 for i, text in enumerate(spelled) if text == first}
    assert ban
    assert client.completions.create(**kw, logit_bias=ban).choices[0].text != first


def test_stop_strings(client):
    kw = dict(model="tiny", prompt="The weather today is", max_tokens=16, temperature=0.0)
    base = client.completions.create(**kw, extra_body={"ignore_eos": True}).choices[0].text
    assert len(base) > 12
    stop = base[len(base) // 2 : len(base) // 2 + 3]
    cut = base.index(stop)
    out = client.completions.create(**kw, stop=[stop], extra_body={"ignore_eos": True})
    assert out.choices[0].text == base[:cut] and out.choices[0].finish_reason == "stop"
    kept = client.completions.create(
        **kw, stop=stop, extra_body={"ignore_eos": True, "include_stop_str_in_output": True}
    )
    assert kept.choices[0].text == base[: cut + len(stop)]
    streamed = client.completions.create(
        **kw, stop=[stop], stream=True, extra_body={"ignore_eos": True}
    )
    assert "".join(c.choices[0].text for c in streamed) == base[:cut]


def _assert_error(err: openai.APIStatusError, status: int, param: str | None = None) -> None:
    assert err.status_code == status
    body = err.body
    assert isinstance(body, dict) and body["message"] and body["type"]
    assert set(body) == {"message", "type", "param", "code"}
    if param is not None:
        assert body["param"] == param


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(max_tokens=-3), "max_tokens"),
        (dict(max_tokens=MAX_LEN), None),  # prompt + max_tokens exceed the context
        (dict(prompt=list(range(100, 100 + MAX_LEN + 10))), None),  # prompt too long
        (dict(temperature="hot"), "temperature"),
        (dict(top_p=5), "top_p"),
        (dict(n=0), "n"),
        (dict(prompt=12), "prompt"),
        (dict(extra_body={"min_p": 3.0}), "min_p"),
        (dict(logit_bias={"cat": 1}), "logit_bias"),
        (dict(logit_bias={"5": 300}), "logit_bias"),
        (dict(logit_bias={"99999999": 1}), None),  # outside the vocabulary
    ],
)
def test_bad_completion_requests(client, kwargs, param):
    args = dict(model="tiny", prompt="hi", max_tokens=2) | kwargs
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**args)
    _assert_error(e.value, 400, param)


def test_bad_chat_requests(client):
    cases = [
        dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        dict(messages=[]),
        dict(messages=CHAT, top_logprobs=50, logprobs=True),
        dict(messages=CHAT, max_tokens=-1),
        dict(messages=CHAT, presence_penalty=9),
    ]
    for kw in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", **kw)
        _assert_error(e.value, 400)
    named = [
        (dict(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages.0.content"),
        # vLLM refuses a request's own template unless the server trusts them; so do we.
        (dict(messages=CHAT, extra_body={"chat_template": "{{ messages }}"}), "chat_template"),
    ]
    for kw, param in named:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", **kw)
        _assert_error(e.value, 400, param)


def test_tool_call_turn_with_null_content(client):
    """OpenAI's shape of a conversation after a tool call: the assistant turn has content
    null. Templates that read message['content'] (Llama's, this model's) must still render."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = CHAT + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    out = client.chat.completions.create(model="tiny", messages=history, max_tokens=2)
    assert out.usage.completion_tokens == 2


def test_unknown_model_and_malformed_json(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=CHAT)
    _assert_error(e.value, 404, "model")
    assert e.value.body["code"] == "model_not_found"

    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    for body in ('{"model": "tiny", "prompt": ', "[1, 2]", "not json"):
        r = httpx.post(server.url + "/v1/completions", content=body, headers=headers)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
    # Python's and pydantic's JSON readers take NaN / Infinity; sampling must not.
    for field in ("temperature", "repetition_penalty"):
        for value in ("NaN", "Infinity"):
            body = f'{{"model": "tiny", "prompt": "hi", "max_tokens": 2, "{field}": {value}}}'
            r = httpx.post(server.url + "/v1/completions", content=body, headers=headers)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == field


def test_unknown_fields_are_ignored(client):
    out = client.completions.create(
        model="tiny", prompt="hi", max_tokens=2, extra_body={"frobnicate": 1, "ignore_eos": True}
    )
    assert out.usage.completion_tokens == 2


def test_retrieve_model(client):
    card = client.models.retrieve("tiny")
    assert card.id == "tiny" and card.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("nope")
    _assert_error(e.value, 404, "model")


def test_tokenize_and_detokenize(client, server, tiny_llama_dir):
    """vLLM's /tokenize and /detokenize: the tokenizer's ids for a prompt, and for chat
    messages exactly the prompt a chat completion is charged for."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    auth = {"Authorization": f"Bearer {API_KEY}"}

    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(server.url + path, json=body, headers=auth)

    text = "Once upon a time, a cat"
    r = post("/tokenize", {"model": "tiny", "prompt": text, "return_token_strs": True}).json()
    assert r["tokens"] == tok.encode(text) and r["count"] == len(r["tokens"])
    assert r["max_model_len"] == MAX_LEN
    assert r["token_strs"] == tok.convert_ids_to_tokens(r["tokens"])
    chat = post("/tokenize", {"messages": CHAT}).json()
    billed = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=1)
    assert chat["count"] == billed.usage.prompt_tokens and "token_strs" not in chat
    back = post("/detokenize", {"model": "tiny", "tokens": r["tokens"]}).json()
    assert back == {"prompt": tok.decode(r["tokens"])}

    for path, body, param in [
        ("/tokenize", {"prompt": "x", "messages": CHAT}, "prompt"),  # both
        ("/tokenize", {}, "prompt"),  # neither
        ("/tokenize", {"messages": [{"role": "user", "content": 5}]}, "messages"),
        ("/detokenize", {"tokens": [1, 10_000_000]}, "tokens"),
        ("/detokenize", {"tokens": ["a"]}, "tokens"),
    ]:
        r = post(path, body)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["param"] == param
    assert post("/detokenize", {"model": "nope", "tokens": [1]}).status_code == 404
    assert httpx.post(server.url + "/tokenize", json={"prompt": "x"}).status_code == 401


def test_api_key(server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    _assert_error(e.value, 401)
    assert httpx.post(server.url + "/v1/completions", json={"prompt": "x"}).status_code == 401
    assert httpx.get(server.url + "/v1/models").json()["error"]["code"] == "invalid_api_key"
    # Health, metrics and version stay open, as in vLLM.
    for path in ("/health", "/metrics", "/version"):
        assert httpx.get(server.url + path).status_code == 200


def test_metrics(client, server):
    names = [
        "strixlm:num_requests_running",
        "strixlm:num_requests_waiting",
        "strixlm:kv_cache_usage_perc",
        "strixlm:prefix_cache_hit_rate",
        "strixlm:prompt_tokens_total",
        "strixlm:generation_tokens_total",
        "strixlm:request_success_total",
        "strixlm:time_to_first_token_seconds_bucket",
        "strixlm:inter_token_latency_seconds_bucket",
        "strixlm:e2e_request_latency_seconds_count",
    ]
    client.completions.create(model="tiny", prompt="warm up", max_tokens=1)
    before = server.metrics()
    for n in names:
        assert f"\n{n}" in before, n
    r = client.completions.create(
        model="tiny", prompt="count me", max_tokens=3, extra_body={"ignore_eos": True}
    )
    after = server.metrics()
    for name, delta in [
        ("strixlm:generation_tokens_total", 3),
        ("strixlm:e2e_request_latency_seconds_count", 1),
        ("strixlm:time_to_first_token_seconds_count", 1),
        ("strixlm:inter_token_latency_seconds_count", 2),
    ]:
        assert metric(after, name) - metric(before, name) == delta, name
    ok = "strixlm:request_success_total"
    assert (
        metric(after, ok, finished_reason="length")
        == metric(before, ok, finished_reason="length") + 1
    )
    # Every prompt token the request computed, its last one too (it also sampled).
    details = r.usage.prompt_tokens_details
    computed = r.usage.prompt_tokens - (details.cached_tokens if details else 0)
    prompt_total = "strixlm:prompt_tokens_total"
    assert metric(after, prompt_total) - metric(before, prompt_total) == computed > 0


def _wait_idle(server, what: str) -> str:
    """The server's metrics once it runs nothing and holds no KV block (30 s at most)."""
    usage, running = "strixlm:kv_cache_usage_perc", "strixlm:num_requests_running"
    deadline = time.monotonic() + 30
    while True:
        now = server.metrics()
        if metric(now, usage) == 0.0 and metric(now, running) == 0.0:
            return now
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_disconnect_frees_kv_cache(server):
    """A streaming client that goes away must abort its request and free its KV blocks."""
    usage, running = "strixlm:kv_cache_usage_perc", "strixlm:num_requests_running"
    max_tokens = MAX_LEN - 64
    body = {
        "model": "tiny", "prompt": "hello " * 40, "max_tokens": max_tokens, "stream": True,
        "ignore_eos": True, "temperature": 0.0,
    }  # fmt: skip
    # The tiny model can finish all its tokens before a busy client reads three of them:
    # then nothing is left to abort, and the attempt is made again.
    for _attempt in range(3):
        before = _wait_idle(server, "the server is busy before the request")
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            with http.stream("POST", server.url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                # Keep the iterator referenced: a discarded httpx iterator closes the
                # connection.
                lines = r.iter_lines()
                n = 0
                for line in lines:
                    n += line.startswith("data: ")
                    if n == 3:
                        break
                during = server.metrics()
                if metric(during, running) == 1.0:
                    assert metric(during, usage) > 0.0
                    break
                # Finished already: read it to the end, so the next attempt starts idle.
                assert all(True for _ in lines)
    else:
        pytest.fail("the request finished before the client read three chunks, 3 times")
    # The connection is closed: the server must abort the request long before it could
    # have generated its max_tokens.
    now = _wait_idle(server, "KV cache not freed after the client left")
    gen = metric(now, "strixlm:generation_tokens_total") - metric(
        before, "strixlm:generation_tokens_total"
    )
    assert 3 <= gen < max_tokens
    aborted = "strixlm:request_success_total"
    assert (
        metric(now, aborted, finished_reason="abort")
        == metric(before, aborted, finished_reason="abort") + 1
    )
    # The server still works afterwards.
    r = httpx.post(
        server.url + "/v1/completions",
        json={"prompt": "hi", "max_tokens": 2},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert r.status_code == 200


# ---- `strixlm chat --url` against this server ------------------------------------------


def _chat_session(type_lines, capsys, url: str, lines: list[str], *flags: str):
    """Run `strixlm chat` on these input lines; (stdout, stderr)."""
    from strixlm.entrypoints.chat_cli import run_chat
    from strixlm.entrypoints.cli import build_parser, engine_config_from_args

    argv = ["chat", "--url", url, "--temperature", "0", "--max-tokens", "8", *flags]
    args = build_parser().parse_args(argv)
    type_lines(lines)
    run_chat(args, engine_config_from_args)
    return capsys.readouterr()


@pytest.mark.parametrize("suffix", ["/v1", "", "/v1/"])
def test_chat_cli_replies_as_the_api_does(client, server, type_lines, capsys, suffix):
    """Each reply is the greedy chat completion of the conversation so far, with or
    without /v1 on --url; /reset starts over."""

    def reply(messages: list[dict]) -> str:
        r = client.chat.completions.create(
            model="tiny", messages=messages, temperature=0, max_tokens=8
        )
        return r.choices[0].message.content

    first = reply([{"role": "user", "content": "hi"}])
    second = reply(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "and then?"},
        ]
    )
    after_reset = reply([{"role": "user", "content": "again"}])
    out = _chat_session(
        type_lines,
        capsys,
        server.url + suffix,
        ["hi", "and then?", "/reset", "again"],
        "--api-key",
        API_KEY,
    )
    assert [first, second, after_reset] == out.out.splitlines()[1:4]
    assert "[error]" not in out.err and "HTTP Request" not in out.err + out.out


@pytest.mark.parametrize(
    "url_of, flags, said",
    [
        (lambda s: s.url + "/v1", ("--api-key", "wrong"), "incorrect api key"),
        (lambda s: s.url + "/v2", ("--api-key", API_KEY), "no openai-compatible server"),
        (lambda s: "http://127.0.0.1:9/v1", (), "cannot reach the server"),
        (lambda s: s.url + "/v1", ("--api-key", API_KEY, "--model", "nope"), "does not exist"),
    ],
)
def test_chat_cli_errors_are_one_line_and_it_goes_on(
    server, type_lines, capsys, url_of, flags, said
):
    out = _chat_session(type_lines, capsys, url_of(server), ["hi", "hello"], *flags)
    errors = [ln for ln in out.err.splitlines() if ln.startswith("[error]")]
    assert len(errors) == 2 and all(said in e.lower() for e in errors), out.err
    assert "Traceback" not in out.err


# ---- streamed and whole responses agree, under random parameters ---------------------


def _random_request(rng, endpoint: str) -> dict:
    """Random sampling fields (stop strings come later, from the reply itself)."""
    body: dict = {"model": "tiny", "max_tokens": rng.randrange(1, 24), "n": rng.choice([1, 2])}
    if rng.random() < 0.5:
        body.update(temperature=0.9, seed=rng.randrange(1000), top_p=rng.choice([1.0, 0.8]))
    else:
        body["temperature"] = 0.0
    if rng.random() < 0.4:
        if endpoint == "chat":
            body.update(logprobs=True, top_logprobs=2)
        else:
            body["logprobs"] = 2
    words = " ".join(rng.choice(["cat", "sea", "moon", "run", "blue", "x"]) for _ in range(6))
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": words}]
    else:
        body["prompt"] = words
    return body


def _whole_and_streamed(client, endpoint: str, body: dict):
    """Per choice index: (text, finish_reason, number of logprob entries), whole and streamed."""
    create = client.chat.completions.create if endpoint == "chat" else client.completions.create
    whole = create(**body)
    got = {}
    for c in whole.choices:
        if endpoint == "chat":
            text = c.message.content or ""
            n_lp = len(c.logprobs.content) if c.logprobs else 0
        else:
            text, n_lp = c.text, len(c.logprobs.tokens) if c.logprobs else 0
        got[c.index] = (text, c.finish_reason, n_lp)
    parts: dict[int, list] = {}
    for chunk in create(**body, stream=True):
        for c in chunk.choices:
            text, reason, n_lp = parts.setdefault(c.index, ["", None, 0])
            if endpoint == "chat":
                text += c.delta.content or ""
                n_lp += len(c.logprobs.content) if c.logprobs and c.logprobs.content else 0
            else:
                text += c.text
                n_lp += len(c.logprobs.tokens) if c.logprobs else 0
            parts[c.index] = [text, c.finish_reason or reason, n_lp]
    return got, {i: tuple(v) for i, v in parts.items()}


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streamed_and_whole_responses_agree(client, endpoint):
    """Random n, seeds, top-p, stop strings (with and without the stop string kept) and
    logprobs: the streamed deltas add up to the whole response, choice by choice, with the
    same finish reasons and as many logprob entries."""
    import random

    rng = random.Random(7 if endpoint == "chat" else 8)
    stopped = 0
    for _ in range(10):
        body = _random_request(rng, endpoint)
        whole, streamed = _whole_and_streamed(client, endpoint, body)
        assert whole == streamed, body
        text = whole[0][0]
        if len(text) > 4 and rng.random() < 0.7:
            # A stop string cut from this reply (seeded or greedy: it comes again).
            a = rng.randrange(1, len(text) - 2)
            body["stop"] = [text[a : a + rng.randrange(1, 4)]]
            body["extra_body"] = {"include_stop_str_in_output": rng.random() < 0.5}
            whole, streamed = _whole_and_streamed(client, endpoint, body)
            assert whole == streamed, body
            assert whole[0][1] == "stop", body
            stopped += 1
    assert stopped >= 3


def test_zz_engine_death_is_a_500(client, server):
    """Runs last in this module: it kills the engine process of the shared server."""
    pid = server.engine_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while httpx.get(server.url + "/health").status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(openai.InternalServerError) as e:
        client.completions.create(model="tiny", prompt="hi", max_tokens=2)
    _assert_error(e.value, 500)


def test_greedy_chat_matches_offline_llm(default_server, smollm2_dir):
    """The default model (no MODEL argument) over HTTP == LLM.chat in-process, greedy."""
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    url = default_server.url + "/v1"
    oai = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    (model,) = [m.id for m in oai.models.list().data]
    assert model == "SmolLM2-135M-Instruct"
    got = oai.chat.completions.create(
        model=model, messages=messages, temperature=0.0, max_tokens=10
    )
    llm = LLM(smollm2_dir, max_model_len=512, cpu_kv_cache_bytes=32 << 20)
    (want,) = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=10), use_tqdm=False)
    assert got.choices[0].message.content == want.outputs[0].text
    assert got.usage.completion_tokens == len(want.outputs[0].token_ids)
    assert got.usage.prompt_tokens == len(want.prompt_token_ids)
    assert got.choices[0].finish_reason == want.outputs[0].finish_reason
    # It answers to its Hugging Face id as well.
    hf_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert oai.models.retrieve(hf_id).id == model
    again = oai.chat.completions.create(
        model=hf_id, messages=messages, temperature=0.0, max_tokens=10
    )
    assert again.choices[0].message.content == got.choices[0].message.content
