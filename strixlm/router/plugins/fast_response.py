"""Fast response: answer from the router itself, without calling a backend (e.g. a refusal
for a jailbreak attempt). A 2xx status gives a normal chat completion (streamed when asked);
an error status gives an OpenAI error object carrying the message."""

from __future__ import annotations

from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.router.config_plugins import FastResponsePlugin
from strixlm.router.plugins.openai_objects import (
    chat_completion,
    chat_completion_chunks,
    error_object,
)


def fast_response(
    cfg: FastResponsePlugin, model: str, stream: bool, include_usage: bool = False
) -> Response:
    if cfg.status_code >= 400:
        body = error_object(cfg.message, type="invalid_request_error", code="content_blocked")
        return JSONResponse(body, status_code=cfg.status_code)
    if stream:
        chunks = chat_completion_chunks(cfg.message, model, include_usage=include_usage)
        return StreamingResponse(
            chunks, status_code=cfg.status_code, media_type="text/event-stream"
        )
    return JSONResponse(chat_completion(cfg.message, model), status_code=cfg.status_code)
