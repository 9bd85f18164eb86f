"""Qwen3-Coder's XML tool calls (also Nemotron 3's format):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Values are bare text (one framing newline each side is dropped), typed by the tool's JSON
schema. A `</parameter>` ends a value only when the next tag is structural (another
parameter, `</function>`, `</tool_call>`, or the end of the output), so code that contains
the tag itself survives. String values stream as they arrive; typed ones when complete.
"""

from __future__ import annotations

import enum
import json

from strixlm.parsers.text_scan import could_become, held_tail_len
from strixlm.parsers.tools.base import BodyStep, CallBody, ToolParser
from strixlm.parsers.tools.schema import ToolSet, coerce_value, is_plain_string

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"
CALL_CLOSE = "</tool_call>"

# What may follow each tag that can end a value, for the tag to be structural.
_VALUE_ENDS = {
    PARAM_CLOSE: (PARAM_OPEN, FUNCTION_CLOSE, CALL_CLOSE),
    FUNCTION_CLOSE: (CALL_CLOSE,),  # a value whose </parameter> the model forgot
}
_MAX_NAME = 256
_FORBIDDEN_IN_NAME = set("{}<>\"' \t\r\n")


class _State(enum.Enum):
    FUNCTION = "function"  # expecting <function=NAME>
    BETWEEN = "between"  # between parameters
    PARAM_NAME = "param_name"
    VALUE = "value"
    AFTER_FUNCTION = "after_function"  # expecting </tool_call>


