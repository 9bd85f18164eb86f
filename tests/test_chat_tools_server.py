"""Reasoning and tool calls end to end: real `strixlm serve` subprocesses, the official
openai client, and a tiny model trained to write the raw text real models write
(`<think>` blocks, Qwen3-Coder XML calls, Hermes JSON calls; see scripted_model.py).

Servers: "nemotron" runs vLLM's Nemotron 3 Super command line (qwen3_coder tool calls,
nemotron_v3 reasoning; fp8 KV cache only in the command-line test: on CPU it runs the
Triton interpreter, too slow here), "hermes" runs hermes calls with qwen3 reasoning, and
"plain" has no parser flags. All generations are sent at once (the engine batches them)
and the tests check the answers.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import openai
import pytest
from scripted_model import (
    BOOK,
    BOOK_TOOL,
    HELLO_PY,
    MATH,
    WEATHER,
    WEATHER_ARGS,
    WEATHER_TOOL,
    WRITE,
    WRITE_FILE_TOOL,
    scripted_model_dir,
)
from server_utils import openai_clients

from strixlm.entrypoints.cli import build_parser, engine_config_from_args, main

NEMOTRON_FLAGS = (
    "--served-model-name", "nemotron", "--tensor-parallel-size", "1", "--trust-remote-code",
    "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
    "--reasoning-parser", "nemotron_v3",
)  # fmt: skip
SERVERS = {
    "nemotron": NEMOTRON_FLAGS,
    "hermes": (
        "--served-model-name", "hermes", "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
    ),
    "plain": ("--served-model-name", "plain"),
}  # fmt: skip
COMMON = ("--max-model-len", "512", "--kv-cache-memory", str(16 << 20), "--device", "cpu")

NAMED = {"type": "function", "function": {"name": "get_weather"}}
NO_THINK = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
WEATHER_FOLLOWUP = WEATHER + [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(WEATHER_ARGS)},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 22 C"},
]

# name -> (server, messages, request options, streamed)
GENERATIONS = {
    "think": ("nemotron", MATH, {}, False),
    "think_stream": ("nemotron", MATH, {}, True),
    "qwen3_think": ("hermes", MATH, {}, False),
    "qwen3_think_stream": ("hermes", MATH, {}, True),
    "no_think": ("nemotron", MATH, NO_THINK, False),
    "no_think_stream": ("nemotron", MATH, NO_THINK, True),
    "no_reasoning": ("nemotron", MATH, {"extra_body": {"include_reasoning": False}}, False),
    "raw": ("plain", MATH, {}, False),
    "weather": ("nemotron", WEATHER, {"tools": [WEATHER_TOOL]}, False),
    "weather_stream": ("nemotron", WEATHER, {"tools": [WEATHER_TOOL]}, True),
    "write": ("nemotron", WRITE, {"tools": [WRITE_FILE_TOOL, WEATHER_TOOL]}, False),
    "write_stream": ("nemotron", WRITE, {"tools": [WRITE_FILE_TOOL, WEATHER_TOOL]}, True),
    "book": ("hermes", BOOK, {"tools": [BOOK_TOOL]}, False),
    "book_stream": ("hermes", BOOK, {"tools": [BOOK_TOOL]}, True),
    "choice_none": ("nemotron", WEATHER, {"tools": [WEATHER_TOOL], "tool_choice": "none"}, False),
    "required": ("nemotron", WEATHER, {"tools": [WEATHER_TOOL], "tool_choice": "required"}, True),
    "named": ("nemotron", WEATHER, {"tools": [WEATHER_TOOL], "tool_choice": NAMED}, True),
    "ignored": ("nemotron", MATH, {"tools": [WEATHER_TOOL], "tool_choice": "required"}, False),
    "followup": ("nemotron", WEATHER_FOLLOWUP, {"tools": [WEATHER_TOOL]}, False),
    "plain_none": ("plain", WEATHER, {"tools": [WEATHER_TOOL], "tool_choice": "none"}, False),
}


@pytest.fixture(scope="module")
def model_dir(smollm2_dir) -> str:
    return scripted_model_dir(smollm2_dir)


@pytest.fixture(scope="module")
def clients(model_dir):
    with openai_clients(model_dir, SERVERS, COMMON) as clients:
        yield clients


def chat(client: openai.OpenAI, messages, **kw):
    return client.chat.completions.create(
        model=client.models.list().data[0].id,
        messages=messages,
        temperature=0.0,
        max_tokens=200,
        **kw,
    )


@dataclass
class Streamed:
    """A streamed chat completion, joined back together."""

    reasoning: str = ""
    reasoning_alias: str = ""
    content: str = ""
    calls: dict[int, dict] = field(default_factory=dict)
    fragments: dict[int, list[str]] = field(default_factory=dict)
    finish: str | None = None
    roles: list[str] = field(default_factory=list)

    def arguments(self, index: int) -> dict:
        return json.loads("".join(self.fragments[index]))


def stream(client: openai.OpenAI, messages, **kw) -> Streamed:
    out = Streamed()
    for chunk in chat(client, messages, stream=True, **kw):
        for choice in chunk.choices:
            d = choice.delta
            if d.role:
                out.roles.append(d.role)
            out.reasoning += getattr(d, "reasoning_content", None) or ""
            out.reasoning_alias += getattr(d, "reasoning", None) or ""
            out.content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.id is not None:  # the first delta of a call: id, type, name
                    assert tc.index not in out.calls
                    assert tc.type == "function" and tc.function.name
                    out.calls[tc.index] = {"id": tc.id, "name": tc.function.name}
                    out.fragments[tc.index] = []
                else:
                    assert tc.type is None and tc.function.name is None
                out.fragments[tc.index].append(tc.function.arguments or "")
            if choice.finish_reason is not None:
                out.finish = choice.finish_reason
    return out


def build_openai_chat_models() -> None:
    """The openai client's models defer building their validators to first use, and
    pydantic's deferred build is not thread-safe: two threads parsing their first chunk at
    once can hit a half-built model (PydanticUserError, seen once in CI-sized runs). Build
    every chat-completion model here, in one thread, before the requests run in parallel."""
    import importlib
    import pkgutil

    import openai.types.chat as chat_types
    import pydantic

    for info in pkgutil.iter_modules(chat_types.__path__, chat_types.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel):
                obj.model_rebuild(force=True)


@pytest.fixture(scope="module")
def results(clients) -> dict:
    def run(case):
        server, messages, kw, streamed = case
        return (stream if streamed else chat)(clients[server], messages, **kw)

    build_openai_chat_models()
    with ThreadPoolExecutor(len(GENERATIONS)) as pool:
        futures = {name: pool.submit(run, case) for name, case in GENERATIONS.items()}
        return {name: f.result() for name, f in futures.items()}


def reasoning_of(message) -> str | None:
    r = getattr(message, "reasoning_content", None)
    assert getattr(message, "reasoning", None) == r  # the newer name carries the same text
    return r


# ---- reasoning ------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["think", "qwen3_think"])
def test_reasoning_split(results, case):
    full = results[case].choices[0]
    assert reasoning_of(full.message) == "Two plus two is four."
    assert full.message.content == "The answer is 4."
    assert not full.message.tool_calls and full.finish_reason == "stop"

    s = results[case + "_stream"]
    assert s.roles == ["assistant"]
    assert (s.reasoning, s.content, s.finish) == (
        "Two plus two is four.",
        "The answer is 4.",
        "stop",
    )
    assert s.reasoning_alias == s.reasoning


def test_enable_thinking_false_reaches_the_template(results):
    msg = results["no_think"].choices[0].message
    # The model answers without a think block only for the prompt the kwarg produces.
    assert msg.content == "The answer is 4." and reasoning_of(msg) is None
    s = results["no_think_stream"]
    assert (s.reasoning, s.content) == ("", "The answer is 4.")


def test_include_reasoning_false_drops_it(results):
    msg = results["no_reasoning"].choices[0].message
    assert reasoning_of(msg) is None and msg.content == "The answer is 4."


def test_without_parsers_the_text_is_raw(results):
    msg = results["raw"].choices[0].message
    assert msg.content == "<think>\nTwo plus two is four.\n</think>\n\nThe answer is 4."
    assert reasoning_of(msg) is None


# ---- tool calls ------------------------------------------------------------------------
def test_qwen3_coder_call_with_reasoning(results):
    choice = results["weather"].choices[0]
    assert choice.finish_reason == "tool_calls"
    assert reasoning_of(choice.message) == "I call get_weather."
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    # Typed from the schema: "3" -> 3 (integer), "true" -> True (boolean).
    assert json.loads(call.function.arguments) == WEATHER_ARGS

    s = results["weather_stream"]
    assert s.finish == "tool_calls" and s.content == ""
    assert s.reasoning == "I call get_weather."
    assert list(s.calls) == [0] and s.calls[0]["name"] == "get_weather"
    assert s.calls[0]["id"] != call.id
    assert s.arguments(0) == WEATHER_ARGS


def test_multiline_string_parameter_streams(results):
    full = results["write"].choices[0]
    assert full.message.content == "I will write the file."
    assert reasoning_of(full.message) == "I call write_file."
    (call,) = full.message.tool_calls
    want = {"path": "hello.py", "content": HELLO_PY, "mode": 644}
    assert call.function.name == "write_file"
    assert json.loads(call.function.arguments) == want

    s = results["write_stream"]
    assert s.content == "I will write the file." and s.finish == "tool_calls"
    assert s.arguments(0) == want
    assert "".join(s.fragments[0]) == call.function.arguments
    # The code arrived in pieces as it was generated, not in one block at the end.
    assert sum(1 for f in s.fragments[0] if f) > 5


def test_hermes_call_with_nested_arguments(results):
    want = {
        "restaurant": "Chez Nous",
        "party": {"size": 4, "seating": ["window", "quiet"]},
        "time": "19:00",
    }
    choice = results["book"].choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "book_table"
    assert json.loads(call.function.arguments) == want

    s = results["book_stream"]
    assert s.finish == "tool_calls" and s.content == "" and s.reasoning == ""
    assert s.calls[0]["name"] == "book_table" and s.arguments(0) == want


def test_tool_choice_none_returns_plain_content(results):
    choice = results["choice_none"].choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert reasoning_of(choice.message) == "I call get_weather."
    content = choice.message.content
    assert content.startswith("<tool_call>\n<function=get_weather>\n<parameter=city>")
    assert content.endswith("</function>\n</tool_call>")


@pytest.mark.parametrize("case", ["required", "named"])
def test_required_and_named_choice(results, case):
    s = results[case]
    assert s.finish == "tool_calls" and s.calls[0]["name"] == "get_weather"
    assert s.arguments(0) == WEATHER_ARGS


def test_required_choice_the_model_ignores_finishes_normally(results):
    # No guided decoding: a model that answers instead of calling is not overruled.
    choice = results["ignored"].choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == "The answer is 4."


def test_tool_result_round_trip(results):
    """History in OpenAI's shape (arguments as JSON text, a tool message) renders as the
    model was trained on it (arguments as a mapping), so it answers from the result."""
    msg = results["followup"].choices[0].message
    assert msg.content == "Sunny and 22 C."
    assert reasoning_of(msg) == "It is sunny."


def test_tool_choice_none_works_without_parsing_flags(results):
    choice = results["plain_none"].choices[0]
    assert choice.message.content.startswith("<think>\nI call get_weather.\n</think>")
    assert not choice.message.tool_calls


# ---- errors ----------------------------------------------------------------------------
def bad_request(client, messages, **kw) -> dict:
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages, **kw)
    assert e.value.status_code == 400
    body = e.value.body
    body = body.get("error", body) if isinstance(body, dict) else body
    assert body["type"] == "invalid_request_error" and body["message"]
    return body


@pytest.mark.parametrize(
    "kw, param",
    [
        (dict(tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "x"}}),
         "tool_choice"),
        (dict(tool_choice="required"), "tool_choice"),
        (dict(tools=[{"type": "function", "function": {"description": "no name"}}]), "tools"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
         "tools"),
        (dict(tools=[{"type": "retrieval"}]), "tools"),
        (dict(tools=[WEATHER_TOOL, WEATHER_TOOL]), "tools"),
        (dict(tools=[WEATHER_TOOL], tool_choice="sometimes"), "tool_choice"),
    ],
)  # fmt: skip
def test_bad_tools_are_400(clients, kw, param):
    assert bad_request(clients["nemotron"], WEATHER, **kw)["param"] == param


@pytest.mark.parametrize(
    "tool_choice",
    [None, "auto", "required", {"type": "function", "function": {"name": "get_weather"}}],
)
def test_tool_choice_without_parsing_flags_is_400(clients, tool_choice):
    kw = {} if tool_choice is None else {"tool_choice": tool_choice}
    body = bad_request(clients["plain"], WEATHER, tools=[WEATHER_TOOL], **kw)
    assert "--enable-auto-tool-choice" in body["message"] and body["param"] == "tool_choice"


# ---- command line ----------------------------------------------------------------------
def test_vllm_nemotron_command_line_is_accepted():
    argv = ["serve", "some/model", *NEMOTRON_FLAGS, "--kv-cache-dtype", "fp8"]
    args = build_parser().parse_args(argv)
    cfg = engine_config_from_args(args)
    assert cfg.cache.kv_cache_dtype == "fp8" and cfg.model.served_model_name == "nemotron"
    assert cfg.model.trust_remote_code and cfg.tensor_parallel_size == 1
    assert (args.reasoning_parser, args.tool_call_parser) == ("nemotron_v3", "qwen3_coder")
    assert args.enable_auto_tool_choice


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--reasoning-parser", "deepseek"], "--reasoning-parser"),
        (["--tool-call-parser", "json"], "--tool-call-parser"),
        (["--enable-auto-tool-choice"], "--enable-auto-tool-choice"),
        (["--tensor-parallel-size", "4"], "--tensor-parallel-size"),
        (["-tp", "0"], "--tensor-parallel-size"),
    ],
)
def test_bad_parser_flags_name_the_flag(argv, flag, capsys):
    # Fails before any model is loaded, so a model that does not exist is fine here.
    with pytest.raises(SystemExit) as e:
        main(["serve", "no/such/model", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err
