"""JSON endpoints the dashboard needs beyond the management API (`api.py`).

  GET  /api/v1/dashboard/state   first-run flag, the config as editable YAML, backends, replay
  POST /api/v1/config/validate   YAML text -> {"valid": true, summary} or the config error
  POST /api/v1/dashboard/config  YAML text -> validate, reload; ?persist=true also writes the
                                 text as typed (comments kept) to the router's config file
  GET  /api/v1/topology          signals -> decisions -> models graph (`topology.py`)
  POST /api/v1/setup/probe       {"base_url", "api_key"?} -> the models that backend serves
  POST /api/v1/setup             first run: {"backends": [...], "replay", "path", "overwrite"}
                                 -> a config routing everything to those backends, written to
                                 `path` and loaded (the router then runs from that file)
Config problems come back as the config API returns them: code "invalid_config" and
"problems", one line each naming the dotted path and, for YAML, the line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import yaml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from strixlm.router.api_config import (
    REDACTED,
    config_error,
    dump_yaml,
    parse_posted,
    saved_config_response,
)
from strixlm.router.api_errors import APIError, json_body, require_object
from strixlm.router.cli import summarize
from strixlm.router.config import (
    RouterConfig,
    RouterConfigError,
    default_config,
    load_config,
    validate_data,
)
from strixlm.router.config_plugins import RouterReplayPlugin
from strixlm.router.server_state import RouterRuntime, RouterState
from strixlm.router.topology import build_topology

YAML_TYPE = "application/yaml"
REPLAY_FILE = "router_replay.sqlite"  # next to the config file that setup writes


def compact_yaml(cfg: RouterConfig) -> str:
    """The config as the user would write it: only the fields that were set, secrets hidden."""
    data = cfg.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    for b in data.get("backends", []):
        if "api_key" in b:
            b["api_key"] = REDACTED
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def editor_yaml(state: RouterState) -> tuple[str, str]:
    """(YAML text, where it came from): the config file itself when it still holds exactly the
    running config and no literal secret (so its comments survive an edit), else a dump."""
    if state.source is not None and not any(b.api_key for b in state.cfg.backends):
        try:
            if load_config(state.source) == state.cfg:
                return Path(state.source).read_text(), "file"
        except (RouterConfigError, OSError):
            pass
    return compact_yaml(state.cfg), "running"


def _posted_text(body: bytes) -> str:
    try:
        return body.decode()
    except UnicodeDecodeError:
        raise APIError("the config must be UTF-8 text") from None


def _setup_config(body: dict[str, Any]) -> tuple[dict[str, Any], Path, bool]:
    backends = body.get("backends")
    if not isinstance(backends, list) or not backends:
        raise APIError("'backends' must be a non-empty list of backends", param="backends")
    path = body.get("path", "router.yaml")
    if not isinstance(path, str) or Path(path).suffix not in (".yaml", ".yml"):
        raise APIError("'path' must name a .yaml or .yml file", param="path")
    overwrite = body.get("overwrite", False)
    replay = body.get("replay", True)
    for key, val in (("overwrite", overwrite), ("replay", replay)):
        if not isinstance(val, bool):
            raise APIError(f"'{key}' must be a boolean", param=key)
    data = default_config().model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True
    )
    data["backends"] = backends
    if replay:
        data["plugins"] = [{"name": "replay", "type": "router_replay", "path": REPLAY_FILE}]
    return data, Path(path).expanduser().resolve(), overwrite


def build_dashboard_api(runtime: RouterRuntime) -> APIRouter:
    api = APIRouter(prefix="/api/v1")

    @api.get("/dashboard/state")
    async def dashboard_state() -> JSONResponse:
        state = runtime.state
        text, origin = await asyncio.to_thread(editor_yaml, state)
        return JSONResponse(
            {
                "first_run": state.source is None,
                "source": state.source,
                "version": state.version,
                "loaded_at": state.loaded_at,
                "summary": summarize(state.cfg),
                "yaml": text,
                "yaml_origin": origin,
                "backends": state.pool.status(),
                "replay_enabled": bool(state.plugins.of_type(RouterReplayPlugin)),
                "decisions": [d.name for d in state.cfg.decisions],
                "signals": [{"name": s.name, "type": s.type} for s in state.cfg.signals],
            }
        )

    @api.post("/config/validate")
    async def validate_config(raw: Request) -> JSONResponse:
        body = await raw.body()
        # YAML unless the client says JSON (curl posts form-encoded by default).
        ctype = raw.headers.get("content-type", "")
        ctype = ctype if "json" in ctype else YAML_TYPE
        try:
            cfg = parse_posted(body, ctype, runtime.state.cfg)
        except RouterConfigError as e:
            raise config_error(e) from None
        return JSONResponse({"valid": True, "summary": summarize(cfg)})

    @api.post("/dashboard/config")
    async def save_config(raw: Request) -> JSONResponse:
        persist = raw.query_params.get("persist", "false").lower() in ("1", "true", "yes")
        body = await raw.body()
        current = runtime.state
        if persist and current.source is None:
            raise APIError("persist=true needs a router started with --config FILE (or setup)")
        try:
            cfg = parse_posted(body, YAML_TYPE, current.cfg)
            state = await runtime.reload(cfg, current.source)
        except RouterConfigError as e:
            raise config_error(e) from None
        written = None
        if persist:
            text = _posted_text(body)
            # The text as typed keeps its comments; a redacted key would be lost, so dump then.
            if REDACTED in text:
                text = dump_yaml(cfg)
            await asyncio.to_thread(Path(state.source).write_text, text)
            written = state.source
        return saved_config_response(state.version, cfg, written)

    @api.get("/topology")
    async def topology() -> JSONResponse:
        state = runtime.state
        if state.pool.missing_models() and runtime.http is not None:
            await state.pool.discover(runtime.http)
        return JSONResponse({"version": state.version, **build_topology(state.cfg, state.pool)})

    @api.post("/setup/probe")
    async def probe_backend(raw: Request) -> JSONResponse:
        body = require_object(await json_body(raw))
        base_url, key = body.get("base_url"), body.get("api_key")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise APIError("'base_url' must be an http:// or https:// URL", param="base_url")
        if key is not None and not isinstance(key, str):
            raise APIError("'api_key' must be a string", param="api_key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = base_url.rstrip("/") + "/models"
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as http:
                r = await http.get(url, headers=headers)
            r.raise_for_status()
            models = [m["id"] for m in r.json()["data"] if isinstance(m.get("id"), str)]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            return JSONResponse({"ok": False, "url": url, "error": f"{type(e).__name__}: {e}"})
        return JSONResponse({"ok": True, "url": url, "models": models})

    @api.post("/setup")
    async def setup(raw: Request) -> JSONResponse:
        current = runtime.state
        if current.source is not None:
            raise APIError(
                f"the router already runs from {current.source}; edit it in the config editor",
                status=409,
                type="invalid_request_error",
                code="already_configured",
            )
        data, path, overwrite = _setup_config(require_object(await json_body(raw)))
        if path.exists() and not overwrite:
            raise APIError(f"{path} exists; set 'overwrite' to replace it", param="path")
        if not path.parent.is_dir():
            raise APIError(f"folder {path.parent} does not exist", param="path")
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        try:
            cfg = validate_data(data, "<setup>")
            state = await runtime.reload(cfg, str(path))
        except RouterConfigError as e:
            raise config_error(e) from None
        try:
            await asyncio.to_thread(path.write_text, text)
        except OSError as e:
            raise APIError(f"config loaded but not written to {path}: {e}", status=500) from None
        return JSONResponse(
            {"status": "ok", "version": state.version, "written": str(path), "yaml": text}
        )

    return api