def _json_str_body(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


class Qwen3CoderCallBody(CallBody):
    def __init__(self, tools: ToolSet) -> None:
        super().__init__(tools)
        self.raw = ""  # everything fed, returned if this turns out not to be a call
        self.buf = ""
        self.state = _State.FUNCTION
        self.function: str | None = None
        self.num_params = 0
        self.param_schema: dict | None = None
        self.stream_value = False  # a plain string value: sent as it arrives
        self.value_started = False  # the framing newline after <parameter=NAME> was handled
        self.sent = 0  # chars of the value already sent
        self.decided = 0  # value end candidates before this index were literal text

    def feed(self, text: str, final: bool) -> BodyStep:
        self.raw += text
        self.buf += text
        step = BodyStep()
        while step.status == "open" and self._advance(step, final):
            pass
        return step

    def _advance(self, step: BodyStep, final: bool) -> bool:
        if self.state is _State.FUNCTION:
            return self._function_tag(step, final)
        if self.state is _State.BETWEEN:
            return self._between(step, final)
        if self.state is _State.PARAM_NAME:
            return self._param_name(final)
        if self.state is _State.VALUE:
            return self._value(step, final)
        return self._after_function(step, final)

    def _reject(self, step: BodyStep) -> bool:
        step.status, step.rest = "rejected", self.raw
        return False

    def _done(self, step: BodyStep, rest: str) -> bool:
        step.status, step.rest = "done", rest
        return False

    def _function_tag(self, step: BodyStep, final: bool) -> bool:
        s = self.buf.lstrip()
        if not s.startswith(FUNCTION_OPEN):
            if could_become(s, FUNCTION_OPEN) and not final:
                return False
            return self._reject(step)
        rest = s[len(FUNCTION_OPEN) :]
        end = rest.find(">")
        if end < 0:
            if final or len(rest) > _MAX_NAME or "\n" in rest:
                return self._reject(step)
            return False
        name = rest[:end].strip()
        if not name or any(c in _FORBIDDEN_IN_NAME for c in name):
            return self._reject(step)  # e.g. an unrendered template, `<function={{ x }}>`
        self.function = name
        step.name = name
        self.buf = rest[end + 1 :]
        self.state = _State.BETWEEN
        return True

    def _close_arguments(self, step: BodyStep) -> None:
        step.arguments += "}" if self.num_params else "{}"

    def _between(self, step: BodyStep, final: bool) -> bool:
        s = self.buf.lstrip()
        if s.startswith(PARAM_OPEN):
            self.buf = s[len(PARAM_OPEN) :]
            self.state = _State.PARAM_NAME
            return True
        if s.startswith(FUNCTION_CLOSE):
            self._close_arguments(step)
            self.buf = s[len(FUNCTION_CLOSE) :]
            self.state = _State.AFTER_FUNCTION
            return True
        if s.startswith(CALL_CLOSE):  # </function> forgotten
            self._close_arguments(step)
            return self._done(step, s[len(CALL_CLOSE) :])
        if not s or any(could_become(s, t) for t in (PARAM_OPEN, FUNCTION_CLOSE, CALL_CLOSE)):
            if final:
                self._close_arguments(step)
                return self._done(step, "")
            self.buf = s
            return False
        # Stray text between parameters: skip to the next tag.
        nxt = s.find("<", 1)
        self.buf = s[nxt:] if nxt >= 0 else ""
        return nxt >= 0

    def _param_name(self, final: bool) -> bool:
        end = self.buf.find(">")
        if end < 0:
            return False  # at the output's end this call stays incomplete
        name = self.buf[:end].strip()
        self.buf = self.buf[end + 1 :]
        spec = self.tools.get(self.function or "")
        self.param_schema = spec.param_schema(name) if spec else None
        self.stream_value = is_plain_string(self.param_schema)
        self._pending_key = ("{" if self.num_params == 0 else ", ") + json.dumps(
            name, ensure_ascii=False
        )
        self.num_params += 1
        self.state = _State.VALUE
        self.value_started = False
        self.sent = self.decided = 0
        return True

    def _value(self, step: BodyStep, final: bool) -> bool:
        if not self.value_started:
            if not self.buf and not final:
                return False
            step.arguments += self._pending_key + ": " + ('"' if self.stream_value else "")
            if self.buf.startswith("\n"):
                self.buf = self.buf[1:]
            self.value_started = True
        end, tag, wait_at = self._find_value_end(final)
        if tag is not None:
            value = self.buf[:end]
            if value.endswith("\n"):
                value = value[:-1]
            if self.stream_value:
                step.arguments += _json_str_body(value[self.sent :]) + '"'
            else:
                typed = coerce_value(value, self.param_schema)
                step.arguments += json.dumps(typed, ensure_ascii=False)
            self.buf = self.buf[end + len(tag) :]
            if tag == FUNCTION_CLOSE:
                self._close_arguments(step)
                self.state = _State.AFTER_FUNCTION
            else:
                self.state = _State.BETWEEN
            return True
        if self.stream_value:
            limit = len(self.buf) if final else wait_at  # final: the call stays incomplete
            if not final and limit > self.sent and self.buf[limit - 1] == "\n":
                limit -= 1  # may be the framing newline before the closing tag
            if limit > self.sent:
                step.arguments += _json_str_body(self.buf[self.sent : limit])
                self.sent = limit
        return False

    def _find_value_end(self, final: bool) -> tuple[int, str | None, int]:
        """(index, tag, _) of the structural end of the value, or (_, None, wait_at) where
        wait_at is how far the value is surely value text."""
        pos = self.decided
        while True:
            found = [(self.buf.find(t, pos), t) for t in _VALUE_ENDS]
            found = [(i, t) for i, t in found if i >= 0]
            if not found:
                wait_at = len(self.buf) - held_tail_len(self.buf, tuple(_VALUE_ENDS))
                self.decided = max(self.decided, wait_at)
                return 0, None, wait_at
            at, tag = min(found)
            after = self.buf[at + len(tag) :].lstrip()
            followers = _VALUE_ENDS[tag]
            if not after or any(after.startswith(f) for f in followers):
                if after or final:
                    return at, tag, at
                self.decided = at
                return 0, None, at  # the next delta says whether it is structural
            if any(f.startswith(after) for f in followers):
                if final:
                    return at, tag, at
                self.decided = at
                return 0, None, at
            pos = at + 1  # literal text inside the value

    def _after_function(self, step: BodyStep, final: bool) -> bool:
        s = self.buf.lstrip()
        if s.startswith(CALL_CLOSE):
            return self._done(step, s[len(CALL_CLOSE) :])
        if (not s or could_become(s, CALL_CLOSE)) and not final:
            return False
        return self._done(step, "" if could_become(s, CALL_CLOSE) else self.buf)


class Qwen3CoderToolParser(ToolParser):
    name = "qwen3_coder"

    def new_body(self) -> CallBody:
        return Qwen3CoderCallBody(self.tools)
