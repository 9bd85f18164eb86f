"""The router's HTTP errors: OpenAI error objects (`{"error": {message, type, param, code}}`)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from strixlm.router.plugins.openai_objects import error_object


class APIError(Exception):
    def __init__(
        self,
        message: str,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type, param, code
        self.extra = extra or {}

    def response(self) -> JSONResponse:
        body = error_object(str(self), self.type, self.code, self.param)
        return JSONResponse({**body, **self.extra}, status_code=self.status)


async def json_body(raw: Any) -> Any:
    """The request body parsed as JSON, or a 400 naming the problem."""
    import json

    data = await raw.body()
    if not data:
        raise APIError("request body is empty; send a JSON object")
    try:
        return json.loads(data)
    except ValueError as e:
        raise APIError(f"request body is not valid JSON: {e}") from None


def require_object(data: Any, what: str = "request body") -> dict[str, Any]:
    if not isinstance(data, dict):
        raise APIError(f"{what} must be a JSON object")
    return data
