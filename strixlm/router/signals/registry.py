"""Build signal extractors from a validated config; share per-request work between them.

``build_signals(config, embedder)`` returns one extractor per configured signal, keyed by
name. ``SignalContext`` carries one request: its messages, the text the signals classify (the
latest user message), and lazily computed shared values - the token ids (exact, through the
embedder's chunk-cached tokenizer), the prompt's token count, and the embedding, computed at
most once per request whatever the number of embedding-based signals.
``extract_all(signals, ctx)`` evaluates every extractor on one context.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from strixlm.router.signals.base import Signal, SignalResult

log = logging.getLogger(__name__)

# Signal types whose extractor reads ``ctx.embedding`` (fact_check only with method=embedding).
EMBEDDING_TYPES = {"embedding", "domain", "complexity"}

_EST_TOKEN = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_")


def estimate_tokens(text: str) -> int:
    """Token count without a tokenizer: BERT-like pieces from words, digit runs and punctuation.

    Used only when the embedder's tokenizer is unavailable. Validated against the tokenizer
    in tests (within 25% on the routing set's English prompts in aggregate).
    """
    n = 0
    for m in _EST_TOKEN.findall(text):
        c = m[0]
        if c.isalpha():
            if ord(c) >= 0x2E80:  # CJK: the tokenizer splits every character
                n += len(m)
            else:
                n += 1 + max(0, len(m) - 7) // 2
        elif c.isdigit():
            n += (len(m) + 2) // 3
        else:
            n += 1
    return n


def message_text(content: Any) -> str:
    """Text of an OpenAI message content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


@dataclass
class SignalContext:
    """One request as the signals see it; shared values are computed on first use only."""

    text: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    embedder: Any = None
    timings: dict[str, float] = field(default_factory=dict)
    _ids: np.ndarray | None = field(default=None, repr=False)
    _embedding: np.ndarray | None = field(default=None, repr=False)
    _prompt_tokens: int | None = field(default=None, repr=False)

    @classmethod
    def from_messages(cls, messages: list[Mapping[str, Any]], embedder: Any = None):
        """The latest user message is the text; earlier messages are history."""
        msgs = [dict(m) for m in messages]
        text = ""
        for m in reversed(msgs):
            if m.get("role") == "user":
                text = message_text(m.get("content"))
                break
        return cls(text=text, messages=msgs, embedder=embedder)

    @classmethod
    def from_text(cls, text: str, embedder: Any = None, history: list[str] | None = None):
        msgs = [{"role": "user", "content": h} for h in history or []]
        msgs.append({"role": "user", "content": text})
        return cls(text=text, messages=msgs, embedder=embedder)

    # -- conversation -------------------------------------------------------------------------

    def _latest_user_index(self) -> int:
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].get("role") == "user":
                return i
        return len(self.messages)

    @property
    def history(self) -> list[str]:
        """Texts of the messages before the latest user message, oldest first."""
        return [message_text(m.get("content")) for m in self.messages[: self._latest_user_index()]]

    @property
    def previous_answer(self) -> str | None:
        """The last assistant message before the latest user message, if any."""
        for m in reversed(self.messages[: self._latest_user_index()]):
            if m.get("role") == "assistant":
                return message_text(m.get("content"))
        return None

    def get(self, key: str, default: Any = None) -> Any:
        """Dict-style access for extractors written against a plain dict context."""
        return getattr(self, key, default)

    # -- shared, lazily computed --------------------------------------------------------------

    @property
    def token_ids(self) -> np.ndarray | None:
        """Exact token ids of ``text`` (None when the embedder has no tokenizer)."""
        if self._ids is None and hasattr(self.embedder, "token_ids"):
            t0 = time.perf_counter()
            self._ids = self.embedder.token_ids(self.text)
            self.timings["tokenize"] = (time.perf_counter() - t0) * 1000.0
        return self._ids

    @property
    def token_count(self) -> int:
        ids = self.token_ids
        return len(ids) if ids is not None else estimate_tokens(self.text)

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the whole conversation (every message's text), the latest included."""
        if self._prompt_tokens is None:
            count = getattr(self.embedder, "count_tokens", None) or estimate_tokens
            last = self._latest_user_index()
            total = self.token_count if last < len(self.messages) else 0
            for i, m in enumerate(self.messages):
                if i != last:
                    total += count(message_text(m.get("content")))
            self._prompt_tokens = total
        return self._prompt_tokens

    @property
    def embedding(self) -> np.ndarray:
        """Unit embedding of ``text``, [dim] fp32, computed once per context."""
        if self._embedding is None:
            if self.embedder is None:
                raise RuntimeError("this request context has no embedder")
            ids = self.token_ids
            t0 = time.perf_counter()
            if ids is not None and hasattr(self.embedder, "embed_ids"):
                vec = self.embedder.embed_ids(ids)
            else:
                vec = self.embedder.embed_one(self.text)
            self._embedding = np.asarray(vec, dtype=np.float32).reshape(-1)
            self.timings["embed"] = (time.perf_counter() - t0) * 1000.0
        return self._embedding


def build_signals(config: Any, embedder: Any = None, base_dir: str | Path | None = None):
    """One extractor per signal of a validated ``RouterConfig`` (or a list of signal models).

    ``embedder`` serves every embedding-based signal; when None and one is configured, the
    process-wide fast embedder is loaded. ``base_dir`` resolves ``examples_path`` (default: cwd).
    """
    from strixlm.router.signals.factory import make_signal

    specs = list(getattr(config, "signals", config))
    needs = any(_needs_embedding(s) for s in specs)
    if needs and embedder is None:
        from strixlm.router.embed_fast import get_fast_embedder

        embedder = get_fast_embedder()
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return {s.name: make_signal(s, embedder, base) for s in specs}


def _needs_embedding(spec: Any) -> bool:
    return spec.type in EMBEDDING_TYPES or (
        spec.type == "fact_check" and spec.method == "embedding"
    )


def extract_all(signals: Mapping[str, Signal], ctx: SignalContext) -> dict[str, SignalResult]:
    """Evaluates every signal on ``ctx``. A failing extractor yields a non-match, logged."""
    if ctx.embedder is not None and any(
        getattr(s, "needs_embedding", False) for s in signals.values()
    ):
        try:  # computed once here so per-signal latencies exclude it
            ctx.embedding  # noqa: B018
        except Exception:  # each embedding-based signal then reports the failure itself
            log.exception("request embedding failed")
    out: dict[str, SignalResult] = {}
    for name, sig in signals.items():
        try:
            out[name] = sig.evaluate(ctx.text, ctx)
        except Exception as e:  # a broken extractor must not fail the request
            log.exception("signal %r failed", name)
            out[name] = SignalResult(name, False, 0.0, None, {"error": f"{type(e).__name__}: {e}"})
    return out
