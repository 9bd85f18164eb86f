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
FUZZY_MEMO_MAX = 100_000  # remembered (window -> ratio) pairs per keyword


def tokenize(text: str, case_sensitive: bool = False) -> list[str]:
    if case_sensitive:
        return _TOKEN.findall(text)
    if text.isascii():  # lowercasing first is the same there, and one call instead of many
        return _TOKEN.findall(text.lower())
    return [t.lower() for t in _TOKEN.findall(text)]


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
        self._fuzzy_matchers = [SequenceMatcher(None, "", " ".join(kt)) for kt in self._kw_tokens]
        self._fuzzy_memo: list[dict[str, float]] = [{} for _ in self._kw_tokens]
        self._lowered: tuple[str, str | None] | None = None  # (text, lowered) of the last call

    def _has(self, kw: str, rx: re.Pattern[str], text: str) -> bool:
        """Regex search; in exact mode a substring test first rules most keywords out cheaply
        (a lookbehind-led, case-insensitive pattern cannot use the regex engine's fast scan)."""
        if self.cfg.mode == "exact":
            if self.cfg.case_sensitive:
                if kw not in text:
                    return False
            else:
                low = self._lowered
                if low is None or low[0] is not text:
                    # Only ASCII text lowercases exactly as the regex engine folds case.
                    low = self._lowered = (text, text.lower() if text.isascii() else None)
                if low[1] is not None and kw.lower() not in low[1]:
                    return False
        return rx.search(text) is not None

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

    def _ratio(self, kw_index: int, window: str) -> float:
        """difflib ratio of ``window`` to keyword ``kw_index`` when it can reach the threshold
        (length within the original slack, then difflib's cheap upper bounds), else 0.0."""
        matcher = self._fuzzy_matchers[kw_index]
        target_len = len(matcher.b)
        if abs(len(window) - target_len) > target_len // 2 + 1:
            return 0.0
        matcher.set_seq1(window)
        thr = self.cfg.fuzzy_threshold
        if matcher.real_quick_ratio() < thr or matcher.quick_ratio() < thr:
            return 0.0
        return matcher.ratio()

    def _fuzzy_hits(self, text: str) -> list[tuple[str, float]]:
        """Best difflib ratio of each keyword against every window of as many tokens.

        Each distinct window is scored once and remembered across requests (windows recur), and
        windows that cannot reach the threshold are ruled out by length and difflib's cheap
        upper bounds (``real_quick_ratio`` >= ``quick_ratio`` >= ``ratio``) before ``ratio``
        runs, so the result equals scoring every window in order at a fraction of the cost.
        """
        toks = tokenize(text, self.cfg.case_sensitive)
        windows_by_k: dict[int, set[str]] = {}
        hits = []
        for i, (kw, kt) in enumerate(zip(self.cfg.keywords, self._kw_tokens, strict=True)):
            k = len(kt) or 1
            if k not in windows_by_k:
                n = max(1, len(toks) - k + 1)
                windows_by_k[k] = (
                    set(toks) if k == 1 else {" ".join(toks[j : j + k]) for j in range(n)}
                )
            windows = windows_by_k[k] or {""}
            memo = self._fuzzy_memo[i]
            missing = windows.difference(memo)
            if len(memo) + len(missing) > FUZZY_MEMO_MAX:
                memo.clear()
                missing = windows
            for window in missing:
                memo[window] = self._ratio(i, window)
            try:
                best = max(map(memo.__getitem__, windows))
            except KeyError:  # another thread cleared the memo in between
                best = max(self._ratio(i, w) for w in windows)
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
            hits = [
                kw for kw, rx in zip(cfg.keywords, self._rx, strict=True) if self._has(kw, rx, text)
            ]
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
