"""Keyword signal: exact / regex / fuzzy / BM25 matching against a keyword list."""

from __future__ import annotations

import math
import re
from collections import Counter
from difflib import SequenceMatcher
from typing import Any

from strixlm.router.config_signals import KeywordSignal
from strixlm.router.signals.base import Signal, SignalResult

_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str, case_sensitive: bool = False) -> list[str]:
    toks = _TOKEN.findall(text)
    return toks if case_sensitive else [t.lower() for t in toks]


class KeywordMatcher(Signal):
    """Built from a `KeywordSignal`.

    BM25 mode treats the request text as the document and the keyword set as the query.
    IDF comes from the keyword set itself (a term shared by many keywords weighs less);
    length normalisation uses `avgdl` (default 64 tokens), k1=1.2, b=0.75.
    """

    def __init__(
        self, cfg: KeywordSignal, k1: float = 1.2, b: float = 0.75, avgdl: float = 64.0
    ) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.k1, self.b, self.avgdl = k1, b, avgdl
        flags = 0 if cfg.case_sensitive else re.IGNORECASE
        if cfg.mode == "regex":
            self._rx = [re.compile(k, flags) for k in cfg.keywords]
        elif cfg.mode == "exact":
            self._rx = [re.compile(rf"(?<!\w){re.escape(k)}(?!\w)", flags) for k in cfg.keywords]
        else:
            self._rx = []
        self._kw_tokens = [tokenize(k, cfg.case_sensitive) for k in cfg.keywords]
        n = len(self._kw_tokens)
        df = Counter(t for toks in self._kw_tokens for t in set(toks))
        self._idf = {t: math.log(1.0 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    def bm25(self, text: str) -> float:
        toks = tokenize(text, self.cfg.case_sensitive)
        tf = Counter(toks)
        norm = self.k1 * (1.0 - self.b + self.b * len(toks) / self.avgdl)
        score = 0.0
        for term, idf in self._idf.items():
            f = tf.get(term, 0)
            if f:
                score += idf * f * (self.k1 + 1.0) / (f + norm)
        return score

    def _fuzzy_hits(self, text: str) -> list[tuple[str, float]]:
        toks = tokenize(text, self.cfg.case_sensitive)
        hits = []
        for kw, kt in zip(self.cfg.keywords, self._kw_tokens, strict=True):
            k = len(kt) or 1
            target = " ".join(kt)
            best = 0.0
            for i in range(max(1, len(toks) - k + 1)):
                window = " ".join(toks[i : i + k])
                if abs(len(window) - len(target)) > len(target) // 2 + 1:
                    continue
                best = max(best, SequenceMatcher(None, window, target).ratio())
                if best == 1.0:
                    break
            if best >= self.cfg.fuzzy_threshold:
                hits.append((kw, best))
        return hits

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        cfg = self.cfg
        if cfg.mode == "bm25":
            score = self.bm25(text)
            thr = cfg.bm25_threshold
            matched = score >= thr and score > 0.0
            conf = score / (score + thr) if thr > 0 else float(score > 0)
            return SignalResult(cfg.name, matched, conf, None, {"bm25": score, "threshold": thr})
        if cfg.mode == "fuzzy":
            scored = self._fuzzy_hits(text)
            hits = [k for k, _ in scored]
        else:
            scored = []
            hits = [kw for kw, rx in zip(cfg.keywords, self._rx, strict=True) if rx.search(text)]
        frac = len(hits) / len(cfg.keywords)
        matched = bool(hits) if cfg.match == "any" else len(hits) == len(cfg.keywords)
        if cfg.mode == "fuzzy" and scored:
            conf = max(s for _, s in scored) if cfg.match == "any" else frac
        else:
            conf = (1.0 if hits else 0.0) if cfg.match == "any" else frac
        return SignalResult(
            name=cfg.name,
            matched=matched,
            confidence=conf if matched or cfg.match == "all" else 0.0,
            value=hits[0] if hits else None,
            details={"hits": hits, "mode": cfg.mode, "match": cfg.match},
        )
