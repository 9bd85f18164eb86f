"""Nemotron 3 (Nano / Super): the template ends the prompt with `<think>\\n` when thinking
is on and with an empty `<think></think>` when `chat_template_kwargs` turns it off
(`enable_thinking: false`). Without a tag in the prompt's tail it behaves like
DeepSeek-R1, unless thinking was turned off, when the whole output is content."""

from __future__ import annotations

from strixlm.parsers.reasoning.base import ReasoningParser


class NemotronV3ReasoningParser(ReasoningParser):
    name = "nemotron_v3"
    # The base default (reasoning unless enable_thinking is false) is this family's rule.
