"""Reads a chat-completion SSE stream on the side while its bytes pass through unchanged:
collects the answer text, finish reason and usage for the cache and the replay log."""

from __future__ import annotations

import json
from typing import Any


class SSEAccumulator:
    def __init__(self) -> None:
        self._buf = b""
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.events = 0
        self.choices: set[int] = set()
        self.tool_calls = False
        self.error: Any = None

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        self.events += 1
        if "error" in event:
            self.error = event["error"]
        self.model = event.get("model") or self.model
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            self.choices.add(int(choice.get("index", 0)))
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                self.reasoning.append(delta["reasoning_content"])
            if delta.get("tool_calls"):
                self.tool_calls = True
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    @property
    def text(self) -> str:
        return "".join(self.content)

    def summary(self) -> dict[str, Any]:
        return {
            "content": self.text,
            "reasoning_content": "".join(self.reasoning) or None,
            "finish_reason": self.finish_reason,
            "usage": self.usage,
            "events": self.events,
            "error": self.error,
        }
