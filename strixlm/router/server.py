"""`strixlm router serve`: the router's FastAPI app, run by uvicorn.

OpenAI surface: POST /v1/chat/completions (model `auto` is routed, a served model name passes
through), GET /v1/models. Operations: GET /health, GET /metrics (Prometheus), and the JSON
management API under /api/v1 (see `api.py`), and the dashboard at /dashboard
(`server_dashboard.py`).
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from strixlm.router.api import build_api
from strixlm.router.api_errors import APIError
from strixlm.router.config import AUTO
from strixlm.router.server_chat import handle_chat
from strixlm.router.server_dashboard import mount_dashboard
from strixlm.router.server_metrics import CONTENT_TYPE
from strixlm.router.server_state import RouterRuntime

logger = logging.getLogger(__name__)


async def guard(handler: Callable[[], Awaitable[Response]], path: str) -> Response:
    """Every failure becomes an OpenAI error object, never a bare 500 page."""
    try:
        return await handler()
    except APIError as e:
        return e.response()
    except Exception as e:
        logger.exception("unhandled error in %s", path)
        return APIError(f"internal router error: {e}", status=500, type="server_error").response()


def build_app(runtime: RouterRuntime) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await runtime.start()
        yield
        await runtime.close()

    app = FastAPI(title="strixlm router", lifespan=lifespan)
    app.state.runtime = runtime
    started = time.time()

    @app.post("/v1/chat/completions")
    async def chat_completions(raw: Request) -> Response:
        return await guard(lambda: handle_chat(runtime, raw), raw.url.path)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        state = runtime.state
        if state.pool.missing_models() and runtime.http is not None:
            await state.pool.discover(runtime.http)
        created = int(started)
        data = [{"id": AUTO, "object": "model", "created": created, "owned_by": "strixlm-router"}]
        seen = {AUTO}
        for model, backend in state.pool.models():
            if model not in seen:
                seen.add(model)
                data.append(
                    {"id": model, "object": "model", "created": created, "owned_by": backend}
                )
        return JSONResponse({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> JSONResponse:
        state = runtime.state
        return JSONResponse(
            {
                "status": "ok",
                "config_version": state.version,
                "uptime_s": round(time.time() - started, 1),
                "backends": state.pool.status(),
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)

    app.include_router(build_api(runtime))
    mount_dashboard(app, runtime)  # /dashboard and the JSON it reads

    @app.exception_handler(APIError)
    async def on_api_error(_: Request, e: APIError) -> Response:
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, e: RequestValidationError) -> Response:
        return APIError(str(e)).response()

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, e: StarletteHTTPException) -> Response:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return APIError(str(e.detail), status=e.status_code, type=kind).response()

    return app


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(0)


def run_router(
    runtime: RouterRuntime, host: str, port: int, sock: socket.socket | None = None
) -> None:
    """Serves until SIGINT/SIGTERM (build the runtime first: that is where a config whose
    signals cannot be built is refused), on sock if given (already bound to host:port)."""
    import uvicorn

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    app = build_app(runtime)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=logging.getLogger().isEnabledFor(logging.DEBUG),
            timeout_graceful_shutdown=5,
        )
    )
    source = runtime.state.source or "default"
    logger.info("router serving at http://%s:%d/v1 (config: %s)", host, port, source)
    server.run(sockets=[sock] if sock is not None else None)
