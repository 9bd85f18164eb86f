"""What the chat and completion handlers share: request parsing, OpenAI error objects,
sampling parameters, starting engine streams, SSE framing and client-disconnect handling."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from strixlm.engine import stream_trace
from strixlm.engine.client import AsyncEngineClient, EngineDeadError
from strixlm.engine.request import RequestOutput, SamplingParams
from strixlm.entrypoints.openai.metrics import ServerMetrics
from strixlm.entrypoints.openai.protocol import ErrorInfo, ErrorResponse, SamplingRequest
from strixlm.models.default_model import DEFAULT_MODEL_ALIASES, DEFAULT_MODEL_NAME

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class APIError(Exception):
    """Rendered as an OpenAI error object with this HTTP status."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.info = ErrorInfo(message=message, type=type, param=param, code=code)

    def response(self) -> JSONResponse:
        return JSONResponse(ErrorResponse(error=self.info).model_dump(), status_code=self.status)


def server_error(message: str) -> APIError:
    return APIError(message, status=500, type="server_error")


def bad_value(e: ValueError, fields: dict) -> APIError:
    """A ValueError from SamplingParams or the input processor, as a 400 naming the field."""
    msg = str(e)
    first = msg.split(" ", 1)[0]
    return APIError(msg, param=first if first in fields else None)


