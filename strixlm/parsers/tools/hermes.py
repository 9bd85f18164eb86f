"""Hermes-style tool calls (Hermes 2/3, Qwen2.5, Qwen3): one JSON object per call,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    </tool_call>

The object is scanned as it arrives; once the name is known the `arguments` value is sent
as the model writes it (its JSON text, unchanged), so the streamed fragments and the
complete-text result agree. `parameters` is accepted for `arguments`; an arguments value
given as a JSON string is unwrapped.
"""

from __future__ import annotations

import enum
import json

from strixlm.parsers.text_scan import could_become
from strixlm.parsers.tools.base import BodyStep, CallBody, ToolParser

CALL_CLOSE = "</tool_call>"
_ARGUMENT_KEYS = ("arguments", "parameters")
_WS = " \t\r\n"


class _State(enum.Enum):
    START = "start"  # expecting "{"
    KEY_OR_END = "key_or_end"
    KEY = "key"
    COLON = "colon"
    VALUE_START = "value_start"
    VALUE = "value"
    AFTER_VALUE = "after_value"
    AFTER_OBJECT = "after_object"  # expecting </tool_call>
    SKIP = "skip"  # malformed after the call was announced: skip to </tool_call>


class HermesCallBody(CallBody):
    def __init__(self, tools) -> None:
        super().__init__(tools)
        self.raw = ""
        self.i = 0  # scan position in raw
        self.state = _State.START
        self.name: str | None = None
        self.key_start = 0
        self.key: str | None = None
        # The value being scanned: where it starts, its kind, nesting and string state.
        self.value_start = 0
        self.kind = ""
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.args_key: str | None = None  # which of _ARGUMENT_KEYS gave the arguments
        self.args_raw: str | None = None  # complete arguments JSON (once scanned)
        self.args_sent = 0  # chars of a streamed arguments object already sent

    def feed(self, text: str, final: bool) -> BodyStep:
        self.raw += text
        step = BodyStep()
        while step.status == "open" and self.i < len(self.raw):
            if self.state is _State.AFTER_OBJECT:
                self._after_object(step)
                break
            self._step(step)
        if step.status == "open":
            self._stream_arguments(step)
            if final:
                self._at_end(step)
        return step

    # ---- outcomes ----------------------------------------------------------------------
    def _fail(self, step: BodyStep) -> None:
        """Malformed JSON: not a call if nothing was announced, else skip to the end tag."""
        if self.name is None:
            step.status, step.rest = "rejected", self.raw
        else:
            self.state = _State.SKIP

    def _at_end(self, step: BodyStep) -> None:
        if self.state is _State.AFTER_OBJECT:
            step.status, step.rest = "done", ""
        elif self.name is None:
            step.status, step.rest = "rejected", self.raw
        # else: an announced call the output ended inside of stays open (incomplete)

    def _announce(self, step: BodyStep) -> None:
        step.name = self.name
        if self.args_raw is not None:  # the arguments came before the name
            step.arguments += self.args_raw
            self.args_sent = len(self.args_raw)

    def _stream_arguments(self, step: BodyStep) -> None:
        """Send the part of an arguments object scanned so far (once the name is known)."""
        if (
            self.state is _State.VALUE
            and self.key == self.args_key
            and self.kind == "container"
            and self.name is not None
        ):
            upto = self.i - self.value_start
            if upto > self.args_sent:
                step.arguments += self.raw[self.value_start + self.args_sent : self.i]
                self.args_sent = upto

    # ---- the scanner -------------------------------------------------------------------
    def _step(self, step: BodyStep) -> None:
        c = self.raw[self.i]
        st = self.state
        if st in (_State.START, _State.KEY_OR_END, _State.COLON, _State.VALUE_START) and c in _WS:
            self.i += 1
        elif st is _State.START:
            if c != "{":
                return self._fail(step)
            self.i += 1
            self.state = _State.KEY_OR_END
        elif st is _State.KEY_OR_END:
            if c == '"':
                self.key_start = self.i
                self.in_string, self.escaped = True, False
                self.i += 1
                self.state = _State.KEY
            elif c == "}":
                self._end_object(step)
            else:
                self._fail(step)
        elif st is _State.KEY:
            self._scan_string_char(c)
            if not self.in_string:
                self.key = json.loads(self.raw[self.key_start : self.i])
                self.state = _State.COLON
        elif st is _State.COLON:
            if c != ":":
                return self._fail(step)
            self.i += 1
            self.state = _State.VALUE_START
        elif st is _State.VALUE_START:
            self._start_value(c)
        elif st is _State.VALUE:
            self._scan_value_char(step, c)
        elif st is _State.AFTER_VALUE:
            if c in _WS:
                self.i += 1
            elif c == ",":
                self.i += 1
                self.state = _State.KEY_OR_END
            elif c == "}":
                self._end_object(step)
            else:
                self._fail(step)
        else:  # SKIP
            at = self.raw.find(CALL_CLOSE, self.i)
            if at < 0:
                self.i = len(self.raw)
                return
            step.status, step.rest = "done", self.raw[at + len(CALL_CLOSE) :]

    def _scan_string_char(self, c: str) -> None:
        """One character inside a string (the opening quote was consumed)."""
        self.i += 1
        if self.escaped:
            self.escaped = False
        elif c == "\\":
            self.escaped = True
        elif c == '"':
            self.in_string = False

    def _start_value(self, c: str) -> None:
        self.value_start = self.i
        self.depth, self.in_string, self.escaped = 0, False, False
        if c in "{[":
            self.kind = "container"
        elif c == '"':
            self.kind = "string"
        else:
            self.kind = "literal"
        if self.key in _ARGUMENT_KEYS and self.args_key is None:
            self.args_key = self.key
            self.args_sent = 0
        self.state = _State.VALUE

    def _scan_value_char(self, step: BodyStep, c: str) -> None:
        if self.kind == "literal":
            if c in _WS or c in ",}":
                return self._end_value(step)  # the terminator is scanned by AFTER_VALUE
            self.i += 1
            return
        if self.in_string:
            self._scan_string_char(c)
            if self.kind == "string" and not self.in_string:
                self._end_value(step)
            return
        self.i += 1
        if c == '"':  # also the opening quote of a string value
            self.in_string, self.escaped = True, False
        elif c in "{[":
            self.depth += 1
        elif c in "}]":
            self.depth -= 1
            if self.depth == 0:
                self._end_value(step)

    def _end_value(self, step: BodyStep) -> None:
        raw = self.raw[self.value_start : self.i]
        self.state = _State.AFTER_VALUE
        if self.key == "name" and self.name is None:
            try:
                name = json.loads(raw)
            except ValueError:
                name = None
            if not isinstance(name, str) or not name.strip():
                return self._fail(step)
            self.name = name
            self._announce(step)
        elif self.key == self.args_key and self.args_raw is None:
            self.args_raw = raw if self.kind == "container" else self._unwrap_arguments(raw)
            if self.name is not None:
                step.arguments += self.args_raw[self.args_sent :]
                self.args_sent = len(self.args_raw)

    @staticmethod
    def _unwrap_arguments(raw: str) -> str:
        try:
            value = json.loads(raw)
        except ValueError:
            return "{}"
        if value is None:
            return "{}"
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    def _end_object(self, step: BodyStep) -> None:
        self.i += 1
        if self.name is None:
            return self._fail(step)
        if self.args_raw is None:
            step.arguments += "{}"
        self.state = _State.AFTER_OBJECT

    def _after_object(self, step: BodyStep) -> None:
        rest = self.raw[self.i :]
        s = rest.lstrip()
        if s.startswith(CALL_CLOSE):
            step.status, step.rest = "done", s[len(CALL_CLOSE) :]
        elif s and not could_become(s, CALL_CLOSE):
            step.status, step.rest = "done", rest
        # else: wait for more; at the output's end `_at_end` closes the call


class HermesToolParser(ToolParser):
    name = "hermes"

    def new_body(self) -> CallBody:
        return HermesCallBody(self.tools)
