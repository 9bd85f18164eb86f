"""Pure-CPU, non-embedding signal extractors of the semantic router."""

from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.jailbreak import JailbreakDetector
from strixlm.router.signals.keyword import KeywordMatcher
from strixlm.router.signals.pii import PIIDetector, redact

__all__ = [
    "JailbreakDetector",
    "KeywordMatcher",
    "PIIDetector",
    "Signal",
    "SignalResult",
    "redact",
]