def token_biases(logit_bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's logit_bias (JSON keys are strings: token ids written out) by token id."""
    out = {}
    for key, bias in (logit_bias or {}).items():
        try:
            out[int(key)] = bias
        except ValueError:
            raise APIError(
                f"logit_bias keys must be token ids, got {key!r}", param="logit_bias"
            ) from None
    return out or None


async def parse_body(raw: Request, model: type[M]) -> M:
    body = await raw.body()
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(f"We could not parse the JSON body of your request: {e}") from None
    return validate(data, model)


def validate(data, model: type[M]) -> M:
    """data as the request model, or a 400 naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        param = str(err["loc"][0]) if err["loc"] else None  # the top-level field
        raise APIError(f"{loc}: {err['msg']}" if loc else err["msg"], param=param) from None


def sse(obj: BaseModel | dict, exclude: set[str] | None = None) -> str:
    text = obj.model_dump_json(exclude=exclude) if isinstance(obj, BaseModel) else json.dumps(obj)
    return f"data: {text}\n\n"


_MARK = "\u0000strixlm-text\u0000"
_dumps = json.JSONEncoder(ensure_ascii=False).encode


class TextChunks:
    """SSE events that differ only in one text field, rendered without a model per chunk.

    `render(key, text)` calls `template(key, marker)` once per key for a complete event with
    a marker text, splits it around the JSON string of the marker, and afterwards only
    JSON-encodes the text between the cached prefix and suffix: byte for byte what the model
    would have produced, as a JSON string of the text is the same from either encoder.
    """

    def __init__(self, template) -> None:
        self.template = template
        self.parts: dict = {}

    def render(self, key, text: str) -> str:
        parts = self.parts.get(key)
        if parts is None:
            event = self.template(key, _MARK)
            quoted = json.dumps(_MARK)
            if event.count(quoted) != 1:
                return self.template(key, text)  # not a simple template: no fast path
            parts = self.parts[key] = tuple(event.split(quoted))
        return f"{parts[0]}{_dumps(text)}{parts[1]}"


class OutputStream:
    """An engine generator whose request was validated and queued before it is returned."""

    def __init__(self, gen: AsyncIterator[RequestOutput], first: asyncio.Task) -> None:
        self.gen = gen
        self.first = first

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        yield await self.first
        async for ro in self.gen:
            yield ro

    async def close(self) -> None:
        # Closing the engine generator aborts its request if it is still running.
        if not self.first.done():
            self.first.cancel()
            await asyncio.gather(self.first, return_exceptions=True)
        await self.gen.aclose()


class ServingBase:
    def __init__(self, client: AsyncEngineClient, metrics: ServerMetrics | None = None) -> None:
        self.client = client
        self.metrics = metrics
        self.model_names = {client.info.name}
        if client.config.model.model:
            self.model_names.add(client.config.model.model)
        if client.info.name == DEFAULT_MODEL_NAME and not client.config.model.served_model_name:
            # The embedded default model answers to its Hugging Face id too.
            self.model_names |= DEFAULT_MODEL_ALIASES

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in self.model_names:
            raise APIError(
                f"The model `{name}` does not exist.",
                status=404,
                param="model",
                code="model_not_found",
            )

    def check_common(self, req: SamplingRequest) -> None:
        self.check_model(req.model)
        if self.client.dead:
            raise server_error(self.client.dead)

    def sampling_params(
        self,
        req: SamplingRequest,
        max_tokens: int | None,
        logprobs: int | None,
        prompt_logprobs: int | None = None,
    ) -> SamplingParams:
        def pick(value, default):
            return default if value is None else value

        try:
            return SamplingParams(
                n=req.n,
                temperature=pick(req.temperature, 1.0),
                top_p=pick(req.top_p, 1.0),
                top_k=pick(req.top_k, 0),
                min_p=pick(req.min_p, 0.0),
                seed=req.seed,
                presence_penalty=pick(req.presence_penalty, 0.0),
                frequency_penalty=pick(req.frequency_penalty, 0.0),
                repetition_penalty=pick(req.repetition_penalty, 1.0),
                stop=pick(req.stop, []),
                stop_token_ids=pick(req.stop_token_ids, []),
                max_tokens=max_tokens,
                min_tokens=req.min_tokens,
                ignore_eos=req.ignore_eos,
                logprobs=logprobs,
                prompt_logprobs=prompt_logprobs,
                include_stop_str_in_output=req.include_stop_str_in_output,
                skip_special_tokens=req.skip_special_tokens,
                logit_bias=token_biases(req.logit_bias),
            )
        except ValueError as e:
            raise bad_value(e, type(req).model_fields) from None

    async def start(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        request_id: str,
        prompt: str | None,
        fields: dict,
    ) -> OutputStream:
        """Queue one request; a bad prompt raises here, before any response has started."""
        if self.metrics is not None:
            self.metrics.on_arrival(request_id)
        if stream_trace.TRACE is not None:
            stream_trace.TRACE.arrival(request_id)
        gen = self.client.generate(prompt_ids, params, request_id, prompt)
        first = asyncio.ensure_future(anext(gen))
        # One loop turn runs generate() up to its first await, i.e. through the validation
        # in make_requests and the hand-off to the engine.
        await asyncio.sleep(0)
        if first.done() and first.exception() is not None:
            self.done(request_id, 0)
            e = first.exception()
            if isinstance(e, EngineDeadError):
                raise server_error(str(e))
            if isinstance(e, ValueError):
                raise bad_value(e, fields)
            raise e
        return OutputStream(gen, first)

    def done(self, request_id: str, num_unfinished: int) -> None:
        if self.metrics is not None:
            self.metrics.on_done(request_id, num_unfinished)
        if stream_trace.TRACE is not None:
            stream_trace.TRACE.handler_done(request_id)


def traced_body(rid: str, body: AsyncIterator[str]) -> AsyncIterator[str]:
    """A streamed response's body, timed per chunk when STRIXLM_STREAM_TRACE is set."""
    trace = stream_trace.TRACE
    return body if trace is None else trace.body(rid, body)


def stream_error_event(e: Exception) -> str:
    """An error in the middle of an SSE stream: sent as a data event, as vLLM does."""
    if isinstance(e, APIError):
        info = e.info
    elif isinstance(e, EngineDeadError):
        info = ErrorInfo(message=str(e), type="server_error")
    else:
        logger.exception("error while streaming")
        info = ErrorInfo(message=f"internal error: {e}", type="server_error")
    return sse(ErrorResponse(error=info))


def merge_streams(streams: list[OutputStream]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Interleave several prompts' outputs as (prompt index, output), as they arrive."""

    async def gen() -> AsyncIterator[tuple[int, RequestOutput]]:
        q: asyncio.Queue = asyncio.Queue()
        done = object()

        async def pump(i: int, s: OutputStream) -> None:
            try:
                async for ro in s:
                    await q.put((i, ro))
            except Exception as e:  # re-raised by the consumer below
                await q.put(e)
            finally:
                await q.put(done)

        tasks = []
        try:
            if len(streams) == 1:  # the common case, without the extra task hop
                async for ro in streams[0]:
                    yield 0, ro
                return
            tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
            remaining = len(tasks)
            while remaining:
                item = await q.get()
                if item is done:
                    remaining -= 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for s in streams:
                await s.close()

    return gen()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte <-> printable character table used by byte-level BPE vocabularies."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class TokenStrings:
    """Token id -> (text, bytes) for logprobs, cached. Byte-level BPE tokens map back to
    their exact bytes, so a token holding half a UTF-8 character still has its bytes."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.cache: dict[int, tuple[str, list[int]]] = {}
        self.byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}

    def get(self, token_id: int) -> tuple[str, list[int]]:
        hit = self.cache.get(token_id)
        if hit is not None:
            return hit
        if self.tok is None:
            text, raw = f"token_id:{token_id}", None
        else:
            text = self.tok.decode([token_id])
            piece = self.tok.convert_ids_to_tokens(token_id)
            raw = None
            if isinstance(piece, str) and piece and all(c in self.byte_decoder for c in piece):
                raw = [self.byte_decoder[c] for c in piece]
                if bytes(raw).decode("utf-8", "replace") != text:
                    raw = None  # not a byte-level token after all (or a special token)
        if raw is None:
            raw = list(text.encode("utf-8"))
        self.cache[token_id] = (text, raw)
        return text, raw
