"""POST /v1/chat/completions: validate, route (model `auto`) or pass through (a named model),
apply the decision's plugins, forward with failover, record.

Routing overhead (`x-vsr-routing-ms`, the routing-latency histogram) is everything the router
does before the first upstream call: signals, decision, cache lookup (an embedding), plugins,
selection. `x-vsr-signals-ms` is the signals + decision part alone.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.client_disconnect import unless_disconnected
from strixlm.router.api_errors import APIError, json_body, require_object
from strixlm.router.config import AUTO, ModelRef
from strixlm.router.config_plugins import LatencySelection
from strixlm.router.decisions import apply_reasoning, reasoning_fields
from strixlm.router.plugins.fast_response import fast_response
from strixlm.router.plugins.header_mutation import mutate_headers
from strixlm.router.plugins.openai_objects import chat_completion, chat_completion_chunks
from strixlm.router.plugins.replay import ReplayRecord
from strixlm.router.plugins.semantic_cache import CachedAnswer, SemanticCache, cache_scope
from strixlm.router.plugins.system_prompt import apply_system_prompt
from strixlm.router.proxy import ProxyCall, UpstreamResult, forwardable_headers
from strixlm.router.selection import Candidate
from strixlm.router.server_routing import Classification, request_text
from strixlm.router.server_state import RouterRuntime, RouterState

logger = logging.getLogger(__name__)


def parse_chat_request(data: Any) -> dict[str, Any]:
    body = require_object(data)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("'messages' must be a non-empty list of messages", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(f"messages[{i}] must be an object with a 'role'", param="messages")
    model = body.get("model", AUTO)
    if not isinstance(model, str) or not model:
        raise APIError("'model' must be a non-empty string", param="model")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise APIError("'stream' must be a boolean", param="stream")
    return body


def header_value(v: Any) -> str:
    """An HTTP-safe header value (non-ASCII percent-encoded)."""
    return quote(str(v), safe=" !#$%&'()*+,-./:;<=>?@[]^_`{|}~")


@dataclass
class ChatRequest:
    """One request on its way through the router."""

    runtime: RouterRuntime
    state: RouterState
    body: dict[str, Any]
    client_headers: dict[str, str]
    t0: float = field(default_factory=time.perf_counter)
    request_id: str = field(default_factory=lambda: f"vsr-{secrets.token_hex(8)}")
    cls: Classification | None = None
    headers: dict[str, str] = field(default_factory=dict)
    routing_ms: float = 0.0

    @property
    def model(self) -> str:
        return self.body.get("model", AUTO)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def decision(self) -> str | None:
        return self.cls.decision if self.cls is not None else None

    @property
    def include_usage(self) -> bool:
        opts = self.body.get("stream_options")
        return isinstance(opts, dict) and bool(opts.get("include_usage"))

    def mark_routed(self) -> None:
        self.routing_ms = (time.perf_counter() - self.t0) * 1000.0
        self.runtime.metrics.routing_latency.observe(self.routing_ms / 1000.0)
        self.headers["x-vsr-routing-ms"] = f"{self.routing_ms:.3f}"

    def record(self, **fields: Any) -> None:
        """Replay record (off the event loop) and request metrics."""
        status = fields.get("status")
        model = fields.get("model") or "none"
        self.runtime.metrics.requests.labels(self.decision or "none", model, str(status)).inc()
        plugins = self.state.plugins.replay(self.decision)
        if not plugins:
            return
        rec = ReplayRecord(
            request_id=self.request_id,
            requested_model=self.model,
            decision=self.decision,
            decision_confidence=self.cls.match.confidence if self.cls and self.cls.match else None,
            stream=self.stream,
            signals=self.cls.signals_json() if self.cls is not None else {},
            routing_ms=round(self.routing_ms, 3),
            total_ms=round((time.perf_counter() - self.t0) * 1000.0, 3),
            request_body=self.body,
            **fields,
        )
        for p in plugins:
            path = self.state.resolve(p.path)
            store = self.runtime.replay_store(path, p.max_records, p.store_bodies)
            fut = asyncio.get_running_loop().run_in_executor(None, store.record, rec)
            fut.add_done_callback(_log_failure)


def _log_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.error("replay record failed: %s", fut.exception())


async def handle_chat(runtime: RouterRuntime, raw: Request) -> Response:
    body = parse_chat_request(await json_body(raw))
    req = ChatRequest(runtime, runtime.state, body, dict(raw.headers))
    req.headers["x-vsr-request-id"] = req.request_id
    work = route_auto(req) if req.model == AUTO else pass_through(req)
    resp = await unless_client_leaves(raw, req, work)
    resp.headers.update(req.headers)
    return resp


async def unless_client_leaves(
    raw: Request, req: ChatRequest, work: Coroutine[Any, Any, Response]
) -> Response:
    """work's response, or, if the client disconnects first, work cancelled: that closes the
    upstream connection, so the backend aborts the request instead of generating for nobody.
    A stream, once it has begun, is Starlette's to stop: it ends the body iterator, which
    closes the upstream response."""
    resp = await unless_disconnected(raw, work)
    if resp is None:
        logger.info("%s: client disconnected, upstream request cancelled", req.request_id)
        req.record(status=499, error="client disconnected")
        return Response(status_code=499)  # nobody is there to read it
    return resp


async def pass_through(req: ChatRequest) -> Response:
    pool = req.state.pool
    endpoints = pool.serving(req.model)
    if not endpoints and req.runtime.http is not None:
        await pool.discover(req.runtime.http)  # a backend may have come up since
        endpoints = pool.serving(req.model)
    if not endpoints:
        served = sorted({m for m, _ in pool.models()} | {AUTO})
        raise APIError(
            f"The model `{req.model}` does not exist (served: {', '.join(served)})",
            status=404,
            type="not_found_error",
            param="model",
            code="model_not_found",
        )
    ref = ModelRef(model=req.model)
    ranked = req.state.selector(None).rank([Candidate(ref, e) for e in endpoints], None)
    req.mark_routed()
    return await forward(req, ranked, req.body, reasoning=False)


async def route_auto(req: ChatRequest) -> Response:
    rt, state = req.runtime, req.state
    messages = req.body["messages"]
    text, history = request_text(messages)
    req.cls = cls = await asyncio.to_thread(state.core.classify, text, history, messages)
    for name, ms in cls.shared_ms.items():  # work shared by the signals: _tokenize, _embed
        rt.metrics.signal_latency.labels(f"_{name}").observe(ms / 1000.0)
    for name, r in cls.signals.items():
        rt.metrics.signal_latency.labels(name).observe(r.latency_ms / 1000.0)
        if r.matched:
            req.headers[f"x-vsr-matched-{name.lower()}"] = header_value(r.value or "true")
    decision = cls.decision
    rt.metrics.decisions.labels(decision or "none").inc()
    req.headers["x-vsr-signals-ms"] = f"{cls.elapsed_ms:.3f}"  # signals + decision alone
    if decision is not None:
        req.headers["x-vsr-selected-decision"] = decision
        req.headers["x-vsr-decision-confidence"] = f"{cls.match.confidence:.4f}"
    req.headers["x-vsr-cache-hit"] = "false"

    blocker = state.plugins.fast_response(decision) if decision is not None else None
    if blocker is not None:
        req.mark_routed()
        rt.metrics.fast_responses.labels(decision).inc()
        req.headers["x-vsr-fast-response"] = "true"
        req.record(status=blocker.status_code, fast_response=True, response_body=blocker.message)
        return fast_response(blocker, req.model, req.stream, req.include_usage)

    cache = state.plugins.semantic_cache(decision) if cacheable(req.body) else None
    cache_key = None
    if cache is not None:
        hit, cache_key = await cache_lookup(req, cache)
        if hit is not None:
            return hit

    for plugin in state.plugins.system_prompts(decision):
        messages = apply_system_prompt(messages, plugin)
    refs = cls.match.decision.models if cls.match is not None else [ModelRef()]
    candidates = state.pool.candidates(refs)
    if not candidates and state.pool.missing_models() and rt.http is not None:
        await state.pool.discover(rt.http)
        candidates = state.pool.candidates(refs)
    ranked = state.selector(decision).rank(candidates, decision)
    req.mark_routed()
    body = {**req.body, "messages": messages}
    return await forward(req, ranked, body, reasoning=True, cache=cache, cache_key=cache_key)


def cacheable(body: dict[str, Any]) -> bool:
    return body.get("n", 1) in (1, None) and not body.get("tools")


async def cache_lookup(
    req: ChatRequest, cache: SemanticCache
) -> tuple[Response | None, tuple | None]:
    rt = req.runtime
    scope = cache_scope(req.decision, req.body["messages"])
    # The answer's length budget is part of the question.
    scope += f"|{req.body.get('max_tokens')}|{req.body.get('max_completion_tokens')}"
    # The request embedding: already computed when an embedding signal ran, else now.
    emb = await asyncio.to_thread(lambda: req.cls.ctx.embedding)
    hit = cache.lookup(emb, scope)
    if hit is None:
        rt.metrics.cache_misses.inc()
        return None, (emb, scope)
    rt.metrics.cache_hits.inc()
    req.mark_routed()
    ans = hit.answer
    req.headers.update(
        {
            "x-vsr-cache-hit": "true",
            "x-vsr-cache-similarity": f"{hit.similarity:.4f}",
            "x-vsr-selected-model": header_value(ans.model),
        }
    )
    req.record(status=200, cache_hit=True, model=ans.model, response_body=ans.content)
    kw = dict(
        finish_reason=ans.finish_reason, usage=ans.usage, reasoning_content=ans.reasoning_content
    )
    if req.stream:
        chunks = chat_completion_chunks(
            ans.content, ans.model, include_usage=req.include_usage, **kw
        )
        return StreamingResponse(chunks, media_type="text/event-stream"), None
    return JSONResponse(chat_completion(ans.content, ans.model, **kw)), None


def cached_answer(result: UpstreamResult) -> CachedAnswer | None:
    """The answer to store, if the upstream answer is a plain single-choice completion."""
    if result.status != 200 or result.error or result.endpoint is None:
        return None
    model = result.endpoint.model
    if result.stream is not None:
        acc = result.stream
        if acc.error or acc.tool_calls or acc.choices != {0} or acc.finish_reason is None:
            return None
        reasoning = "".join(acc.reasoning) or None
        return CachedAnswer(acc.text, model, acc.finish_reason, reasoning, acc.usage)
    body = result.body
    if not isinstance(body, dict) or len(body.get("choices") or []) != 1:
        return None
    choice = body["choices"][0]
    msg = choice.get("message") or {}
    if not isinstance(msg.get("content"), str) or msg.get("tool_calls"):
        return None
    return CachedAnswer(
        msg["content"],
        model,
        choice.get("finish_reason") or "stop",
        msg.get("reasoning_content"),
        body.get("usage"),
    )


async def forward(
    req: ChatRequest,
    ranked: list[Candidate],
    body: dict[str, Any],
    *,
    reasoning: bool,
    cache: SemanticCache | None = None,
    cache_key: tuple | None = None,
) -> Response:
    rt, state = req.runtime, req.state
    base_headers = forwardable_headers(req.client_headers)
    for plugin in state.plugins.header_mutations(req.decision):
        base_headers = mutate_headers(base_headers, plugin)
    sel = state.selection(req.decision)
    alpha = sel.ewma_alpha if isinstance(sel, LatencySelection) else 0.3

    def make_body(c: Candidate) -> dict[str, Any]:
        out = {**body, "model": c.endpoint.model}
        return apply_reasoning(out, reasoning_fields(c.endpoint.model, c.ref)) if reasoning else out

    def make_headers(c: Candidate) -> dict[str, str]:
        key = state.pool.api_key(c.endpoint.backend)
        return {**base_headers, "authorization": f"Bearer {key}"} if key else dict(base_headers)

    def response_headers(ep) -> dict[str, str]:
        return {
            "x-vsr-selected-model": header_value(ep.model),
            "x-vsr-selected-backend": ep.backend,
        }

    def on_done(result: UpstreamResult) -> None:
        ep = result.endpoint
        if ep is not None and result.error is None and result.status < 400:
            rt.stats.observe_latency(ep.key, result.ttft_s or 0.0, result.total_s or 0.0, alpha)
            answer = cached_answer(result) if cache is not None and cache_key else None
            if answer is not None:
                cache.store(cache_key[0], cache_key[1], answer)
        response = result.stream.summary() if result.stream is not None else result.body
        req.record(
            status=result.status,
            model=ep.model if ep else None,
            backend=ep.backend if ep else None,
            ttft_ms=_ms(result.ttft_s),
            upstream_ms=_ms(result.total_s),
            attempts=result.attempts,
            error=result.error,
            response_body=response,
        )

    call = ProxyCall(
        http=rt.http,
        stats=rt.stats,
        metrics=rt.metrics,
        candidates=ranked,
        make_body=make_body,
        make_headers=make_headers,
        timeout_s=lambda ep: state.pool.backends[ep.backend].config.timeout_s,
        stream=req.stream,
        response_headers=response_headers,
        on_done=on_done,
        no_candidates=no_candidates_reason(req),
    )
    return await call.run()


def no_candidates_reason(req: ChatRequest) -> str:
    cls = req.cls
    wanted = ", ".join(
        (r.model if r.backend is None else f"{r.model}@{r.backend}")
        for r in (cls.match.decision.models if cls is not None and cls.match else [])
    )
    what = f"decision {req.decision!r} wants {wanted}" if wanted else "no decision matched"
    errors = [f"{b['name']}: {b['error']}" for b in req.state.pool.status() if b["error"]]
    msg = f"no backend serves a model for this request ({what})"
    return msg + (f"; {'; '.join(errors)}" if errors else "")


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000.0, 3)
