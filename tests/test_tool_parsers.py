"""Tool-call parsers over raw text as Qwen3-Coder / Nemotron 3 (XML) and Hermes / Qwen2.5
(JSON) write it, complete and streamed in random pieces: joined stream deltas must equal
the complete-text result."""

from __future__ import annotations

import json
import random

import pytest

from strixlm.parsers.tools import (
    TOOL_PARSERS,
    ToolSet,
    coerce_value,
    get_tool_parser,
)

TOOLS = ToolSet.from_openai(
    [
        {
            "type": "function",
            "function": {
                "name": "get_current_temperature",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {"type": "string"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                        "days": {"type": "integer"},
                        "threshold": {"type": "number"},
                        "hourly": {"type": "boolean"},
                        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    },
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "str_replace_editor",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string"},
                        "path": {"type": "string"},
                        "file_text": {"type": "string"},
                        "view_range": {"type": "array", "items": {"type": "integer"}},
                        "options": {"type": "object"},
                    },
                },
            },
        },
    ]
)

CODE = (
    "import json\n\n\n"
    "def load(path: str) -> dict:\n"
    '    """Read a config; the XML tag </parameter> may appear in code."""\n'
    "    with open(path) as f:\n"
    "        return json.load(f)\n"
)

# (raw output, content, [(name, arguments as a Python value)], complete)
XML_CASES = [
    (
        "I'll check the temperature in both cities.\n\n"
        "<tool_call>\n<function=get_current_temperature>\n<parameter=location>\n"
        "San Francisco, CA, USA\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=threshold>\n21.5\n</parameter>\n"
        "<parameter=hourly>\nFalse\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=get_current_temperature>\n"
        "<parameter=location>\nParis, France\n</parameter>\n<parameter=days>\nthree\n"
        "</parameter>\n<parameter=threshold>\n20\n</parameter>\n</function>\n</tool_call>",
        "I'll check the temperature in both cities.",
        [
            (
                "get_current_temperature",
                {
                    "location": "San Francisco, CA, USA",
                    "unit": "celsius",
                    "days": 3,
                    "threshold": 21.5,
                    "hourly": False,
                    "limit": None,
                },
            ),
            # "three" is no integer: kept as the text the model wrote.
            (
                "get_current_temperature",
                {"location": "Paris, France", "days": "three", "threshold": 20},
            ),
        ],
        True,
    ),
    (
        # A multi-line code value holding the closing tag itself, typed containers, and a
        # parameter the schema does not declare (kept as a string).
        "<tool_call>\n<function=str_replace_editor>\n<parameter=command>\ncreate\n</parameter>\n"
        f"<parameter=path>\n/repo/config.py\n</parameter>\n<parameter=file_text>\n{CODE}\n"
        "</parameter>\n<parameter=view_range>\n[1, 20]\n</parameter>\n"
        "<parameter=options>\n{'overwrite': True, 'mode': 420}\n</parameter>\n"
        "<parameter=note>\n42\n</parameter>\n</function>\n</tool_call>",
        None,
        [
            (
                "str_replace_editor",
                {
                    "command": "create",
                    "path": "/repo/config.py",
                    "file_text": CODE,
                    "view_range": [1, 20],
                    "options": {"overwrite": True, "mode": 420},
                    "note": "42",
                },
            )
        ],
        True,
    ),
    (
        # Nemotron 3 / Qwen3-Coder sometimes end at EOS without the closing tags.
        "<tool_call>\n<function=get_current_temperature>\n<parameter=location>\nOslo\n"
        "</parameter>\n",
        None,
        [("get_current_temperature", {"location": "Oslo"})],
        True,
    ),
    (
        # A forgotten </parameter> before </function>; a function without parameters.
        "<tool_call>\n<function=get_current_temperature>\n<parameter=location>\nRome\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=list_files>\n</function>\n</tool_call>"
        "\nDone.",
        "Done.",
        [("get_current_temperature", {"location": "Rome"}), ("list_files", {})],
        True,
    ),
    (
        # Not calls: a tag followed by prose, and an unrendered template placeholder.
        "Wrap calls in <tool_call> tags, e.g. <tool_call><function={{ name }}></function>.",
        "Wrap calls in <tool_call> tags, e.g. <tool_call><function={{ name }}></function>.",
        [],
        True,
    ),
]

