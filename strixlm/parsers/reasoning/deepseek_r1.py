"""DeepSeek-R1: its chat template ends the prompt with `<think>\\n`, so the output usually
starts inside the reasoning without the tag; everything until `</think>` is reasoning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strixlm.parsers.reasoning.base import ReasoningParser


class DeepSeekR1ReasoningParser(ReasoningParser):
    name = "deepseek_r1"

    @classmethod
    def default_starts_in_reasoning(cls, chat_template_kwargs: Mapping[str, Any]) -> bool:
        # R1 always thinks; older templates leave `<think>` to the model, which the
        # opening check strips, and output without any tag is still reasoning.
        return True
