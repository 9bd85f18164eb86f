"""Reasoning parsers over raw text as DeepSeek-R1, Qwen3 and Nemotron 3 write it, complete
and streamed in random pieces (the streamed split must equal the complete one)."""

from __future__ import annotations

import random

import pytest

from strixlm.parsers.reasoning import REASONING_PARSERS, get_reasoning_parser

# Generation prompts' tails, as each family's chat template renders them.
R1_PROMPT = "<｜begin▁of▁sentence｜><｜User｜>What is 15% of 80?<｜Assistant｜><think>\n"
QWEN3_PROMPT = "<|im_start|>user\nWhat is 15% of 80?<|im_end|>\n<|im_start|>assistant\n"
QWEN3_NO_THINK_PROMPT = QWEN3_PROMPT + "<think>\n\n</think>\n\n"
QWEN3_2507_PROMPT = QWEN3_PROMPT + "<think>\n"
NEMOTRON_PROMPT = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"  # noqa: E501
NEMOTRON_NO_THINK_PROMPT = NEMOTRON_PROMPT.removesuffix("<think>\n") + "<think></think>"

R1_OUTPUT = (
    "Okay, the user wants 15% of 80. Let me think.\n\n10% of 80 is 8, and 5% is half of "
    "that, 4. So 8 + 4 = 12.\n</think>\n\n15% of 80 is **12**.\n\n"
    "- 10% of 80 = 8\n- 5% of 80 = 4"
)
R1_REASONING = (
    "Okay, the user wants 15% of 80. Let me think.\n\n10% of 80 is 8, and 5% is half of "
    "that, 4. So 8 + 4 = 12."
)
R1_CONTENT = "15% of 80 is **12**.\n\n- 10% of 80 = 8\n- 5% of 80 = 4"

CASES = [
    # (parser, prompt, chat_template_kwargs, raw output, reasoning, content)
    ("deepseek_r1", R1_PROMPT, {}, R1_OUTPUT, R1_REASONING, R1_CONTENT),
    # Older R1 templates leave <think> to the model.
    ("deepseek_r1", "<｜Assistant｜>", {}, "<think>\n" + R1_OUTPUT, R1_REASONING, R1_CONTENT),
    # Cut by max_tokens inside the reasoning: all of it is reasoning.
    (
        "deepseek_r1",
        R1_PROMPT,
        {},
        "Okay, 10% of 80 is 8, and\n",
        "Okay, 10% of 80 is 8, and",
        None,
    ),
    # Original Qwen3: the model opens the block itself.
    ("qwen3", QWEN3_PROMPT, {}, "<think>\n" + R1_OUTPUT, R1_REASONING, R1_CONTENT),
    # enable_thinking=False: the template closed an empty block; the answer is content.
    ("qwen3", QWEN3_NO_THINK_PROMPT, {"enable_thinking": False}, R1_CONTENT, None, R1_CONTENT),
    # An instruct model (no thinking at all) behind the qwen3 parser.
    ("qwen3", QWEN3_PROMPT, {}, R1_CONTENT, None, R1_CONTENT),
    # Thinking-2507 templates open the block in the prompt.
    ("qwen3", QWEN3_2507_PROMPT, {}, R1_OUTPUT, R1_REASONING, R1_CONTENT),
    # An empty think block (Qwen3 sometimes closes it right away).
    ("qwen3", QWEN3_PROMPT, {}, "<think>\n\n</think>\n\nHello!", None, "Hello!"),
    ("nemotron_v3", NEMOTRON_PROMPT, {}, R1_OUTPUT, R1_REASONING, R1_CONTENT),
    (
        "nemotron_v3",
        NEMOTRON_NO_THINK_PROMPT,
        {"enable_thinking": False},
        R1_CONTENT,
        None,
        R1_CONTENT,
    ),
    # A template that shows no tag: thinking off by kwarg means content, else reasoning.
    ("nemotron_v3", QWEN3_PROMPT, {"enable_thinking": False}, R1_CONTENT, None, R1_CONTENT),
    ("nemotron_v3", QWEN3_PROMPT, {}, R1_OUTPUT, R1_REASONING, R1_CONTENT),
    # Tags inside the content (after the reasoning) are text, and indentation survives.
    (
        "qwen3",
        QWEN3_PROMPT,
        {},
        "<think>\nShow code.\n</think>\n\n    x = '<think>'\n    y = '</think>'",
        "Show code.",
        "    x = '<think>'\n    y = '</think>'",
    ),
    # Reasoning that mentions the opening tag keeps it.
    (
        "deepseek_r1",
        R1_PROMPT,
        {},
        "Should I write <think> here? No.\n</think>\nDone.",
        "Should I write <think> here? No.",
        "Done.",
    ),
    # Nothing generated at all (e.g. max_tokens=1 hit EOS at once).
    ("qwen3", QWEN3_PROMPT, {}, "", None, None),
    ("deepseek_r1", R1_PROMPT, {}, "\n", None, None),
]


def pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.choice([1, 1, 2, 3, 5, 8, 13])
        out.append(text[i : i + n])
        i += n
    return out


def stream_split(parser, chunks: list[str]) -> tuple[str | None, str | None]:
    reasoning = content = ""
    for c in chunks:
        d = parser.feed(c)
        reasoning += d.reasoning
        content += d.content
    d = parser.finish()
    return (reasoning + d.reasoning) or None, (content + d.content) or None


@pytest.mark.parametrize("name, prompt, kwargs, output, reasoning, content", CASES)
def test_complete_and_streamed(name, prompt, kwargs, output, reasoning, content):
    cls = get_reasoning_parser(name)
    result = cls.for_request(prompt, kwargs).parse(output)
    assert (result.reasoning, result.content) == (reasoning, content)
    rng = random.Random(hash((name, output)) & 0xFFFF)
    for _ in range(40):
        parser = cls.for_request(prompt, kwargs)
        assert stream_split(parser, pieces(output, rng)) == (reasoning, content)
    one_char = cls.for_request(prompt, kwargs)
    assert stream_split(one_char, list(output)) == (reasoning, content)


def test_end_tag_split_across_deltas_is_not_leaked():
    parser = get_reasoning_parser("qwen3").for_request(QWEN3_PROMPT)
    seen = []
    for piece in ["<th", "ink>\nI think", " so.\n</", "thi", "nk>\n", "\nYes."]:
        d = parser.feed(piece)
        seen.append((d.reasoning, d.content))
    assert "".join(r for r, _ in seen) == "I think so."
    assert "".join(c for _, c in seen) == "Yes."
    assert all("<" not in r and ">" not in r for r, _ in seen)
    assert not parser.finish()


def test_text_is_emitted_as_it_arrives():
    """Only a possible tag prefix (and framing newlines) is held back, not whole blocks."""
    parser = get_reasoning_parser("deepseek_r1").for_request(R1_PROMPT)
    assert parser.feed("Let me add").reasoning == "Let me add"
    assert parser.feed(" them.\n</th").reasoning == " them."
    d = parser.feed("ink>\n\nIt is 12")
    assert (d.reasoning, d.content) == ("", "It is 12")
    assert parser.feed(" exactly.").content == " exactly."


def test_state_for_a_thinking_budget():
    parser = get_reasoning_parser("nemotron_v3").for_request(NEMOTRON_PROMPT)
    assert parser.reasoning_end == "</think>"
    assert parser.in_reasoning
    parser.feed("Still thinking")
    assert parser.in_reasoning
    parser.feed(" and done.</think>Answer")
    assert not parser.in_reasoning
    off = get_reasoning_parser("qwen3").for_request(QWEN3_NO_THINK_PROMPT)
    assert not off.in_reasoning


def test_registry():
    assert set(REASONING_PARSERS) == {"deepseek_r1", "qwen3", "nemotron_v3"}
    with pytest.raises(ValueError, match="unknown reasoning parser 'r1'"):
        get_reasoning_parser("r1")
