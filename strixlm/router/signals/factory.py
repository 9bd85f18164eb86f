"""One extractor from one validated signal model (``config_signals``), by its ``type``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strixlm.router.signals.base import Signal


def make_signal(spec: Any, embedder: Any, base_dir: Path) -> Signal:
    from strixlm.router.signals.complexity import ComplexityClassifier
    from strixlm.router.signals.context import ContextRange
    from strixlm.router.signals.domain import DomainClassifier
    from strixlm.router.signals.embedding import EmbeddingMatcher
    from strixlm.router.signals.fact_check import FactCheckDetector
    from strixlm.router.signals.jailbreak import JailbreakDetector
    from strixlm.router.signals.keyword import KeywordMatcher
    from strixlm.router.signals.language import LanguageDetector
    from strixlm.router.signals.pii import PIIDetector
    from strixlm.router.signals.user_feedback import FeedbackDetector

    kind = spec.type
    if kind == "keyword":
        return KeywordMatcher(spec)
    if kind == "jailbreak":
        if spec.method != "heuristic":
            raise ValueError(
                f"signal {spec.name!r}: jailbreak method {spec.method!r} is not available; "
                "use method: heuristic"
            )
        return JailbreakDetector(spec)
    if kind == "pii":
        return PIIDetector(spec)
    if kind == "language":
        return LanguageDetector(spec)
    if kind == "context":
        return ContextRange(spec)
    if kind == "user_feedback":
        return FeedbackDetector(spec)
    if kind == "fact_check":
        return FactCheckDetector(spec, embedder)
    if kind == "embedding":
        return EmbeddingMatcher(spec, embedder)
    if kind == "domain":
        return DomainClassifier(spec, embedder, base_dir)
    if kind == "complexity":
        return ComplexityClassifier(spec, embedder)
    raise ValueError(f"signal {spec.name!r}: unknown signal type {kind!r}")
