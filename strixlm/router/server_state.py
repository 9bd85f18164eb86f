"""What the server holds: a `RouterState` built from one config (replaced whole on reload, so
a request in flight keeps the state it started with) inside a `RouterRuntime` that owns what
outlives reloads (HTTP client, metrics, selection statistics, replay databases). The embedder
is process-wide (`embed_fast.get_fast_embedder`), loaded when a config first needs it."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from strixlm.router.config import RouterConfig, RouterConfigError
from strixlm.router.config_plugins import EloSelection, RouterReplayPlugin, Selection
from strixlm.router.plugins import PluginSet
from strixlm.router.plugins.replay import ReplayStore
from strixlm.router.proxy_backends import BackendPool
from strixlm.router.selection import EloRatings, SelectionStats, Selector, make_selector
from strixlm.router.server_metrics import RouterMetrics
from strixlm.router.server_routing import RoutingCore

logger = logging.getLogger(__name__)


@dataclass
class RouterState:
    cfg: RouterConfig
    source: str | None
    version: int
    core: RoutingCore
    pool: BackendPool
    plugins: PluginSet
    selectors: dict[str | None, Selector]
    loaded_at: float = field(default_factory=time.time)

    def resolve(self, path: str) -> str:
        """A file path from the config: relative ones are relative to the config file."""
        p = Path(path).expanduser()
        if not p.is_absolute() and self.source is not None:
            p = Path(self.source).resolve().parent / p
        return str(p)

    def selection(self, decision: str | None) -> Selection:
        d = next((d for d in self.cfg.decisions if d.name == decision), None)
        return d.selection if d is not None and d.selection is not None else self.cfg.selection

    def selector(self, decision: str | None) -> Selector:
        return self.selectors.get(decision) or self.selectors[None]

    def elo_settings(self) -> EloSelection:
        """The Elo parameters feedback uses: top-level if Elo, else the first decision's."""
        for sel in [self.cfg.selection, *(d.selection for d in self.cfg.decisions)]:
            if isinstance(sel, EloSelection):
                return sel
        return EloSelection(method="elo")


def build_state(
    cfg: RouterConfig, stats: SelectionStats, source: str | None, version: int
) -> RouterState:
    """Everything a config implies, without network (model discovery comes after);
    raises RouterConfigError when a signal cannot be built."""
    plugins = PluginSet(cfg)
    core = RoutingCore.build(cfg, source, want_embedder=plugins.needs_embedder)
    selectors: dict[str | None, Selector] = {None: make_selector(cfg.selection, stats)}
    for d in cfg.decisions:
        if d.selection is not None:
            selectors[d.name] = make_selector(d.selection, stats)
    return RouterState(cfg, source, version, core, BackendPool(cfg), plugins, selectors)


class RouterRuntime:
    def __init__(self, cfg: RouterConfig, source: str | None = None) -> None:
        self.metrics = RouterMetrics()
        self.stats = SelectionStats()
        self.http: httpx.AsyncClient | None = None
        self._replay: dict[str, ReplayStore] = {}
        self.reload_lock = asyncio.Lock()
        self.state = self._build(cfg, source, 1)

    def _build(self, cfg: RouterConfig, source: str | None, version: int) -> RouterState:
        state = build_state(cfg, self.stats, source, version)
        elo = state.elo_settings()
        wanted = state.resolve(elo.ratings_path) if elo.ratings_path else None
        if wanted != (str(self.stats.elo.path) if self.stats.elo.path else None):
            # A new ratings file: start from what it holds (or keep what was learned so far).
            loaded = EloRatings(wanted)
            if not loaded.ratings:
                loaded.ratings, loaded.games = self.stats.elo.ratings, self.stats.elo.games
            self.stats.elo = loaded
        problems = []
        for p in state.plugins.of_type(RouterReplayPlugin):
            path = state.resolve(p.path)
            try:
                self.replay_store(path, p.max_records, p.store_bodies)
            except (OSError, sqlite3.Error) as e:
                i = cfg.plugins.index(p)
                problems.append(f"plugins[{i}].path: cannot open replay database {path}: {e}")
        if problems:
            raise RouterConfigError(problems)
        return state

    async def start(self) -> None:
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=5.0),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=128),
        )
        await self.state.pool.discover(self.http, force=True)

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        for store in self._replay.values():
            store.close()

    async def reload(self, cfg: RouterConfig, source: str | None) -> RouterState:
        """Builds the new state (raises RouterConfigError), discovers, then swaps it in."""
        async with self.reload_lock:
            state = await asyncio.to_thread(self._build, cfg, source, self.state.version + 1)
            if self.http is not None:
                await state.pool.discover(self.http, force=True)
            self.state = state
            logger.info("router config version %d loaded from %s", state.version, source)
            return state

    # -- shared resources -----------------------------------------------------------------------

    def replay_store(self, path: str, max_records: int, store_bodies: bool) -> ReplayStore:
        store = self._replay.get(path)
        if store is None:
            store = self._replay[path] = ReplayStore(path, max_records, store_bodies)
        store.max_records, store.store_bodies = max_records, store_bodies
        return store

    def replay_stores(self) -> list[ReplayStore]:
        state = self.state
        paths = [state.resolve(p.path) for p in state.plugins.of_type(RouterReplayPlugin)]
        return [self._replay[p] for p in dict.fromkeys(paths) if p in self._replay]
