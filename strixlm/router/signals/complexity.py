"""Complexity signal: hard or easy, by contrast of the prompt to hard and easy example sets.

Each side scores the mean of the prompt's top-k similarities to its examples (k = 3 or fewer),
so one odd example does not decide alone. The value is ``hard`` when the hard score exceeds the
easy score by more than ``margin``, else ``easy``; a value is always given (``matched`` is true),
and the confidence is the probability of that value, a logistic of the margin-shifted gap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from strixlm.router.config_signals import ComplexitySignal
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.embedding import embed_texts, prompt_embedding

TOP_K = 3
GAP_SCALE = 0.05  # a similarity gap of 0.05 beyond the margin -> 73% confident


def top_k_mean(sims: np.ndarray, k: int = TOP_K) -> float:
    k = min(k, len(sims))
    return float(np.sort(sims)[-k:].mean())


class ComplexityClassifier(Signal):
    needs_embedding = True

    def __init__(self, cfg: ComplexitySignal, embedder: Any) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.embedder = embedder
        self.hard = embed_texts(embedder, cfg.hard_examples)
        self.easy = embed_texts(embedder, cfg.easy_examples)

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        vec = prompt_embedding(text, ctx, self.embedder)
        hard, easy = top_k_mean(self.hard @ vec), top_k_mean(self.easy @ vec)
        gap = hard - easy - self.cfg.margin
        p_hard = 1.0 / (1.0 + math.exp(-gap / GAP_SCALE))
        value = "hard" if gap > 0 else "easy"
        return SignalResult(
            name=self.name,
            matched=True,
            confidence=p_hard if value == "hard" else 1.0 - p_hard,
            value=value,
            details={"hard": round(hard, 4), "easy": round(easy, 4), "margin": self.cfg.margin},
        )
