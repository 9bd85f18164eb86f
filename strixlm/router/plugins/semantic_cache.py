"""Semantic cache: answers a request with a stored answer to a similar earlier request.

Similarity is the cosine of the unit-norm embeddings of the last user message. A lookup only
considers entries of the same scope (decision + everything before the last user message), so
the same question in a different conversation, or under another system prompt, is a miss.
Entries expire after `ttl_s`; when full, the least recently used entry is replaced.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from strixlm.router.config_plugins import SemanticCachePlugin


@dataclass
class CachedAnswer:
    content: str
    model: str
    finish_reason: str = "stop"
    reasoning_content: str | None = None
    usage: dict[str, Any] | None = None


@dataclass
class CacheHit:
    answer: CachedAnswer
    similarity: float
    age_s: float


@dataclass
class _Entry:
    scope: str
    answer: CachedAnswer
    expires_at: float
    created_at: float


def cache_scope(decision: str | None, messages: list[dict[str, Any]]) -> str:
    """Scope key: decision plus the conversation before the last user message."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    prior = messages[:last_user] if last_user >= 0 else messages
    blob = json.dumps([decision, prior], sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class SemanticCache:
    def __init__(self, cfg: SemanticCachePlugin) -> None:
        self.cfg = cfg
        self.lock = threading.Lock()
        self._emb: np.ndarray | None = None  # [max_entries, dim], rows indexed by slot
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # LRU order, oldest first
        self._free: list[int] = list(range(cfg.max_entries - 1, -1, -1))
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, slot: int) -> None:
        del self._entries[slot]
        self._free.append(slot)

    def lookup(
        self, embedding: np.ndarray, scope: str, now: float | None = None
    ) -> CacheHit | None:
        now = time.time() if now is None else now
        with self.lock:
            for slot in [s for s, e in self._entries.items() if e.expires_at <= now]:
                self._drop(slot)
            slots = [s for s, e in self._entries.items() if e.scope == scope]
            if not slots or self._emb is None:
                self.misses += 1
                return None
            sims = self._emb[slots] @ np.asarray(embedding, dtype=np.float32)
            best = int(np.argmax(sims))
            if float(sims[best]) < self.cfg.similarity_threshold:
                self.misses += 1
                return None
            slot = slots[best]
            self._entries.move_to_end(slot)
            self.hits += 1
            e = self._entries[slot]
            return CacheHit(e.answer, float(sims[best]), now - e.created_at)

    def store(
        self, embedding: np.ndarray, scope: str, answer: CachedAnswer, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
        with self.lock:
            if self._emb is None:
                self._emb = np.zeros((self.cfg.max_entries, vec.shape[0]), dtype=np.float32)
            if not self._free:
                self._drop(next(iter(self._entries)))  # least recently used
            slot = self._free.pop()
            self._emb[slot] = vec
            self._entries[slot] = _Entry(scope, answer, now + self.cfg.ttl_s, now)

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses}
