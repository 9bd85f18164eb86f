"""Common result type and interface of every signal extractor."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SignalResult:
    name: str
    matched: bool
    confidence: float
    value: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        self.confidence = min(1.0, max(0.0, float(self.confidence)))


class Signal(ABC):
    """A signal: `evaluate(text, ctx)` -> SignalResult. `ctx` is free-form request context."""

    name: str

    @abstractmethod
    def _evaluate(self, text: str, ctx: Any) -> SignalResult: ...

    def evaluate(self, text: str, ctx: Any = None) -> SignalResult:
        t0 = time.perf_counter()
        res = self._evaluate(text, ctx)
        res.latency_ms = (time.perf_counter() - t0) * 1000.0
        return res
