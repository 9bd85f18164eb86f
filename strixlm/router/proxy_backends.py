"""The backends of a config: resolved API keys, model lists (configured or discovered through
GET {base_url}/models) and the endpoints that can serve a model ref."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field

import httpx

from strixlm.router.config import AUTO, Backend, ModelRef, RouterConfig
from strixlm.router.selection import Candidate, Endpoint

logger = logging.getLogger(__name__)

DISCOVERY_INTERVAL_S = 5.0  # at most one discovery attempt per backend in this window


@dataclass
class BackendState:
    config: Backend
    api_key: str | None
    models: list[str] = field(default_factory=list)
    discovered_at: float | None = None
    last_attempt: float = -1e9
    error: str | None = None

    @property
    def discovers(self) -> bool:
        return not self.config.models

    def endpoint(self, model: str) -> Endpoint:
        c = self.config
        return Endpoint(backend=c.name, model=model, base_url=c.base_url, weight=c.weight)


def resolve_api_key(b: Backend) -> str | None:
    if b.api_key is not None:
        return b.api_key
    if b.api_key_env is not None:
        key = os.environ.get(b.api_key_env)
        if not key:
            logger.warning(
                "backend %r: environment variable %s is not set; calling it without a key",
                b.name,
                b.api_key_env,
            )
        return key or None
    return None


class BackendPool:
    def __init__(self, cfg: RouterConfig) -> None:
        self.backends: dict[str, BackendState] = {
            b.name: BackendState(b, resolve_api_key(b), list(b.models)) for b in cfg.backends
        }

    # -- discovery ------------------------------------------------------------------------------

    async def discover(self, http: httpx.AsyncClient, force: bool = False) -> None:
        """Fetches model lists of discovering backends (not more often than every few s)."""
        now = time.monotonic()
        todo = [
            b
            for b in self.backends.values()
            if b.discovers and (force or now - b.last_attempt >= DISCOVERY_INTERVAL_S)
        ]
        await asyncio.gather(*(self._discover_one(http, b) for b in todo))

    async def _discover_one(self, http: httpx.AsyncClient, b: BackendState) -> None:
        b.last_attempt = time.monotonic()
        headers = {"Authorization": f"Bearer {b.api_key}"} if b.api_key else {}
        try:
            r = await http.get(f"{b.config.base_url}/models", headers=headers, timeout=5.0)
            r.raise_for_status()
            ids = [m["id"] for m in r.json()["data"] if isinstance(m.get("id"), str)]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            b.error = f"model discovery failed: {type(e).__name__}: {e}"
            logger.warning("backend %r: %s", b.config.name, b.error)
            return
        b.models, b.error, b.discovered_at = ids, None, time.time()
        logger.info("backend %r serves %s", b.config.name, ", ".join(ids) or "no models")

    def missing_models(self) -> bool:
        return any(b.discovers and not b.models for b in self.backends.values())

    # -- lookup ---------------------------------------------------------------------------------

    def api_key(self, backend: str) -> str | None:
        return self.backends[backend].api_key

    def serving(self, model: str) -> list[Endpoint]:
        """Endpoints that serve `model` by name, in config order."""
        return [b.endpoint(model) for b in self.backends.values() if model in b.models]

    def candidates(self, refs: list[ModelRef]) -> list[Candidate]:
        """Each ref expanded to the endpoints that can serve it, refs in order."""
        out = []
        for ref in refs:
            states = (
                [self.backends[ref.backend]] if ref.backend is not None else self.backends.values()
            )
            for b in states:
                models = b.models if ref.model == AUTO else [m for m in b.models if m == ref.model]
                out.extend(Candidate(ref, b.endpoint(m)) for m in models)
        return out

    def models(self) -> list[tuple[str, str]]:
        """(model, backend) for every served model, backends in config order."""
        return [(m, b.config.name) for b in self.backends.values() for m in b.models]

    def status(self) -> list[dict]:
        return [
            {
                "name": b.config.name,
                "base_url": b.config.base_url,
                "models": b.models,
                "discovered": b.discovers,
                "error": b.error,
            }
            for b in self.backends.values()
        ]
