"""Tool-call parsers: find tool calls in generated text, whole or streamed.

The text outside the calls is content. Each family differs only in the markup of one call,
handled by a `CallBody` that starts after the call's opening tag and finds its own end
structurally (a closing tag inside a parameter value, e.g. in code, does not end it).
While streaming, a call is announced as soon as its function name is known and its
arguments follow as JSON fragments; the fragments of a call joined are its arguments.

Whitespace that only separates content from calls (before a call, between and after calls)
is dropped. A call the output ends inside of (e.g. cut by max_tokens) is kept with the
arguments written so far and `complete=False`; an opening tag not followed by a valid
call is content.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from strixlm.parsers.text_scan import partial_tag_len
from strixlm.parsers.tools.schema import ToolSet


@dataclass
class ToolCallDelta:
    """One streamed piece of a call: the first carries id and name, later ones arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class ToolParseDelta:
    content: str = ""
    calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.calls)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text of an object
    complete: bool = True


@dataclass
class ToolParseResult:
    content: str | None
    calls: list[ToolCall]


@dataclass
class BodyStep:
    """What a call body made of the text it was fed."""

    name: str | None = None  # set once: the function name is now known
    arguments: str = ""
    status: Literal["open", "done", "rejected"] = "open"
    rest: str = ""  # done: text after the call's end; rejected: all text fed to the body


class CallBody(ABC):
    """Parses one call, fed the text after its opening tag."""

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools

    @abstractmethod
    def feed(self, text: str, final: bool) -> BodyStep:
        """Consume more text; `final` means the output ends here."""


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolParser(ABC):
    name: ClassVar[str] = ""
    start_tag: ClassVar[str] = "<tool_call>"

    def __init__(self, tools: ToolSet | None = None) -> None:
        self.tools = tools or ToolSet()
        self.calls: list[ToolCall] = []
        self._buf = ""  # content text not yet emitted (a possible start tag)
        self._ws_held = ""  # trailing whitespace of content: dropped if a call follows
        self._after_call = False
        self._body: CallBody | None = None
        self._announced = False  # the open call's name was already emitted

    @abstractmethod
    def new_body(self) -> CallBody:
        """A parser for one call of this family's format."""

    # ---- incremental parsing -----------------------------------------------------------
    def feed(self, text: str) -> ToolParseDelta:
        out = ToolParseDelta()
        self._run(text, out, final=False)
        return out

    def finish(self) -> ToolParseDelta:
        out = ToolParseDelta()
        self._run("", out, final=True)
        self._emit_content(self._buf, out)
        self._buf = ""
        if not self._after_call:
            out.content += self._ws_held
        self._ws_held = ""
        return out

    def parse(self, text: str) -> ToolParseResult:
        """Parse a complete text (this parser must be fresh)."""
        a, b = self.feed(text), self.finish()
        return ToolParseResult(a.content + b.content or None, list(self.calls))

    def _run(self, text: str, out: ToolParseDelta, final: bool) -> None:
        while True:
            if self._body is not None:
                text = self._run_body(text, out, final)
                if self._body is not None:
                    return  # waiting for more of the call
                continue
            self._buf += text
            text = ""
            at = self._buf.find(self.start_tag)
            if at < 0:
                hold = 0 if final else partial_tag_len(self._buf, self.start_tag)
                self._emit_content(self._buf[: len(self._buf) - hold], out)
                self._buf = self._buf[len(self._buf) - hold :]
                return
            self._emit_content(self._buf[:at], out)
            text = self._buf[at + len(self.start_tag) :]
            self._buf = ""
            self._body = self.new_body()
            self._announced = False

    def _run_body(self, text: str, out: ToolParseDelta, final: bool) -> str:
        """Feed the open call; returns the text left for content scanning."""
        assert self._body is not None
        step = self._body.feed(text, final)
        if step.status == "rejected":
            # Not a call after all: the tag is content, and the text after it is rescanned.
            self._body = None
            self._emit_content(self.start_tag, out)
            return step.rest
        if step.name is not None:
            self._announced = True
            self.calls.append(ToolCall(new_call_id(), step.name, ""))
            self._ws_held = ""
            out.calls.append(ToolCallDelta(len(self.calls) - 1, self.calls[-1].id, step.name))
        if step.arguments:
            call = self.calls[-1]
            call.arguments += step.arguments
            if out.calls and out.calls[-1].index == len(self.calls) - 1:
                out.calls[-1].arguments += step.arguments
            else:
                out.calls.append(ToolCallDelta(len(self.calls) - 1, arguments=step.arguments))
        if step.status == "done":
            self._body = None
            self._after_call = True
            self._ws_held = ""
            return step.rest
        if final:  # the output ended inside an announced call (bodies reject otherwise)
            self._body = None
            if step.name is not None or self._announced:
                self.calls[-1].complete = False
                self._after_call = True
        return ""

    def _emit_content(self, text: str, out: ToolParseDelta) -> None:
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        text = self._ws_held + text
        kept = text.rstrip()
        self._ws_held = text[len(kept) :]
        out.content += kept