HERMES_CASES = [
    (
        "<tool_call>\n"
        '{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA",'
        ' "unit": "celsius"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_current_temperature", "arguments": {"location": "Paris, France", '
        '"unit": "celsius"}}\n</tool_call>',
        None,
        [
            ("get_current_temperature", {"location": "San Francisco, CA, USA", "unit": "celsius"}),
            ("get_current_temperature", {"location": "Paris, France", "unit": "celsius"}),
        ],
        True,
    ),
    (
        # Nested arguments whose strings hold braces, quotes, escapes and non-ASCII text.
        "Let me write that file.\n<tool_call>\n"
        '{"name": "str_replace_editor", "arguments": {"command": "create", "path": "/r/é.json", '
        '"file_text": "{\\"k\\": [1, \\"}]\\"]}\\n", "options": {"nested": {"deep": [true, '
        "null, 1.5e3]}}}}\n</tool_call>",
        "Let me write that file.",
        [
            (
                "str_replace_editor",
                {
                    "command": "create",
                    "path": "/r/é.json",
                    "file_text": '{"k": [1, "}]"]}\n',
                    "options": {"nested": {"deep": [True, None, 1500.0]}},
                },
            )
        ],
        True,
    ),
    (
        # Arguments before the name, "parameters" for "arguments", arguments as a string,
        # and no arguments at all.
        '<tool_call>\n{"arguments": {"location": "Oslo"}, "name": "get_current_temperature"}\n'
        '</tool_call><tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>\n'
        '<tool_call>{"name": "list_files"}</tool_call>',
        None,
        [
            ("get_current_temperature", {"location": "Oslo"}),
            ("a", {"x": 1}),
            ("b", {"y": 2}),
            ("list_files", {}),
        ],
        True,
    ),
    (
        # Not JSON: the text stays content.
        "<tool_call>\nget_weather(city='Paris')\n</tool_call>",
        "<tool_call>\nget_weather(city='Paris')\n</tool_call>",
        [],
        True,
    ),
]


def pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.choice([1, 1, 2, 3, 4, 7, 12, 30])
        out.append(text[i : i + n])
        i += n
    return out


