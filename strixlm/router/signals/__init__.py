"""Signal extractors of the semantic router, and the registry that builds them from a config.

Text-only extractors: keyword, jailbreak, pii, language, context, fact_check (heuristic),
user_feedback. Embedding-based: embedding, domain, complexity, fact_check (embedding); they
share one embedding per request through ``registry.SignalContext``.
"""

from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.jailbreak import JailbreakDetector
from strixlm.router.signals.keyword import KeywordMatcher
from strixlm.router.signals.pii import PIIDetector, redact
from strixlm.router.signals.registry import SignalContext, build_signals, extract_all

__all__ = [
    "JailbreakDetector",
    "KeywordMatcher",
    "PIIDetector",
    "Signal",
    "SignalContext",
    "SignalResult",
    "build_signals",
    "extract_all",
    "redact",
]
