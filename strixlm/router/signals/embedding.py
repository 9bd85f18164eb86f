"""Embedding signal: cosine similarity of the prompt to candidate phrases, max or mean."""

from __future__ import annotations

from typing import Any

import numpy as np

from strixlm.router.config_signals import EmbeddingSignal
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.registry import SignalContext


def embed_texts(embedder: Any, texts: list[str]) -> np.ndarray:
    """[len(texts), dim] fp32 unit rows from any embedder (torch or numpy output)."""
    out = embedder.embed(list(texts))
    if hasattr(out, "numpy"):
        out = out.numpy()
    return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


def prompt_embedding(text: str, ctx: Any, embedder: Any) -> np.ndarray:
    """The request's shared embedding when ``ctx`` carries one, else computed here."""
    if isinstance(ctx, SignalContext) and ctx.embedder is not None:
        return ctx.embedding
    return embed_texts(embedder, [text])[0]


class EmbeddingMatcher(Signal):
    """Matches when the aggregated similarity reaches ``threshold``; value = nearest candidate."""

    needs_embedding = True

    def __init__(self, cfg: EmbeddingSignal, embedder: Any) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.embedder = embedder
        self.candidates = embed_texts(embedder, cfg.candidates)

    def similarities(self, vec: np.ndarray) -> np.ndarray:
        return self.candidates @ vec

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        sims = self.similarities(prompt_embedding(text, ctx, self.embedder))
        score = float(sims.max() if self.cfg.aggregation == "max" else sims.mean())
        best = int(sims.argmax())
        return SignalResult(
            name=self.name,
            matched=score >= self.cfg.threshold,
            confidence=score,
            value=self.cfg.candidates[best],
            details={
                "score": round(score, 4),
                "aggregation": self.cfg.aggregation,
                "threshold": self.cfg.threshold,
                "similarities": {
                    c: round(float(s), 4) for c, s in zip(self.cfg.candidates, sims, strict=True)
                },
            },
        )
