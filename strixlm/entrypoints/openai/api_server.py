"""The OpenAI-compatible HTTP server: FastAPI app over an AsyncEngineClient, run by uvicorn.

The engine process is started (model loaded, KV cache allocated) before uvicorn binds the
port, so a server that accepts connections is ready to generate.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import metadata

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from strixlm.config import EngineConfig
from strixlm.engine import gc_freeze
from strixlm.engine.client import AsyncEngineClient, EngineDeadError
from strixlm.entrypoints.openai.chat_parsing import ChatParsingOptions
from strixlm.entrypoints.openai.metrics import CONTENT_TYPE, ServerMetrics
from strixlm.entrypoints.openai.protocol import ModelCard, ModelList
from strixlm.entrypoints.openai.serving import APIError, server_error
from strixlm.entrypoints.openai.serving_chat import ServingChat
from strixlm.entrypoints.openai.serving_completion import ServingCompletion
from strixlm.entrypoints.openai.serving_tokenize import ServingTokenize

logger = logging.getLogger(__name__)


def _version() -> str:
    try:
        return metadata.version("strixlm")
    except metadata.PackageNotFoundError:  # running from a source checkout
        return "0.1.0.dev0"


def _engine_alive(client: AsyncEngineClient) -> bool:
    proc = getattr(client, "proc", None)
    return proc is not None and proc.is_alive() and not client.dead


async def _guard(handler: Callable[[Request], Awaitable[Response]], raw: Request) -> Response:
    """Every failure becomes an OpenAI error object, never a bare 500 page."""
    try:
        return await handler(raw)
    except APIError as e:
        return e.response()
    except EngineDeadError as e:
        return server_error(str(e)).response()
    except Exception as e:
        logger.exception("unhandled error in %s", raw.url.path)
        return server_error(f"internal error: {e}").response()


def build_app(
    client: AsyncEngineClient,
    api_key: str | None = None,
    parsing: ChatParsingOptions | None = None,
) -> FastAPI:
    """The app; its lifespan attaches the (already started) client and shuts it down."""
    metrics = ServerMetrics(client, client.info.name)
    chat = ServingChat(client, metrics, parsing)
    completion = ServingCompletion(client, metrics)
    tokens = ServingTokenize(chat)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await client.attach()
        if gc_freeze.freeze_api_process():
            logger.info("API process: start-up heap frozen (STRIXLM_API_GC_FREEZE=0 to keep it)")
        yield
        client.shutdown()

    app = FastAPI(title="strixlm", version=_version(), lifespan=lifespan)
    app.state.client = client
    app.state.metrics = metrics

    async def check_api_key(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(
                "You didn't provide an API key (Authorization: Bearer <key>).",
                status=401,
                code="invalid_api_key",
            )
        if not secrets.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError("Incorrect API key provided.", status=401, code="invalid_api_key")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(check_api_key)])

    def model_card() -> ModelCard:
        info = client.info
        return ModelCard(id=info.name, root=info.folder, max_model_len=info.max_model_len)

    @v1.get("/models")
    async def list_models() -> JSONResponse:
        return JSONResponse(ModelList(data=[model_card()]).model_dump())

    @v1.get("/models/{model:path}")  # names may hold a slash (HuggingFaceTB/SmolLM2-...)
    async def retrieve_model(model: str) -> Response:
        chat.check_model(model)  # an unknown name: the app's APIError handler answers 404
        return JSONResponse(model_card().model_dump())

    @v1.post("/completions")
    async def completions(raw: Request) -> Response:
        return await _guard(completion.create, raw)

    @v1.post("/chat/completions")
    async def chat_completions(raw: Request) -> Response:
        return await _guard(chat.create, raw)

    app.include_router(v1)

    # vLLM's tokenizer endpoints (outside /v1, as vLLM serves them), behind the same key.
    @app.post("/tokenize", dependencies=[Depends(check_api_key)])
    async def tokenize(raw: Request) -> Response:
        return await _guard(tokens.tokenize, raw)

    @app.post("/detokenize", dependencies=[Depends(check_api_key)])
    async def detokenize(raw: Request) -> Response:
        return await _guard(tokens.detokenize, raw)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if _engine_alive(client) else 503)

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"version": _version()})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

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


def run_server(
    config: EngineConfig,
    args: argparse.Namespace,
    parsing: ChatParsingOptions | None = None,
) -> None:
    """`strixlm serve`: load, start the engine, then serve until SIGINT/SIGTERM."""
    import uvicorn

    from strixlm.cli_args import listen_socket
    from strixlm.engine.model_info import load_model_info
    from strixlm.entrypoints.cli import CLIError

    # uvicorn re-raises SIGTERM after its graceful shutdown; exit normally then, so finally
    # blocks and atexit hooks run (also when SIGTERM comes while the engine is loading).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    interval = getattr(args, "log_stats_interval", 10.0)
    # <= 0 turns the periodic stats line off (the client's loop always runs: make it idle).
    config.log_stats_interval_s = interval if interval > 0 else 1e9
    try:
        sock = listen_socket(args.host, args.port)
    except ValueError as e:
        raise CLIError(str(e)) from None
    try:
        info = load_model_info(config.model)
    except (ValueError, OSError) as e:
        raise CLIError(str(e)) from None
    logger.info("starting engine for %s (max_model_len %d)", info.name, info.max_model_len)
    client = AsyncEngineClient(config, info)
    try:
        client.start()
    except RuntimeError as e:
        raise CLIError(str(e)) from None
    try:
        app = build_app(client, args.api_key, parsing)
        debug = logging.getLogger().isEnabledFor(logging.DEBUG)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_config=None,  # keep strixlm's logging setup
                access_log=debug,
                timeout_graceful_shutdown=5,
            )
        )
        logger.info("serving %s at http://%s:%d/v1", info.name, args.host, args.port)
        # uvicorn handles SIGINT/SIGTERM: graceful stop, then the lifespan shuts the engine.
        server.run(sockets=[sock])
    finally:
        client.shutdown()
        sock.close()
