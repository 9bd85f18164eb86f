"""The router's JSON management API under /api/v1 (what a dashboard builds on).

  POST /api/v1/classify/{intent,pii,security,combined}   body {"text"} or {"messages"}
  POST /api/v1/eval          body {} (shipped routing set) or {"rows": [...], "max_mistakes"}
  GET  /api/v1/config        the running config (secrets redacted), version, source
  POST /api/v1/config        replace it (JSON, or YAML with a yaml content type); ?persist=true
                             also writes it to the file the router was started from
  POST /api/v1/feedback      {"winner", "loser", "decision"?, "tie"?} -> Elo update
  GET  /api/v1/selection     latency EWMAs, failures, Elo ratings, selection per decision
  GET  /api/v1/replay        routed requests, newest first (?limit, offset, decision, model,
                             backend, since, bodies); GET /api/v1/replay/{id} for one
Errors are OpenAI-style error objects; config errors add "problems": one line per problem.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from strixlm.router.api_config import (
    config_error,
    dump_config,
    dump_yaml,
    parse_posted,
    saved_config_response,
)
from strixlm.router.api_errors import APIError, json_body, require_object
from strixlm.router.cli import summarize
from strixlm.router.config import RouterConfigError
from strixlm.router.evaluation import evaluate, load_rows, parse_rows
from strixlm.router.selection import GLOBAL
from strixlm.router.server_routing import Classification, request_text
from strixlm.router.server_state import RouterRuntime, RouterState
from strixlm.router.signals.pii import redact

INTENT_TYPES = ("keyword", "embedding", "domain", "language", "context", "complexity",
                "fact_check", "user_feedback")  # fmt: skip


def _classify_input(data: Any) -> tuple[str, list[str], list[dict] | None]:
    body = require_object(data)
    if isinstance(body.get("text"), str):
        return body["text"], [], None
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) for m in msgs):
        text, history = request_text(msgs)
        return text, history, msgs
    raise APIError("send {'text': '...'} or {'messages': [...]}", param="text")


def _decision_json(cls: Classification) -> dict[str, Any] | None:
    m = cls.match
    if m is None:
        return None
    return {
        "name": m.name,
        "confidence": round(m.confidence, 4),
        "priority": m.decision.priority,
        "fallback": m.fallback,
        "signals": m.signals,
    }


def _pii_json(state: RouterState, cls: Classification) -> dict[str, Any]:
    names = state.core.names_of_type("pii")
    entities = []
    for name in names:
        r = cls.signals[name]
        for span in r.details.get("spans", []):
            entities.append({**span, "text": cls.text[span["start"] : span["end"]], "signal": name})
    matched = any(cls.signals[n].matched for n in names)
    return {
        "has_pii": matched,
        "entities": entities,
        "redacted": redact(cls.text, entities) if entities else cls.text,
        "signals": {n: cls.signals_json()[n] for n in names},
    }


def _security_json(state: RouterState, cls: Classification) -> dict[str, Any]:
    names = state.core.names_of_type("jailbreak")
    return {
        "is_jailbreak": any(cls.signals[n].matched for n in names),
        "confidence": round(max((cls.signals[n].confidence for n in names), default=0.0), 4),
        "signals": {n: cls.signals_json()[n] for n in names},
    }


def _intent_json(state: RouterState, cls: Classification) -> dict[str, Any]:
    names = state.core.names_of_type(*INTENT_TYPES)
    sig = cls.signals_json()
    return {
        "decision": _decision_json(cls),
        "matching_decisions": [
            {"name": m.name, "confidence": round(m.confidence, 4), "priority": m.decision.priority}
            for m in cls.ranked
        ],
        "signals": {n: sig[n] for n in names},
    }


def build_api(runtime: RouterRuntime) -> APIRouter:
    api = APIRouter(prefix="/api/v1")

    async def run_classify(raw: Request) -> tuple[RouterState, Classification]:
        text, history, messages = _classify_input(await json_body(raw))
        state = runtime.state
        cls = await asyncio.to_thread(state.core.classify, text, history, messages)
        return state, cls

    @api.post("/classify/intent")
    async def classify_intent(raw: Request) -> JSONResponse:
        state, cls = await run_classify(raw)
        return JSONResponse({**_intent_json(state, cls), "latency_ms": round(cls.elapsed_ms, 3)})

    @api.post("/classify/pii")
    async def classify_pii(raw: Request) -> JSONResponse:
        state, cls = await run_classify(raw)
        return JSONResponse({**_pii_json(state, cls), "latency_ms": round(cls.elapsed_ms, 3)})

    @api.post("/classify/security")
    async def classify_security(raw: Request) -> JSONResponse:
        state, cls = await run_classify(raw)
        return JSONResponse({**_security_json(state, cls), "latency_ms": round(cls.elapsed_ms, 3)})

    @api.post("/classify/combined")
    async def classify_combined(raw: Request) -> JSONResponse:
        state, cls = await run_classify(raw)
        decision = cls.decision
        refs = cls.match.decision.models if cls.match is not None else []
        ranked = state.selector(decision).rank(state.pool.candidates(refs), decision)
        return JSONResponse(
            {
                **_intent_json(state, cls),
                "signals": cls.signals_json(),
                "pii": _pii_json(state, cls),
                "security": _security_json(state, cls),
                "models": [
                    {"model": c.endpoint.model, "backend": c.endpoint.backend} for c in ranked
                ],
                "latency_ms": round(cls.elapsed_ms, 3),
            }
        )

    @api.post("/eval")
    async def run_eval(raw: Request) -> JSONResponse:
        body = require_object(await json_body(raw)) if await raw.body() else {}
        max_mistakes = body.get("max_mistakes", 50)
        if not isinstance(max_mistakes, int) or max_mistakes < 0:
            raise APIError("'max_mistakes' must be a non-negative integer", param="max_mistakes")
        try:
            rows = parse_rows(body["rows"]) if "rows" in body else load_rows()
        except (ValueError, TypeError) as e:
            raise APIError(str(e), param="rows") from None
        state = runtime.state
        report = await asyncio.to_thread(evaluate, state.core, rows, max_mistakes)
        return JSONResponse({"config_version": state.version, **report.to_json()})

    @api.get("/config")
    async def get_config() -> JSONResponse:
        state = runtime.state
        return JSONResponse(
            {
                "version": state.version,
                "source": state.source,
                "loaded_at": state.loaded_at,
                "summary": summarize(state.cfg),
                "config": dump_config(state.cfg),
            }
        )

    @api.post("/config")
    async def post_config(raw: Request) -> JSONResponse:
        persist = raw.query_params.get("persist", "false").lower() in ("1", "true", "yes")
        current = runtime.state
        try:
            cfg = parse_posted(await raw.body(), raw.headers.get("content-type", ""), current.cfg)
            state = await runtime.reload(cfg, current.source)
        except RouterConfigError as e:
            raise config_error(e) from None
        written = None
        if persist:
            if state.source is None:
                raise APIError("persist=true needs a router started with --config FILE")
            Path(state.source).write_text(dump_yaml(cfg))
            written = state.source
        return saved_config_response(state.version, cfg, written)

    @api.post("/feedback")
    async def feedback(raw: Request) -> JSONResponse:
        body = require_object(await json_body(raw))
        winner, loser = body.get("winner"), body.get("loser")
        decision, tie = body.get("decision"), body.get("tie", False)
        for key, val in (("winner", winner), ("loser", loser)):
            if not isinstance(val, str) or not val:
                raise APIError(f"'{key}' must be a model name", param=key)
        if winner == loser:
            raise APIError("'winner' and 'loser' must be different models", param="loser")
        if decision is not None and not isinstance(decision, str):
            raise APIError("'decision' must be a decision name", param="decision")
        if not isinstance(tie, bool):
            raise APIError("'tie' must be a boolean", param="tie")
        state = runtime.state
        if decision is not None and decision not in {d.name for d in state.cfg.decisions}:
            raise APIError(f"unknown decision {decision!r}", param="decision")
        elo = state.elo_settings()
        scopes = [GLOBAL] + ([decision] if decision else [])
        ratings = runtime.stats.elo
        await asyncio.to_thread(
            ratings.update,
            winner,
            loser,
            scopes=scopes,
            k=elo.k_factor,
            initial=elo.initial_rating,
            tie=tie,
        )
        return JSONResponse(
            {
                "ratings": {
                    s: {
                        m: round(ratings.rating(m, s, elo.initial_rating), 3)
                        for m in (winner, loser)
                    }
                    for s in scopes
                }
            }
        )

    @api.get("/selection")
    async def selection() -> JSONResponse:
        state = runtime.state
        methods = {None: state.cfg.selection.model_dump(mode="json")}
        per_decision = {
            d.name: state.selection(d.name).model_dump(mode="json") for d in state.cfg.decisions
        }
        return JSONResponse(
            {"default": methods[None], "decisions": per_decision, **runtime.stats.snapshot()}
        )

    def replay_store():
        stores = runtime.replay_stores()
        if not stores:
            raise APIError(
                "router replay is not enabled (add a router_replay plugin)",
                status=404,
                type="not_found_error",
            )
        return stores[0]

    @api.get("/replay")
    async def replay_list(raw: Request) -> JSONResponse:
        q = raw.query_params
        try:
            limit = min(int(q.get("limit", 50)), 1000)
            offset = int(q.get("offset", 0))
            since = float(q["since"]) if "since" in q else None
        except ValueError:
            raise APIError("limit/offset must be integers and since a unix time") from None
        if limit < 0 or offset < 0:
            raise APIError("limit and offset must not be negative")
        filters = {k: q.get(k) for k in ("decision", "model", "backend", "request_id")}
        bodies = q.get("bodies", "false").lower() in ("1", "true", "yes")
        store = replay_store()
        records, total = await asyncio.to_thread(
            store.query, limit=limit, offset=offset, since=since, bodies=bodies, **filters
        )
        return JSONResponse({"total": total, "limit": limit, "offset": offset, "records": records})

    @api.get("/replay/{record_id}")
    async def replay_one(record_id: int) -> JSONResponse:
        rec = await asyncio.to_thread(replay_store().get, record_id)
        if rec is None:
            raise APIError(f"no replay record {record_id}", status=404, type="not_found_error")
        return JSONResponse(rec)

    return api
