"""Reasoning parsers: split generated text into reasoning and content, whole or streamed.

A parser is a small state machine fed text deltas of any size (a `</think>` may arrive
split over several deltas). Feeding a whole text at once and then `finish()` gives the same
split as feeding it in pieces, which is how the complete-text mode is built.

Where the output starts (reasoning or content) depends on the prompt: chat templates of
recent reasoning models end the generation prompt with an open `<think>` (DeepSeek-R1,
Nemotron 3 with thinking on, Qwen3 thinking-2507) or with a closed, empty block
(`<think></think>`: thinking turned off), and older templates leave it to the model to
open `<think>` itself. The prompt's tail decides when it holds a tag; otherwise the
family's default does (see `starts_in_reasoning`).

Newlines that only frame the reasoning block (after `<think>`, before `</think>`, and the
blank line after it) are dropped, so `reasoning` and `content` hold the text itself.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from strixlm.parsers.text_scan import partial_tag_len

_NEWLINES = "\r\n"


@dataclass
class ReasoningDelta:
    """What one fed delta contributed; either part may be empty."""

    reasoning: str = ""
    content: str = ""

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content)


@dataclass
class ReasoningResult:
    """The split of a complete text; a part that is empty is None (as vLLM reports it)."""

    reasoning: str | None
    content: str | None


class _Mode(enum.Enum):
    OPENING = "opening"  # before the first visible text: an opening tag may still come
    REASONING = "reasoning"
    CONTENT = "content"


class ReasoningParser:
    """`<think>...</think>` parsing; families differ in where the output starts."""

    name: ClassVar[str] = ""
    start_tag: ClassVar[str] = "<think>"
    end_tag: ClassVar[str] = "</think>"

    def __init__(self, starts_in_reasoning: bool) -> None:
        self.starts_in_reasoning = starts_in_reasoning
        self._mode = _Mode.OPENING
        self._buf = ""
        # Framing newlines are dropped at the start of a reasoning block and of the content
        # that follows `</think>`; these flags say we are still at such a start.
        self._reasoning_start = False
        self._content_start = False

    # ---- construction per request ----------------------------------------------------------
    @classmethod
    def for_request(
        cls, prompt: str | None, chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> ReasoningParser:
        return cls(cls.starts_in_reasoning(prompt or "", chat_template_kwargs or {}))

    @classmethod
    def starts_in_reasoning(cls, prompt: str, chat_template_kwargs: Mapping[str, Any]) -> bool:
        """Whether generated text before any tag is reasoning. The prompt's tail wins (it is
        what the model continues from); families override the fallback."""
        opened = cls.prompt_leaves_reasoning_open(prompt)
        if opened is not None:
            return opened
        return cls.default_starts_in_reasoning(chat_template_kwargs)

    @classmethod
    def default_starts_in_reasoning(cls, chat_template_kwargs: Mapping[str, Any]) -> bool:
        return chat_template_kwargs.get("enable_thinking", True) is not False

    @classmethod
    def prompt_leaves_reasoning_open(cls, prompt: str) -> bool | None:
        """True if the prompt ends with an open reasoning tag, False if it ends with a closed
        block (thinking turned off by the template), None if its tail holds neither."""
        tail = prompt.rstrip()
        if tail.endswith(cls.start_tag):
            return True
        if tail.endswith(cls.end_tag):
            return False
        return None

    @property
    def reasoning_end(self) -> str:
        """The text that ends reasoning: a thinking budget forces it into the output."""
        return self.end_tag

    @property
    def in_reasoning(self) -> bool:
        """Whether text generated next would count as reasoning."""
        if self._mode is _Mode.OPENING:
            return self.starts_in_reasoning
        return self._mode is _Mode.REASONING

    # ---- incremental parsing -----------------------------------------------------------
    def feed(self, text: str) -> ReasoningDelta:
        self._buf += text
        out = ReasoningDelta()
        self._drain(out, final=False)
        return out

    def finish(self) -> ReasoningDelta:
        """Flush what was held back waiting for a possible tag (the output has ended)."""
        out = ReasoningDelta()
        self._drain(out, final=True)
        return out

    def parse(self, text: str) -> ReasoningResult:
        """Split a complete text (this parser must be fresh)."""
        a, b = self.feed(text), self.finish()
        return ReasoningResult(a.reasoning + b.reasoning or None, a.content + b.content or None)

    def _drain(self, out: ReasoningDelta, final: bool) -> None:
        while True:
            if self._mode is _Mode.OPENING:
                if not self._leave_opening(final):
                    return
            elif self._mode is _Mode.REASONING:
                if not self._drain_reasoning(out, final):
                    return
            else:
                self._drain_content(out)
                return

    def _leave_opening(self, final: bool) -> bool:
        """Decide whether the output opens with the start tag; False while undecided."""
        stripped = self._buf.lstrip()
        if stripped.startswith(self.start_tag):
            self._buf = stripped[len(self.start_tag) :]
            self._enter_reasoning()
        elif not final and self.start_tag.startswith(stripped):
            return False  # only whitespace or part of the tag so far
        elif self.starts_in_reasoning:
            self._enter_reasoning()
        else:
            self._mode = _Mode.CONTENT
        return True

    def _enter_reasoning(self) -> None:
        self._mode = _Mode.REASONING
        self._reasoning_start = True

    def _drain_reasoning(self, out: ReasoningDelta, final: bool) -> bool:
        """Emit reasoning; True when `</think>` switched to content (more to drain)."""
        if self._reasoning_start:
            self._buf = self._buf.lstrip(_NEWLINES)
            if not self._buf:
                return False
            self._reasoning_start = False
        end = self._buf.find(self.end_tag)
        if end >= 0:
            out.reasoning += self._buf[:end].rstrip(_NEWLINES)
            self._buf = self._buf[end + len(self.end_tag) :]
            self._mode = _Mode.CONTENT
            self._content_start = True
            return True
        if final:
            out.reasoning += self._buf.rstrip(_NEWLINES)
            self._buf = ""
            return False
        # Hold back a possible start of `</think>` and trailing newlines (they frame the tag).
        keep = len(self._buf) - partial_tag_len(self._buf, self.end_tag)
        while keep > 0 and self._buf[keep - 1] in _NEWLINES:
            keep -= 1
        out.reasoning += self._buf[:keep]
        self._buf = self._buf[keep:]
        return False

    def _drain_content(self, out: ReasoningDelta) -> None:
        if self._content_start:
            self._buf = self._buf.lstrip(_NEWLINES)
            if not self._buf:
                return
            self._content_start = False
        out.content += self._buf
        self._buf = ""
