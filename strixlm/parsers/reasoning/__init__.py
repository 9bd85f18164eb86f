"""Reasoning parsers by name (the values `--reasoning-parser` accepts)."""

from __future__ import annotations

from strixlm.parsers.reasoning.base import ReasoningDelta, ReasoningParser, ReasoningResult
from strixlm.parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from strixlm.parsers.reasoning.nemotron_v3 import NemotronV3ReasoningParser
from strixlm.parsers.reasoning.qwen3 import Qwen3ReasoningParser

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    p.name: p for p in (DeepSeekR1ReasoningParser, Qwen3ReasoningParser, NemotronV3ReasoningParser)
}


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; choose one of {known}") from None


__all__ = [
    "REASONING_PARSERS",
    "ReasoningDelta",
    "ReasoningParser",
    "ReasoningResult",
    "get_reasoning_parser",
]
