"""Context signal: the prompt's token count lies in [min_tokens, max_tokens).

The count covers every message of the conversation (what a backend must fit in its context
window) and comes from the embedder's tokenizer through the request context when there is one
(exact, and shared with the embedding), else from ``estimate_tokens``.
"""

from __future__ import annotations

from typing import Any

from strixlm.router.config_signals import ContextSignal
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.registry import SignalContext, estimate_tokens


class ContextRange(Signal):
    def __init__(self, cfg: ContextSignal) -> None:
        self.cfg = cfg
        self.name = cfg.name

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        if isinstance(ctx, SignalContext):
            tokens = ctx.prompt_tokens
            method = "tokenizer" if ctx.token_ids is not None else "estimate"
        else:
            tokens, method = estimate_tokens(text), "estimate"
        hi = self.cfg.max_tokens
        matched = tokens >= self.cfg.min_tokens and (hi is None or tokens < hi)
        return SignalResult(
            name=self.name,
            matched=matched,
            confidence=1.0 if matched else 0.0,
            value=None,
            details={
                "tokens": tokens,
                "method": method,
                "min_tokens": self.cfg.min_tokens,
                "max_tokens": hi,
            },
        )