def streamed(parser, chunks: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """Content and (name, joined arguments) per call from the deltas, checking their shape."""
    content = ""
    calls: dict[int, list] = {}
    deltas = [parser.feed(c) for c in chunks] + [parser.finish()]
    for d in deltas:
        content += d.content
        for tc in d.calls:
            if tc.id is not None:
                assert tc.index == len(calls) and tc.name and tc.id.startswith("call_")
                calls[tc.index] = [tc.name, ""]
            else:
                assert tc.name is None and tc.index in calls
            calls[tc.index][1] += tc.arguments
    return content or None, [tuple(calls[i]) for i in sorted(calls)]


def check(name: str, output: str, content, want, complete) -> None:
    cls = get_tool_parser(name)
    result = cls(TOOLS).parse(output)
    assert result.content == content
    assert [(c.name, json.loads(c.arguments)) for c in result.calls] == want
    assert all(c.complete == complete for c in result.calls)
    assert len({c.id for c in result.calls}) == len(result.calls)
    whole = [(c.name, c.arguments) for c in result.calls]
    rng = random.Random(len(output))
    for _ in range(40):
        assert streamed(cls(TOOLS), pieces(output, rng)) == (content, whole)
    assert streamed(cls(TOOLS), list(output)) == (content, whole)


@pytest.mark.parametrize("output, content, want, complete", XML_CASES)
def test_qwen3_coder(output, content, want, complete):
    check("qwen3_coder", output, content, want, complete)


@pytest.mark.parametrize("output, content, want, complete", HERMES_CASES)
def test_hermes(output, content, want, complete):
    check("hermes", output, content, want, complete)


def test_arguments_are_json_dumps_shaped():
    """qwen3_coder builds arguments as json.dumps of the typed dict would (what vLLM sends)."""
    (output, _, want, _) = XML_CASES[0]
    calls = get_tool_parser("qwen3_coder")(TOOLS).parse(output).calls
    assert calls[0].arguments == json.dumps(want[0][1], ensure_ascii=False)


@pytest.mark.parametrize("name", ["qwen3_coder", "hermes"])
def test_output_cut_inside_a_call(name):
    text = {
        "qwen3_coder": "<tool_call>\n<function=str_replace_editor>\n<parameter=file_text>\n"
        "def f():\n    return 1",
        "hermes": '<tool_call>\n{"name": "str_replace_editor", "arguments": {"file_text": "def',
    }[name]
    result = get_tool_parser(name)(TOOLS).parse(text)
    (call,) = result.calls
    assert call.name == "str_replace_editor" and not call.complete
    assert call.arguments.startswith('{"file_text": "def')
    assert result.content is None
    # A tag cut before the function name is known is only text.
    cut = {"qwen3_coder": "Sure.\n<tool_call>\n<function=str_", "hermes": 'Sure.<tool_call>{"na'}
    result = get_tool_parser(name)(TOOLS).parse(cut[name])
    assert result.calls == [] and result.content == cut[name]


def test_calls_stream_before_they_end():
    """The name is announced, and string values flow, while the call is being written."""
    p = get_tool_parser("qwen3_coder")(TOOLS)
    assert p.feed("Writing it.\n\n<tool_").content == "Writing it."
    d = p.feed("call>\n<function=str_replace_editor>\n<parameter=file_text>\nimport os\n")
    (head,) = d.calls
    assert head.name == "str_replace_editor" and head.arguments == '{"file_text": "import os'
    d = p.feed("print(1)\n</parameter>\n")  # is that </parameter> structural? not yet known
    assert d.calls[0].arguments == "\\nprint(1)"
    d = p.feed("</function>\n</tool_call>")
    assert d.calls[0].arguments == '"}'
    assert json.loads(p.calls[0].arguments) == {"file_text": "import os\nprint(1)"}

    h = get_tool_parser("hermes")(TOOLS)
    d = h.feed('<tool_call>\n{"name": "str_replace_editor", "arguments": {"path": "/a", ')
    assert d.calls[0].name == "str_replace_editor"
    assert d.calls[0].arguments == '{"path": "/a", '
    assert h.feed('"x": 1}}\n</tool_call>').calls[0].arguments == '"x": 1}'


@pytest.mark.parametrize(
    "text, schema, value",
    [
        ("42", {"type": "integer"}, 42),
        (" -7 ", {"type": "integer"}, -7),
        ("3.0", {"type": "integer"}, 3),
        ("3.5", {"type": "integer"}, "3.5"),
        ("2.5", {"type": "number"}, 2.5),
        ("10", {"type": "number"}, 10),
        ("1e3", {"type": "number"}, 1000.0),
        ("nan", {"type": "number"}, "nan"),
        ("TRUE", {"type": "boolean"}, True),
        ("false", {"type": "boolean"}, False),
        ("yes", {"type": "boolean"}, "yes"),
        ('{"a": [1, 2]}', {"type": "object"}, {"a": [1, 2]}),
        ("{'a': None}", {"type": "object"}, {"a": None}),
        ("[1, 2]", {"type": "object"}, "[1, 2]"),
        ("['x', 'y']", {"type": "array"}, ["x", "y"]),
        ("null", {"type": ["integer", "null"]}, None),
        ("None", {"anyOf": [{"type": "string"}, {"type": "null"}]}, None),
        ("null", {"type": "string"}, "null"),
        ("5", {"type": ["string", "integer"]}, "5"),
        ("5", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, 5),
        ("5", {"enum": [1, 5, 10]}, 5),
        ("007", {"type": "string"}, "007"),
        ("x", {"type": "int"}, "x"),
        ("8", {"type": "int"}, 8),
        ("8", None, "8"),
        ("8", {"description": "no type"}, "8"),
    ],
)
def test_coerce_value(text, schema, value):
    got = coerce_value(text, schema)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "tools, message",
    [
        ([{"type": "function"}], "tools.0.function"),
        ([{"type": "function", "function": {"name": ""}}], "tools.0.function.name"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}], "parameters"),
        ([{"type": "code_interpreter"}], "tools.0.type"),
        (["f"], "tools.0"),
        (
            [{"function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}],
            "tools.1.function.name: duplicate",
        ),
    ],
)
def test_bad_tools(tools, message):
    with pytest.raises(ValueError, match=message):
        ToolSet.from_openai(tools)


def test_registry():
    assert set(TOOL_PARSERS) == {"hermes", "qwen3_coder"}
    with pytest.raises(ValueError, match="unknown tool-call parser 'json'"):
        get_tool_parser("json")
