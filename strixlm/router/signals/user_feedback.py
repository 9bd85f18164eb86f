"""User-feedback signal: is the latest user turn a reaction to the previous answer?

Output: ``value`` is the strongest feedback kind found in the latest user message - one of
``satisfied``, ``dissatisfied``, ``wrong_answer``, ``need_clarification``, ``want_different``
(or None) - and ``confidence`` its score; the signal matches when that kind is one of the
configured ``kinds`` and the score reaches ``threshold``. ``details.scores`` has every kind.

Feedback needs something to react to: without an earlier assistant message in the request
context (``SignalContext.previous_answer``) nothing is reported ("that's wrong" in a first
message is about something else). Cues are phrase patterns (English, plus common French,
German and Spanish ones) with weights; a cue in the opening ``OPENING_CHARS`` characters
counts fully, later ones at ``LATE_FACTOR`` (a long message that mentions "thanks" at the end
of a new question is mostly a new question). Negated praise ("not helpful") is not praise.
"""

from __future__ import annotations

import re
from typing import Any

from strixlm.router.config_signals import UserFeedbackSignal
from strixlm.router.signals.base import Signal, SignalResult

OPENING_CHARS = 160
LATE_FACTOR = 0.6
SCAN_CHARS = 1500  # feedback is in the first sentences; longer turns are new content

_NOT = r"(?<!not )(?<!n't )(?<!never )(?<!no )"
_CUES: dict[str, list[tuple[float, str]]] = {
    "wrong_answer": [
        (
            0.95,
            r"\b(?:that'?s|that is|this is|it'?s|your answer is|you(?:'re| are)) "
            r"(?:wrong|incorrect|not (?:right|correct|true|accurate)|false|inaccurate)\b",
        ),
        (0.9, r"\b(?:wrong answer|you made (?:a|an) (?:mistake|error)|you miscalculated)\b"),
        (0.85, r"\b(?:there'?s|there is) (?:a|an) (?:mistake|error|bug|typo) in your\b"),
        (0.8, r"^\s*(?:no|nope)[,.!]\s+(?:it'?s|it is|the answer is|that'?s)\b"),
        (0.8, r"\b(?:doesn'?t add up|that can'?t be right|you got it wrong)\b"),
        (
            0.9,
            r"\b(?:c'est faux|c'est incorrect|das ist falsch|das stimmt nicht|eso es incorrecto"
            r"|eso no es correcto|está mal)\b",
        ),
    ],
    "dissatisfied": [
        (0.85, r"\b(?:not (?:very |really )?helpful|unhelpful|useless|pointless|waste of time)\b"),
        (
            0.8,
            r"\b(?:(?:that|this|it) (?:didn'?t|did not|doesn'?t|does not) (?:help|work|answer)"
            r"|still (?:doesn'?t|does not|isn'?t) work)",
        ),
        (
            0.85,
            r"\b(?:not what i (?:asked|wanted|meant)|you didn'?t (?:answer|read|listen)"
            r"|you ignored)\b",
        ),
        (0.75, r"\b(?:bad|terrible|awful|poor|lazy) (?:answer|response|reply|job)\b"),
        (0.7, r"\b(?:i'?m (?:disappointed|frustrated|annoyed)|this is frustrating|ugh+)\b"),
        (
            0.8,
            r"\b(?:ça ne marche pas|pas utile|hilft nicht|funktioniert nicht|no sirve"
            r"|no funciona)\b",
        ),
    ],
    "need_clarification": [
        (
            0.85,
            r"\b(?:i (?:don'?t|do not) (?:understand|get (?:it|this|that))|i'?m (?:confused"
            r"|lost))\b",
        ),
        (
            0.85,
            r"\b(?:what do you mean|what does (?:that|this) mean|could you clarify"
            r"|can you clarify|please clarify)\b",
        ),
        (
            0.75,
            r"\b(?:can|could) you (?:explain|elaborate)(?: (?:that|this|it|more|further"
            r"|on that|what you mean))?\b",
        ),
        (0.7, r"\b(?:in simpler terms|more simply|eli5|like i'?m five|step by step please)\b"),
        (0.6, r"^\s*(?:huh|what)\s*\?+\s*$"),
        (0.8, r"\b(?:je ne comprends pas|ich verstehe (?:das )?nicht|no entiendo)\b"),
    ],
    "want_different": [
        (
            0.85,
            r"\b(?:try again|another (?:one|option|example|way|version|answer)"
            r"|something else|regenerate|redo it|start over)\b",
        ),
        (
            0.8,
            r"\b(?:(?:a |an )?different (?:approach|answer|version|way|one|example|style|tone)"
            r"|other options|more options|alternatives?)\b",
        ),
        (
            0.75,
            r"\b(?:make it|can you make it|could you make it) (?:shorter|longer|simpler"
            r"|funnier|more formal|less formal|more casual)\b",
        ),
        (0.7, r"\b(?:rewrite it|rephrase (?:it|that)|not that one|instead)\b"),
        (0.8, r"\b(?:autre chose|une autre|noch einmal|etwas anderes|otra vez|otra opción)\b"),
    ],
    "satisfied": [
        (0.85, _NOT + r"\b(?:thanks|thank you|thx|ty|cheers|much appreciated)\b"),
        (
            0.85,
            _NOT + r"\b(?:perfect|exactly what i (?:needed|wanted)|that works|that worked"
            r"|it works now|works great|problem solved|nailed it)\b",
        ),
        (
            0.75,
            _NOT + r"\b(?:great|awesome|excellent|amazing|helpful|brilliant|you'?re the best"
            r"|got it|makes sense now|that makes sense)\b",
        ),
        (0.85, r"\b(?:merci|danke|gracias|grazie|obrigad[oa])\b"),
    ],
}
_COMPILED = {
    kind: [(w, re.compile(p, re.I | re.M)) for w, p in cues] for kind, cues in _CUES.items()
}


def feedback_scores(message: str) -> dict[str, float]:
    """Score per feedback kind for one user message (0 when no cue fires)."""
    hay = message[:SCAN_CHARS]
    scores = {}
    for kind, cues in _COMPILED.items():
        best = 0.0
        for weight, rx in cues:
            m = rx.search(hay)
            if m:
                best = max(best, weight * (1.0 if m.start() < OPENING_CHARS else LATE_FACTOR))
        scores[kind] = best
    return scores


class FeedbackDetector(Signal):
    def __init__(self, cfg: UserFeedbackSignal) -> None:
        self.cfg = cfg
        self.name = cfg.name

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        previous = getattr(ctx, "previous_answer", None)
        if previous is None and isinstance(ctx, dict):
            previous = ctx.get("previous_answer")
        if not previous:
            return SignalResult(self.name, False, 0.0, None, {"reason": "no previous answer"})
        scores = feedback_scores(text)
        kind = max(scores, key=scores.__getitem__)
        conf = scores[kind]
        if conf <= 0.0:
            return SignalResult(self.name, False, 0.0, None, {"scores": scores})
        matched = kind in self.cfg.kinds and conf >= self.cfg.threshold
        return SignalResult(self.name, matched, conf, kind, {"scores": scores})
