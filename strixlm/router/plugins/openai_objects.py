"""OpenAI response objects the router writes itself (fast responses, cache hits, errors)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any


def completion_id(prefix: str = "chatcmpl-vsr") -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    if usage:
        return usage
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def chat_completion(
    content: str,
    model: str,
    *,
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
    reasoning_content: str | None = None,
    id: str | None = None,
) -> dict[str, Any]:
    """A `chat.completion` object with one assistant choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning_content:
        message["reasoning_content"] = reasoning_content
    return {
        "id": id or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": _usage(usage),
    }


def sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def chat_completion_chunks(
    content: str,
    model: str,
    *,
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
    include_usage: bool = False,
    reasoning_content: str | None = None,
) -> Iterator[bytes]:
    """The same answer as `chat.completion.chunk` SSE events, ending with `data: [DONE]`."""
    base = {"id": completion_id(), "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {**base, "choices": [choice]}

    yield sse(chunk({"role": "assistant", "content": ""}, None))
    if reasoning_content:
        yield sse(chunk({"reasoning_content": reasoning_content}, None))
    if content:
        yield sse(chunk({"content": content}, None))
    yield sse(chunk({}, finish_reason))
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(usage)})
    yield sse("[DONE]")


def error_object(
    message: str, type: str = "invalid_request_error", code: str | None = None, param=None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
