"""Reasoning and tool-call parsing for /v1/chat/completions: the server's options, each
request's tool plan (validated `tools` / `tool_choice`), and the per-choice pipeline that
turns generated text into reasoning, content and tool calls.

`tool_choice` without guided decoding: strixlm cannot force the model to call a tool. For
"auto", "required" and a named function it renders the tools into the prompt (for a named
function only that one), parses what the model writes, and returns the calls it really
made. A model that does not comply finishes normally (its text is content, finish_reason
"stop" or "length"); no call is ever made up. "none" renders the tools too (as vLLM does)
but does not parse: whatever the model writes is content.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from strixlm.entrypoints.openai.protocol import ChatCompletionRequest, NamedToolChoice
from strixlm.entrypoints.openai.serving import APIError
from strixlm.parsers.reasoning import REASONING_PARSERS, ReasoningParser, get_reasoning_parser
from strixlm.parsers.tools import (
    TOOL_PARSERS,
    ToolCall,
    ToolCallDelta,
    ToolParser,
    ToolSet,
    get_tool_parser,
)

logger = logging.getLogger(__name__)


@dataclass
class ChatParsingOptions:
    """`--reasoning-parser`, `--tool-call-parser`, `--enable-auto-tool-choice`."""

    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False

    def __post_init__(self) -> None:
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"--reasoning-parser: unknown parser {self.reasoning_parser!r}; "
                f"choose one of {', '.join(sorted(REASONING_PARSERS))}"
            )
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_PARSERS:
            raise ValueError(
                f"--tool-call-parser: unknown parser {self.tool_call_parser!r}; "
                f"choose one of {', '.join(sorted(TOOL_PARSERS))}"
            )
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")

    @property
    def tools_enabled(self) -> bool:
        return self.enable_auto_tool_choice and self.tool_call_parser is not None

    @property
    def tags(self) -> list[str]:
        """Markup the parsers must see in the text (kept even if the tokenizer calls it a
        special token)."""
        tags: list[str] = []
        if self.reasoning_parser:
            cls = get_reasoning_parser(self.reasoning_parser)
            tags += [cls.start_tag, cls.end_tag]
        if self.tool_call_parser:
            tags.append(get_tool_parser(self.tool_call_parser).start_tag)
            tags.append("</tool_call>")
        return tags


@dataclass
class ToolPlan:
    """What one request does with tools."""

    template_tools: list[dict[str, Any]] | None = None  # what the chat template renders
    toolset: ToolSet = field(default_factory=ToolSet)
    parse: bool = False  # run the tool-call parser over the output
    choice: str = "none"  # none | auto | required | function


def _choice_name(choice: Any) -> str:
    return "function" if isinstance(choice, NamedToolChoice) else str(choice)


def plan_tools(req: ChatCompletionRequest, options: ChatParsingOptions) -> ToolPlan:
    """Validate `tools` and `tool_choice` (a 400 names the field) and decide what to do."""
    try:
        toolset = ToolSet.from_openai(req.tools)
    except ValueError as e:
        raise APIError(str(e), param="tools") from None
    choice = req.tool_choice
    if choice is None:
        choice = "auto" if len(toolset) else "none"
    kind = _choice_name(choice)
    if not len(toolset):
        if kind in ("required", "function"):
            raise APIError(
                f"tool_choice {kind!r} needs a non-empty `tools` list", param="tool_choice"
            )
        return ToolPlan(choice="none")
    if kind == "none":
        return ToolPlan(template_tools=req.tools, toolset=toolset, choice="none")
    template_tools = req.tools
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in toolset:
            raise APIError(
                f"tool_choice names function {name!r}, which is not in `tools`",
                param="tool_choice",
            )
        # No guided decoding: offer the model only the function it must call.
        template_tools = [t for t in req.tools or [] if t["function"]["name"] == name]
    if not options.tools_enabled:
        raise APIError(
            f'tool_choice "{kind}" needs tool-call parsing: start the server with '
            "--enable-auto-tool-choice and --tool-call-parser",
            param="tool_choice",
        )
    return ToolPlan(template_tools=template_tools, toolset=toolset, parse=True, choice=kind)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant tool calls in the history carry `arguments` as JSON text (OpenAI's shape);
    templates iterate them as mappings (Qwen3-Coder's does), so decode them."""
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    args = json.loads(fn["arguments"])
                except ValueError:
                    continue
                if isinstance(args, dict):
                    fn["arguments"] = args
    return messages


@dataclass
class OutputDelta:
    reasoning: str = ""
    content: str = ""
    calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.calls)


class ChoiceOutput:
    """One choice's text through the reasoning parser, then the tool parser over the
    content (calls written inside the reasoning are not calls)."""

    def __init__(
        self,
        reasoning: ReasoningParser | None,
        tools: ToolParser | None,
        include_reasoning: bool = True,
    ) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.include_reasoning = include_reasoning

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.tools.calls if self.tools is not None else []

    def feed(self, text: str) -> OutputDelta:
        return self._step(text, final=False)

    def finish(self) -> OutputDelta:
        return self._step("", final=True)

    def _step(self, text: str, final: bool) -> OutputDelta:
        out = OutputDelta()
        if self.reasoning is not None:
            r = self.reasoning.finish() if final else self.reasoning.feed(text)
            out.reasoning, text = r.reasoning, r.content
        if self.tools is not None:
            t = self.tools.feed(text)
            if final:
                end = self.tools.finish()
                t.content += end.content
                t.calls = merge_call_deltas(t.calls + end.calls)
            out.content, out.calls = t.content, t.calls
        else:
            out.content = text
        if not self.include_reasoning:
            out.reasoning = ""
        return out


def merge_call_deltas(deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
    """Join consecutive argument fragments of the same call into one delta."""
    merged: list[ToolCallDelta] = []
    for d in deltas:
        if merged and merged[-1].index == d.index and d.id is None:
            merged[-1].arguments += d.arguments
        else:
            merged.append(d)
    return merged


def finish_reason(engine_reason: str | None, calls: list[ToolCall]) -> str | None:
    """OpenAI reports "tool_calls" when the model stopped after calling tools."""
    if engine_reason == "stop" and calls:
        return "tool_calls"
    return engine_reason
