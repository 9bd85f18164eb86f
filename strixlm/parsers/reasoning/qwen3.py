"""Qwen3: the model opens `<think>` itself (original Qwen3 templates) or the template does
(thinking-2507 / Qwen3.5 style, `<think>\\n` at the prompt's end). With
`enable_thinking=False` the template closes an empty block in the prompt and the model
writes no reasoning, so the output is content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strixlm.parsers.reasoning.base import ReasoningParser


class Qwen3ReasoningParser(ReasoningParser):
    name = "qwen3"

    @classmethod
    def default_starts_in_reasoning(cls, chat_template_kwargs: Mapping[str, Any]) -> bool:
        # No tag at the prompt's end: a thinking Qwen3 writes `<think>` first (caught by the
        # opening check), so untagged output is an answer (e.g. an Instruct-2507 model).
        return False
