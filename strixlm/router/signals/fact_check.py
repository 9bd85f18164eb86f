"""Fact-check signal: does the prompt ask for verifiable facts (names, dates, figures, claims)?

``heuristic``: weighted cues on the prompt. Positive: fact-seeking question openings ("who
invented", "when did", "how many", "what is the capital of"), requests to verify or source a
claim ("is it true", "according to", "cite", "fact-check"), statistics words, years and
percentages. Negative: creative, opinion, coding, maths, and rewrite/translate tasks, which
ask to make or transform something rather than to state facts. The score is a logistic of the
summed weights; a prompt with no cue at all scores ~0.27.

``embedding``: the heuristic score averaged with an embedding contrast - the prompt's top-3
similarity to fact-seeking examples minus that to other requests, squashed by a logistic -
using the example sets in ``data/fact_check_examples.jsonl`` (written for this project).

Cues are searched in the first ``SCAN_CHARS`` characters and the last ``SCAN_CHARS`` (where a
long prompt usually puts its question), so the cost is bounded.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from strixlm.router.config_signals import FactCheckSignal
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.complexity import top_k_mean
from strixlm.router.signals.embedding import embed_texts, prompt_embedding

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "fact_check_examples.jsonl"
SCAN_CHARS = 2000
BIAS = -1.0
GAP_SCALE = 0.05

_CUES: list[tuple[str, float, str]] = [
    (
        "fact_question",
        2.2,
        r"\b(?:who (?:is|was|were|are|invented|discovered|wrote|founded|won|painted|built|said)"
        r"|when (?:did|was|were|is|does)|where (?:is|was|are|did)|what year|which (?:year|country"
        r"|city|company|planet|president)|how (?:many|much|tall|far|old|long|big|high|deep) "
        r"(?:is|are|was|were|did|does|do|people|years)"
        r"|what (?:is|was|are) the (?:capital|population|height|distance|date|name|size|speed"
        r"|area|gdp|price|boiling|melting|average|official|largest|tallest|longest|current"
        r"|chemical|atomic))\b",
    ),
    (
        "verify",
        2.5,
        r"\b(?:is it true|is that true|fact[- ]?check|verify (?:this|that|whether)|according to"
        r"|cite (?:a |your )?sources?|citations?|what(?:'s| is) the source|did [\w .]{1,40} "
        r"really|is (?:the|this|that) (?:claim|statistic|number|figure) (?:true|accurate|correct))",
    ),
    (
        "statistics",
        1.2,
        r"\b(?:statistics?|census|figures|gdp|unemployment|population|record|official data"
        r"|latest (?:numbers|data|figures)|life expectancy)\b",
    ),
    ("year_or_percent", 0.6, r"\b(?:1[5-9]\d\d|20\d\d)\b|\d+(?:\.\d+)? ?%"),
    (
        "creative",
        -2.5,
        r"\b(?:write (?:a|an|me) (?:[\w-]+ )?(?:poem|story|song|haiku|joke|limerick|toast"
        r"|letter|essay|dialogue|scene|script|fable|sonnet|lyrics)"
        r"|tell me a (?:joke|story)|imagine|pretend|brainstorm|compose|continue this story"
        r"|role-?play|let's play)\b",
    ),
    (
        "opinion",
        -1.8,
        r"\b(?:what do you think|your opinion|do you (?:like|prefer)|should i|which (?:do you|is"
        r" better for me)|recommend|suggest|advice|feedback on)\b",
    ),
    (
        "code_task",
        -2.0,
        r"```|\b(?:write (?:a |an )?(?:python |javascript |rust |sql )?(?:function|script|class"
        r"|program|query)|refactor|debug|fix (?:the|this|my) (?:bug|code|error)|stack trace"
        r"|compile)\b",
    ),
    (
        "math_task",
        -1.8,
        r"\b(?:solve|prove|compute|calculate|derivative|integral|simplify|factor|equation)\b",
    ),
    (
        "transform_task",
        -1.8,
        r"\b(?:translate|summari[sz]e|rewrite|rephrase|paraphrase|proofread|make (?:this|it) "
        r"(?:shorter|longer|simpler|more))\b",
    ),
]
_COMPILED = [(name, w, re.compile(p, re.I)) for name, w, p in _CUES]


def scan_window(text: str, size: int = SCAN_CHARS) -> str:
    return text if len(text) <= 2 * size else text[:size] + "\n" + text[-size:]


def cue_score(text: str) -> tuple[float, dict[str, float]]:
    hay = scan_window(text)
    fired = {name: w for name, w, rx in _COMPILED if rx.search(hay)}
    z = BIAS + sum(fired.values())
    return 1.0 / (1.0 + math.exp(-z)), fired


def load_examples(path: Path = EXAMPLES) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.setdefault(row["label"], []).append(row["text"])
    return out


class FactCheckDetector(Signal):
    def __init__(self, cfg: FactCheckSignal, embedder: Any = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.embedder = embedder
        self.needs_embedding = cfg.method == "embedding"
        if self.needs_embedding:
            if embedder is None:
                raise ValueError(f"signal {cfg.name!r}: method 'embedding' needs an embedder")
            ex = load_examples()
            self.fact = embed_texts(embedder, ex["fact"])
            self.other = embed_texts(embedder, ex["other"])

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        score, fired = cue_score(text)
        details: dict[str, Any] = {"method": self.cfg.method, "cues": fired, "cue_score": score}
        if self.needs_embedding:
            vec = prompt_embedding(text, ctx, self.embedder)
            gap = top_k_mean(self.fact @ vec) - top_k_mean(self.other @ vec)
            emb = 1.0 / (1.0 + math.exp(-gap / GAP_SCALE))
            details["embedding_score"] = round(emb, 4)
            score = 0.5 * (score + emb)
        matched = score >= self.cfg.threshold
        return SignalResult(self.name, matched, score, "fact" if matched else None, details)
