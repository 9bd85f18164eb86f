"""Language signal: which language is the prompt written in (ISO 639-1 codes).

Two stages, both offline:
1. Script. Letters are counted per Unicode script. Scripts that one language dominates decide
   at once (kana -> ja, Hangul -> ko, Han without kana -> zh, Arabic, Greek, Hebrew, Devanagari,
   Thai). Latin and Cyrillic text goes on to stage 2, restricted to languages of that script.
2. Character n-grams. A multinomial naive Bayes model over 2- to 4-grams of each word padded
   with spaces (" the ", so word starts and ends count) and over the padded words themselves,
   trained at start-up from the sample sentences in ``data/language_samples.jsonl`` (written
   for this project), with a prior favouring English (``ENGLISH_PRIOR``). The confidence is a
   softmax over the languages' mean log-posterior per n-gram, sharpened by ``SHARPNESS``, times
   the share of letters in the winning script. Per-word scores are memoized.

Long prompts are sampled (the start, the middle and the end, ``SAMPLE_CHARS`` each), so the
cost is bounded whatever the prompt length.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from strixlm.router.config_signals import LanguageSignal
from strixlm.router.signals.base import Signal, SignalResult

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "language_samples.jsonl"
SAMPLE_CHARS = 400
WORD_MEMO_MAX = 200_000
SHARPNESS = 12.0  # softmax temperature on mean log-likelihood per n-gram (fit on held-out)
SMOOTHING = 0.5
# Prior over languages: most prompts a router sees are English, and short technical English
# ("Compute 17^23 mod 5.") has few n-grams to go on. Other languages share the rest equally.
ENGLISH_PRIOR = 0.5
# Letters one of the two Cyrillic languages we model has and the other lacks.
_UK_ONLY = set("іїєґ")
_RU_ONLY = set("ыэъё")
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)

# Scripts that name their language outright; the order breaks ties (kana before Han).
_SCRIPT_LANG = {
    "hiragana": "ja",
    "katakana": "ja",
    "hangul": "ko",
    "han": "zh",
    "arabic": "ar",
    "greek": "el",
    "hebrew": "he",
    "devanagari": "hi",
    "thai": "th",
}
_SCRIPT_RANGES: list[tuple[int, int, str]] = [
    (0x0041, 0x024F, "latin"),
    (0x0370, 0x03FF, "greek"),
    (0x0400, 0x052F, "cyrillic"),
    (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"),
    (0x0750, 0x077F, "arabic"),
    (0x0900, 0x097F, "devanagari"),
    (0x0E00, 0x0E7F, "thai"),
    (0x1100, 0x11FF, "hangul"),
    (0x1E00, 0x1EFF, "latin"),
    (0x3040, 0x309F, "hiragana"),
    (0x30A0, 0x30FF, "katakana"),
    (0x3400, 0x4DBF, "han"),
    (0x4E00, 0x9FFF, "han"),
    (0xAC00, 0xD7AF, "hangul"),
    (0xF900, 0xFAFF, "han"),
    (0xFF66, 0xFF9D, "katakana"),
]


@lru_cache(maxsize=8192)
def script_of(ch: str) -> str | None:
    cp = ord(ch)
    if cp < 0x41:
        return None
    for lo, hi, name in _SCRIPT_RANGES:
        if lo <= cp <= hi:
            return name if ch.isalpha() else None
    return None


def script_counts(text: str) -> Counter[str]:
    if text.isascii():  # the common case, without a per-character loop
        n = sum(1 for c in text if c.isalpha())
        return Counter({"latin": n}) if n else Counter()
    return Counter(s for s in map(script_of, text) if s is not None)


def word_ngrams(word: str) -> list[str]:
    """2- to 4-grams of a lowercased word padded with one space each side, plus the word."""
    p = f" {word} "
    n = len(p)
    out = [p[i : i + 2] for i in range(n - 1)]
    out.extend(p[i : i + 3] for i in range(n - 2))
    out.extend(p[i : i + 4] for i in range(n - 3))
    if n > 5:
        out.append(p)
    return out


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngrams(text: str) -> list[str]:
    return [g for w in words(text) for g in word_ngrams(w)]


def sample(text: str, size: int = SAMPLE_CHARS) -> str:
    """Start, middle and end of a long text (cut at spaces where possible)."""
    if len(text) <= 3 * size:
        return text
    mid = len(text) // 2 - size // 2
    parts = [text[:size], text[mid : mid + size], text[-size:]]
    return " ".join(p.split(" ", 1)[-1] if i else p for i, p in enumerate(parts))


@dataclass
class NgramModel:
    """Multinomial naive Bayes over character n-grams: a [n-gram, language] log-prob matrix."""

    langs: list[str]
    index: dict[str, int]  # n-gram -> row of ``logp``; the last row holds unseen n-grams
    logp: np.ndarray  # [len(index) + 1, len(langs)] float64
    log_prior: np.ndarray  # [len(langs)]
    script: dict[str, str]
    _memo: dict[str, tuple[np.ndarray, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def train(cls, texts: dict[str, list[str]]) -> NgramModel:
        langs = sorted(texts)
        counts = [Counter(g for t in texts[lang] for g in ngrams(t)) for lang in langs]
        vocab = sorted(set().union(*counts))
        index = {g: i for i, g in enumerate(vocab)}
        logp = np.empty((len(vocab) + 1, len(langs)))
        for j, c in enumerate(counts):
            total = sum(c.values()) + SMOOTHING * (len(vocab) + 1)
            col = np.full(len(vocab) + 1, SMOOTHING)
            for g, n in c.items():
                col[index[g]] += n
            logp[:, j] = np.log(col / total)
        others = max(1, len(langs) - 1)
        rest = (1.0 - ENGLISH_PRIOR) / others
        prior = [ENGLISH_PRIOR if lang == "en" else rest for lang in langs]
        script = {lang: script_counts(" ".join(texts[lang])).most_common(1)[0][0] for lang in langs}
        return cls(langs, index, logp, np.log(prior), script)

    def _word(self, word: str) -> tuple[np.ndarray, int]:
        """(summed log-probs per language, n-gram count) of one word, memoized."""
        hit = self._memo.get(word)
        if hit is None:
            grams = word_ngrams(word)
            unseen = len(self.index)
            rows = [self.index.get(g, unseen) for g in grams]
            hit = (self.logp[rows].sum(0), len(grams))
            if len(self._memo) >= WORD_MEMO_MAX:
                self._memo.clear()
            self._memo[word] = hit
        return hit

    def scores(self, text_words: list[str], langs: list[str]) -> dict[str, float]:
        """Mean log-posterior per n-gram (log-likelihood plus log-prior, / n) per language."""
        parts = [self._word(w) for w in text_words]
        n = max(1, sum(c for _, c in parts))
        total = np.sum([v for v, _ in parts], axis=0) + self.log_prior
        return {lang: float(total[self.langs.index(lang)]) / n for lang in langs}


def load_samples(path: Path = SAMPLES) -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                texts.setdefault(row["lang"], []).append(row["text"])
    return texts


@lru_cache(maxsize=1)
def default_model() -> NgramModel:
    return NgramModel.train(load_samples())


def softmax(scores: dict[str, float], sharpness: float) -> dict[str, float]:
    top = max(scores.values())
    ex = {k: math.exp(sharpness * (v - top)) for k, v in scores.items()}
    z = sum(ex.values())
    return {k: v / z for k, v in ex.items()}


def detect(text: str, model: NgramModel | None = None) -> tuple[str | None, float, dict[str, Any]]:
    """(language code or None, confidence, details) for ``text``."""
    model = model or default_model()
    text = unicodedata.normalize("NFC", sample(text))
    scripts = script_counts(text)
    if not scripts:
        return None, 0.0, {"reason": "no letters"}
    letters = sum(scripts.values())
    if scripts["hiragana"] + scripts["katakana"] >= max(1, 0.1 * scripts["han"]):
        scripts["hiragana"] += scripts.pop("han", 0)  # Japanese mixes kanji with kana
    main, n_main = scripts.most_common(1)[0]
    share = n_main / letters
    details: dict[str, Any] = {"script": main, "script_share": round(share, 3)}
    if main in _SCRIPT_LANG:
        return _SCRIPT_LANG[main], share, details
    candidates = [lang for lang, s in model.script.items() if s == main]
    if main == "cyrillic":
        # Letters only one of the two has decide; failing those, Ukrainian text of 40 letters
        # or more almost always has an і, ї, є or ґ, so their absence means Russian.
        chars = set(text.lower())
        uk, ru = bool(chars & _UK_ONLY), bool(chars & _RU_ONLY)
        if uk != ru or n_main >= 40:
            pick = "uk" if uk and not ru else "ru"
            candidates = [c for c in candidates if c == pick] or candidates
    if not candidates:
        return None, 0.0, {**details, "reason": f"no language model for script {main!r}"}
    text_words = words(text)
    if not text_words:
        return None, 0.0, {**details, "reason": "no words"}
    probs = softmax(model.scores(text_words, candidates), SHARPNESS)
    best = max(probs, key=probs.__getitem__)
    top3 = sorted(probs.items(), key=lambda kv: -kv[1])[:3]
    details["scores"] = {k: round(v, 3) for k, v in top3}
    return best, probs[best] * share, details


class LanguageDetector(Signal):
    """Matches when the detected language is one of ``languages`` with enough confidence.

    ``value`` is the detected language even when it is not in the list (then no match).
    """

    def __init__(self, cfg: LanguageSignal, model: NgramModel | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.model = model or default_model()

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        lang, conf, details = detect(text, self.model)
        matched = lang is not None and lang in self.cfg.languages and conf >= self.cfg.threshold
        return SignalResult(self.name, matched, conf, lang, details)
