"""Forwarding a chat request to ranked endpoints, with failover.

An endpoint is skipped (and marked down for a while) when it cannot be reached, times out,
answers 5xx or 429, or breaks before the first byte of its answer reaches the client. Other
4xx answers are the client's problem and pass through. Streams pass through chunk by chunk
as they arrive; the stream is read on the side for the cache and the replay log.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.router.plugins.openai_objects import error_object, sse
from strixlm.router.proxy_sse import SSEAccumulator
from strixlm.router.selection import Candidate, Endpoint, SelectionStats
from strixlm.router.server_metrics import RouterMetrics

logger = logging.getLogger(__name__)

# Request headers never forwarded: hop-by-hop, recomputed, or the router's own credentials.
_DROP_REQUEST = {
    "host", "content-length", "authorization", "connection", "keep-alive", "transfer-encoding",
    "te", "upgrade", "proxy-authorization", "proxy-connection", "accept-encoding", "cookie",
}  # fmt: skip
_PASS_RESPONSE = ("content-type", "x-request-id")
_RETRYABLE = {429}


def forwardable_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_REQUEST}


@dataclass
class UpstreamResult:
    """What happened upstream, handed to the caller once the answer is complete."""

    endpoint: Endpoint | None
    candidate: Candidate | None
    status: int
    attempts: list[dict[str, Any]] = field(default_factory=list)
    ttft_s: float | None = None
    total_s: float | None = None
    body: Any = None  # parsed JSON of a non-streamed answer
    stream: SSEAccumulator | None = None
    error: str | None = None


@dataclass
class ProxyCall:
    http: httpx.AsyncClient
    stats: SelectionStats
    metrics: RouterMetrics
    candidates: list[Candidate]
    make_body: Callable[[Candidate], dict[str, Any]]
    make_headers: Callable[[Candidate], dict[str, str]]
    timeout_s: Callable[[Endpoint], float]
    stream: bool
    # Extra response headers for the endpoint that answered (x-vsr-selected-model, ...).
    response_headers: Callable[[Endpoint], dict[str, str]]
    on_done: Callable[[UpstreamResult], None]
    # Why there is nothing to try, for the 502 when `candidates` is empty.
    no_candidates: str = "no backend serves a model for this request"

    def _failed(self, attempts: list, ep: Endpoint, kind: str, detail: str, t0: float) -> None:
        attempts.append(
            {
                "backend": ep.backend,
                "model": ep.model,
                "error": kind,
                "detail": detail,
                "ms": round((time.perf_counter() - t0) * 1000.0, 3),
            }
        )
        self.stats.mark_failed(ep.key)
        self.metrics.upstream_errors.labels(ep.backend, kind).inc()
        logger.warning("upstream %s failed (%s): %s; trying the next one", ep.key, kind, detail)

    async def run(self) -> Response:
        attempts: list[dict[str, Any]] = []
        for cand in self.candidates:
            ep = cand.endpoint
            t0 = time.perf_counter()
            req = self.http.build_request(
                "POST",
                f"{ep.base_url}/chat/completions",
                content=json.dumps(self.make_body(cand)).encode(),
                headers={
                    **self.make_headers(cand),
                    "content-type": "application/json",
                    "accept-encoding": "identity",
                },
                timeout=httpx.Timeout(self.timeout_s(ep), connect=5.0),
            )
            try:
                resp = await self.http.send(req, stream=True)
            except httpx.TransportError as e:
                self._failed(attempts, ep, _kind(e), _detail(e), t0)
                continue
            if resp.status_code >= 500 or resp.status_code in _RETRYABLE:
                await resp.aclose()
                self._failed(attempts, ep, f"http_{resp.status_code}", resp.reason_phrase, t0)
                continue
            is_sse = resp.headers.get("content-type", "").startswith("text/event-stream")
            if self.stream and resp.status_code < 300 and is_sse:
                out = await self._stream(cand, resp, attempts, t0)
            else:
                out = await self._whole(cand, resp, attempts, t0)
            if out is not None:
                return out
        return self._all_failed(attempts)

    def _headers(self, ep: Endpoint, resp: httpx.Response) -> dict[str, str]:
        passed = {k: resp.headers[k] for k in _PASS_RESPONSE if k in resp.headers}
        return {**passed, **self.response_headers(ep)}

    async def _whole(
        self, cand: Candidate, resp: httpx.Response, attempts: list, t0: float
    ) -> Response | None:
        ep = cand.endpoint
        try:
            data = await resp.aread()
        except httpx.TransportError as e:
            await resp.aclose()
            self._failed(attempts, ep, _kind(e), _detail(e), t0)
            return None
        except BaseException:  # cancelled (the client left): drop the upstream connection
            await resp.aclose()
            raise
        elapsed = time.perf_counter() - t0
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
        self.stats.mark_ok(ep.key)
        self.metrics.upstream_ttft.labels(ep.backend).observe(elapsed)
        self.metrics.upstream_latency.labels(ep.backend).observe(elapsed)
        result = UpstreamResult(ep, cand, resp.status_code, attempts, elapsed, elapsed, parsed)
        self.on_done(result)
        headers = self._headers(ep, resp)
        media = headers.pop("content-type", "application/json")
        return Response(data, status_code=resp.status_code, headers=headers, media_type=media)

    async def _stream(
        self, cand: Candidate, resp: httpx.Response, attempts: list, t0: float
    ) -> Response | None:
        ep = cand.endpoint
        chunks = resp.aiter_bytes()
        try:  # the first bytes decide: a backend that dies now can still be failed over
            first = await anext(chunks, b"")
        except httpx.TransportError as e:
            await resp.aclose()
            self._failed(attempts, ep, _kind(e), _detail(e), t0)
            return None
        ttft = time.perf_counter() - t0
        self.stats.mark_ok(ep.key)
        self.metrics.upstream_ttft.labels(ep.backend).observe(ttft)
        acc = SSEAccumulator()
        result = UpstreamResult(ep, cand, resp.status_code, attempts, ttft, stream=acc)

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    acc.feed(first)
                    yield first
                async for chunk in chunks:
                    acc.feed(chunk)
                    yield chunk
            except httpx.TransportError as e:  # too late to fail over: tell the client
                result.error = f"upstream stream broke: {_detail(e)}"
                self.metrics.upstream_errors.labels(ep.backend, "stream_broken").inc()
                yield sse(error_object(result.error, type="server_error", code="upstream_error"))
            finally:
                await resp.aclose()
                result.total_s = time.perf_counter() - t0
                self.metrics.upstream_latency.labels(ep.backend).observe(result.total_s)
                self.on_done(result)

        headers = self._headers(ep, resp)
        headers.pop("content-type", None)
        return StreamingResponse(
            body(), status_code=resp.status_code, headers=headers, media_type="text/event-stream"
        )

    def _all_failed(self, attempts: list[dict[str, Any]]) -> Response:
        if attempts:
            tried = "; ".join(f"{a['backend']}/{a['model']}: {a['detail']}" for a in attempts)
            msg = f"no backend could answer ({len(attempts)} tried): {tried}"
        else:
            msg = self.no_candidates
        self.on_done(UpstreamResult(None, None, 502, attempts, error=msg))
        return JSONResponse(
            error_object(msg, type="server_error", code="upstream_unavailable"), status_code=502
        )


def _kind(e: httpx.TransportError) -> str:
    if isinstance(e, httpx.ConnectError):
        return "connect"
    if isinstance(e, httpx.TimeoutException):
        return "timeout"
    return "transport"


def _detail(e: Exception) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
