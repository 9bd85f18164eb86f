"""Config as JSON for the management API: dump with secrets redacted, and parse a posted
config (JSON object or YAML text) back, restoring redacted secrets from the running one."""

from __future__ import annotations

from typing import Any

import yaml
from fastapi.responses import JSONResponse

from strixlm.router.api_errors import APIError
from strixlm.router.cli import summarize
from strixlm.router.config import RouterConfig, RouterConfigError, validate_data

REDACTED = "***redacted***"


def dump_config(cfg: RouterConfig) -> dict[str, Any]:
    """JSON-ready config that validates again when posted back (None fields left out: a rule
    node lists only its own operator)."""
    data = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
    for b in data.get("backends", []):
        if "api_key" in b:
            b["api_key"] = REDACTED
    return data


def parse_posted(body: bytes, content_type: str, current: RouterConfig) -> RouterConfig:
    """Validates a posted config; raises RouterConfigError (one line per problem)."""
    source = "<posted config>"
    root = None
    try:
        if "yaml" in content_type:
            text = body.decode()
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        else:
            import json

            data = json.loads(body or b"null")
    except (ValueError, yaml.YAMLError) as e:
        raise RouterConfigError([f"{source}: cannot parse: {e}"]) from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and len(data) == 1:
        data = data["config"]  # accept {"config": {...}} as GET returns it
    if isinstance(data, dict):
        old_keys = {b.name: b.api_key for b in current.backends if b.api_key}
        backends = data.get("backends")
        for b in backends if isinstance(backends, list) else []:  # a non-list: validation says
            if isinstance(b, dict) and b.get("api_key") == REDACTED:
                if b.get("name") in old_keys:
                    b["api_key"] = old_keys[b["name"]]
                else:
                    b.pop("api_key")
    return validate_data(data, source, root)


def dump_yaml(cfg: RouterConfig) -> str:
    data = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def config_error(e: RouterConfigError) -> APIError:
    """A rejected config as an OpenAI-style 400: one line per problem, and the list."""
    n = len(e.messages)
    return APIError(
        f"invalid config ({n} problem{'s' if n != 1 else ''}): " + "; ".join(e.messages),
        code="invalid_config",
        extra={"problems": e.messages},
    )


def saved_config_response(version: int, cfg: RouterConfig, written: str | None) -> JSONResponse:
    """The answer to a config that was loaded (and maybe written to its file)."""
    return JSONResponse(
        {"status": "ok", "version": version, "summary": summarize(cfg), "written": written}
    )
