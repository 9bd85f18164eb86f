"""Tool-call parsers by name (the values `--tool-call-parser` accepts)."""

from __future__ import annotations

from strixlm.parsers.tools.base import (
    ToolCall,
    ToolCallDelta,
    ToolParseDelta,
    ToolParser,
    ToolParseResult,
)
from strixlm.parsers.tools.hermes import HermesToolParser
from strixlm.parsers.tools.qwen3_coder import Qwen3CoderToolParser
from strixlm.parsers.tools.schema import ToolSet, ToolSpec, coerce_value

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    p.name: p for p in (HermesToolParser, Qwen3CoderToolParser)
}


def get_tool_parser(name: str) -> type[ToolParser]:
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(TOOL_PARSERS))
        raise ValueError(f"unknown tool-call parser {name!r}; choose one of {known}") from None


__all__ = [
    "TOOL_PARSERS",
    "ToolCall",
    "ToolCallDelta",
    "ToolParseDelta",
    "ToolParseResult",
    "ToolParser",
    "ToolSet",
    "ToolSpec",
    "coerce_value",
    "get_tool_parser",
]
