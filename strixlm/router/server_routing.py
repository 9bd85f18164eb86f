"""The routing core, free of HTTP: request text -> signal results -> decision.

Shared by the server, the classification API and `strixlm router eval`. Signals come from
`signals.registry` and run one after another in the calling thread (the server calls from a
worker thread) on one `SignalContext`, which computes the request embedding at most once; an
extractor that raises counts as not matched, so it never fails a request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strixlm.router.config import RouterConfig, RouterConfigError
from strixlm.router.decisions import DecisionEngine, DecisionMatch
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.registry import (
    EMBEDDING_TYPES,
    SignalContext,
    build_signals,
    extract_all,
    message_text,
)


def needs_embedder(cfg: RouterConfig) -> bool:
    """Whether any configured signal reads the request embedding."""
    return any(
        s.type in EMBEDDING_TYPES or (s.type == "fact_check" and s.method == "embedding")
        for s in cfg.signals
    )


def load_embedder() -> Any:
    """The process-wide fast embedder (shared by signals and the semantic cache); raises
    RouterConfigError when its model package is missing."""
    from strixlm.router.embed_fast import get_fast_embedder
    from strixlm.router.embedder import EmbedderUnavailable

    try:
        return get_fast_embedder()
    except (EmbedderUnavailable, ImportError, OSError) as e:
        raise RouterConfigError([f"embedder: {e}"]) from None


def build_signal_extractors(
    cfg: RouterConfig, embedder: Any = None, base_dir: str | Path | None = None
) -> dict[str, Signal]:
    """Extractors for the config's signals (`signals.registry.build_signals`); a signal that
    cannot be built (a missing examples file, an unavailable method) is a config problem."""
    try:
        return build_signals(cfg, embedder, base_dir)
    except (ValueError, OSError, RuntimeError, ImportError) as e:
        raise RouterConfigError([f"signals: {e}"]) from None


def content_text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of parts (text parts kept)."""
    return message_text(content)


def request_text(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """(text the signals classify, earlier turns): the last user message, and the text of the
    user/assistant messages before it."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    idx = last_user if last_user >= 0 else len(messages) - 1
    history = [
        content_text(m.get("content"))
        for m in messages[:idx]
        if m.get("role") in ("user", "assistant")
    ]
    return content_text(messages[idx].get("content")) if messages else "", history


@dataclass
class Classification:
    text: str
    signals: dict[str, SignalResult]
    match: DecisionMatch | None
    ranked: list[DecisionMatch] = field(default_factory=list)
    elapsed_ms: float = 0.0
    ctx: SignalContext | None = None  # holds the request embedding once computed

    @property
    def shared_ms(self) -> dict[str, float]:
        """Per-request work shared by the signals (tokenize, embed), in ms."""
        return dict(self.ctx.timings) if self.ctx is not None else {}

    @property
    def decision(self) -> str | None:
        return self.match.name if self.match is not None else None

    def signals_json(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "matched": r.matched,
                "confidence": round(r.confidence, 4),
                "value": r.value,
                "latency_ms": round(r.latency_ms, 3),
                "details": r.details,
            }
            for name, r in self.signals.items()
        }


class RoutingCore:
    def __init__(self, cfg: RouterConfig, signals: dict[str, Signal], embedder: Any = None):
        self.cfg = cfg
        self.signals = signals
        self.embedder = embedder
        self.engine = DecisionEngine(cfg)
        self.signal_types = {s.name: s.type for s in cfg.signals}

    @classmethod
    def build(
        cls, cfg: RouterConfig, source: str | None = None, *, want_embedder: bool = False
    ) -> RoutingCore:
        """Signals of `cfg` (example files relative to the config file `source`), with the
        embedder loaded when a signal or `want_embedder` (the semantic cache) needs it."""
        embedder = load_embedder() if want_embedder or needs_embedder(cfg) else None
        base_dir = Path(source).resolve().parent if source is not None else None
        return cls(cfg, build_signal_extractors(cfg, embedder, base_dir), embedder)

    def names_of_type(self, *types: str) -> list[str]:
        return [n for n, t in self.signal_types.items() if t in types]

    def context(
        self, text: str, history: list[str] | None = None, messages: list[dict] | None = None
    ) -> SignalContext:
        if messages:
            return SignalContext.from_messages(messages, self.embedder)
        return SignalContext.from_text(text, self.embedder, history)

    def classify(
        self,
        text: str,
        history: list[str] | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> Classification:
        t0 = time.perf_counter()
        ctx = self.context(text, history, messages)
        results = extract_all(self.signals, ctx)
        ranked = self.engine.evaluate_all(results)
        match = ranked[0] if ranked else self.engine.decide(results)
        elapsed = (time.perf_counter() - t0) * 1000.0
        return Classification(ctx.text, results, match, ranked, elapsed, ctx)
