"""Model / endpoint selection: rank a decision's candidates; the proxy tries them in order.

Methods: static (config order), weighted (random by weight), latency (lowest EWMA of observed
TTFT or total time per endpoint) and Elo (highest rating; ratings move with feedback). Every
ranking puts endpoints that failed recently last, so a dead backend is not tried first.
Observations (latency EWMAs, Elo ratings, failures) live in `SelectionStats`, which outlives
config reloads.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from strixlm.router.config import ModelRef
from strixlm.router.config_plugins import (
    EloSelection,
    LatencySelection,
    Selection,
    StaticSelection,
    WeightedSelection,
)

logger = logging.getLogger(__name__)

GLOBAL = "*"  # Elo scope of ratings that are not tied to one decision


@dataclass(frozen=True)
class Endpoint:
    """One model on one backend."""

    backend: str
    model: str
    base_url: str
    weight: float = 1.0

    @property
    def key(self) -> str:
        return f"{self.backend}/{self.model}"


@dataclass(frozen=True)
class Candidate:
    ref: ModelRef
    endpoint: Endpoint

    @property
    def weight(self) -> float:
        return self.ref.weight * self.endpoint.weight


@dataclass
class Ewma:
    value: float | None = None
    samples: int = 0

    def observe(self, x: float, alpha: float) -> None:
        self.value = x if self.value is None else alpha * x + (1.0 - alpha) * self.value
        self.samples += 1


class EloRatings:
    """Elo ratings per (scope, model); scope is a decision name or GLOBAL."""

    def __init__(self, path: str | None = None) -> None:
        self.path = Path(path) if path else None
        self.ratings: dict[str, dict[str, float]] = {}
        self.games: dict[str, dict[str, int]] = {}
        if self.path is not None and self.path.is_file():
            try:
                saved = json.loads(self.path.read_text())
                self.ratings = saved.get("ratings", {})
                self.games = saved.get("games", {})
            except (OSError, ValueError) as e:
                logger.warning("ignoring unreadable Elo ratings %s: %s", self.path, e)

    def rating(self, model: str, scope: str, initial: float) -> float:
        return self.ratings.get(scope, {}).get(model, initial)

    def has_scope(self, scope: str) -> bool:
        return bool(self.ratings.get(scope))

    @staticmethod
    def expected(ra: float, rb: float) -> float:
        """Probability that a player rated `ra` beats one rated `rb`."""
        return 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))

    def update(
        self,
        winner: str,
        loser: str,
        *,
        scopes: list[str],
        k: float,
        initial: float,
        tie: bool = False,
    ) -> None:
        for scope in scopes:
            table = self.ratings.setdefault(scope, {})
            ra, rb = table.get(winner, initial), table.get(loser, initial)
            ea = self.expected(ra, rb)
            sa = 0.5 if tie else 1.0
            table[winner] = ra + k * (sa - ea)
            table[loser] = rb + k * ((1.0 - sa) - (1.0 - ea))
            games = self.games.setdefault(scope, {})
            for m in (winner, loser):
                games[m] = games.get(m, 0) + 1
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text(json.dumps({"ratings": self.ratings, "games": self.games}, indent=1))
            tmp.replace(self.path)
        except OSError as e:
            logger.warning("cannot save Elo ratings to %s: %s", self.path, e)


@dataclass
class SelectionStats:
    """What selection learns while serving: latency EWMAs, failures, Elo ratings."""

    ttft: dict[str, Ewma] = field(default_factory=dict)
    total: dict[str, Ewma] = field(default_factory=dict)
    down_until: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    elo: EloRatings = field(default_factory=EloRatings)
    cooldown_s: float = 10.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe_latency(self, key: str, ttft_s: float, total_s: float, alpha: float) -> None:
        with self.lock:
            self.ttft.setdefault(key, Ewma()).observe(ttft_s, alpha)
            self.total.setdefault(key, Ewma()).observe(total_s, alpha)
            self.down_until.pop(key, None)

    def mark_failed(self, key: str, now: float | None = None) -> None:
        with self.lock:
            self.failures[key] = self.failures.get(key, 0) + 1
            self.down_until[key] = (now or time.monotonic()) + self.cooldown_s

    def mark_ok(self, key: str) -> None:
        with self.lock:
            self.down_until.pop(key, None)

    def is_down(self, key: str, now: float | None = None) -> bool:
        until = self.down_until.get(key)
        return until is not None and (now or time.monotonic()) < until

    def snapshot(self) -> dict:
        now = time.monotonic()
        keys = sorted(set(self.ttft) | set(self.failures))
        return {
            "endpoints": {
                k: {
                    "ttft_ms": _ms(self.ttft.get(k)),
                    "total_ms": _ms(self.total.get(k)),
                    "samples": self.total[k].samples if k in self.total else 0,
                    "failures": self.failures.get(k, 0),
                    "down": self.is_down(k, now),
                }
                for k in keys
            },
            "elo": {"ratings": self.elo.ratings, "games": self.elo.games},
        }


def _ms(e: Ewma | None) -> float | None:
    return None if e is None or e.value is None else round(e.value * 1000.0, 3)


class Selector:
    """Ranks candidates, best first."""

    def __init__(self, cfg: Selection, stats: SelectionStats, rng: random.Random) -> None:
        self.cfg = cfg
        self.stats = stats
        self.rng = rng

    def rank(self, candidates: list[Candidate], decision: str | None) -> list[Candidate]:
        ordered = self._order(candidates, decision)
        now = time.monotonic()
        # Recently failed endpoints go last (stable), so failover tries them only as a last resort.
        return sorted(ordered, key=lambda c: self.stats.is_down(c.endpoint.key, now))

    def _order(self, candidates: list[Candidate], decision: str | None) -> list[Candidate]:
        return list(candidates)


class WeightedSelector(Selector):
    def _order(self, candidates: list[Candidate], decision: str | None) -> list[Candidate]:
        # Weighted random permutation (Efraimidis-Spirakis): sorting by u^(1/w) makes the first
        # element candidate i with probability w_i / sum(w); later ones follow the same rule.
        keys = [math.log(1.0 - self.rng.random()) / c.weight for c in candidates]
        order = sorted(range(len(candidates)), key=lambda i: keys[i], reverse=True)
        return [candidates[i] for i in order]


class LatencySelector(Selector):
    cfg: LatencySelection

    def _order(self, candidates: list[Candidate], decision: str | None) -> list[Candidate]:
        table = self.stats.ttft if self.cfg.metric == "ttft" else self.stats.total

        def key(c: Candidate) -> float:
            e = table.get(c.endpoint.key)
            # Unmeasured endpoints first: a measurement is what makes them comparable.
            return -1.0 if e is None or e.value is None else e.value

        ordered = sorted(candidates, key=key)
        if len(ordered) > 1 and self.rng.random() < self.cfg.explore:
            ordered.insert(0, ordered.pop(self.rng.randrange(1, len(ordered))))
        return ordered


class EloSelector(Selector):
    cfg: EloSelection

    def _order(self, candidates: list[Candidate], decision: str | None) -> list[Candidate]:
        elo = self.stats.elo
        scope = decision if decision is not None and elo.has_scope(decision) else GLOBAL
        init = self.cfg.initial_rating
        return sorted(candidates, key=lambda c: -elo.rating(c.endpoint.model, scope, init))


def make_selector(cfg: Selection, stats: SelectionStats, seed: int | None = None) -> Selector:
    if isinstance(cfg, WeightedSelection):
        return WeightedSelector(
            cfg, stats, random.Random(cfg.seed if cfg.seed is not None else seed)
        )
    if isinstance(cfg, LatencySelection):
        return LatencySelector(cfg, stats, random.Random(seed))
    if isinstance(cfg, EloSelection):
        return EloSelector(cfg, stats, random.Random(seed))
    assert isinstance(cfg, StaticSelection)
    return Selector(cfg, stats, random.Random(seed))
