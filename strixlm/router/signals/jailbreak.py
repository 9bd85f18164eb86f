"""Heuristic jailbreak / prompt-injection detector: weighted patterns over normalised text.

Normalisation strips zero-width characters, undoes leetspeak, collapses letters separated by
hyphens or spaces ("d-i-s-r-e-g-a-r-d"), and base64 blobs are decoded and scanned too.
Each pattern group fires at most once; the score is 1 - prod(1 - w) over fired groups.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from typing import Any

from strixlm.router.config_signals import JailbreakSignal
from strixlm.router.signals.base import Signal, SignalResult

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
)
_LEET_WORD = re.compile(r"\b(?=\w*[a-z])(?=\w*[013457])[a-z013457]{3,}\b", re.I)
_SPACED = re.compile(r"\b(?:[A-Za-z][-_. ]){3,}[A-Za-z]\b")
_B64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")

_INSTR = r"(?:instructions?|guidance|rules|guidelines|prompts?|directions|directives|guardrails)"
_PRIOR = r"(?:previous|prior|above|earlier|preceding|original|initial|your|all|any|safety)"
_HARM = (
    r"\bmeth(?:amphetamine)?\b|napalm|pipe ?bomb|explosiv|\bbomb\b|sarin|ricin"
    r"|nerve agent|keylogger"
    r"|ransomware|malware|poison|launder|ghost gun|firearms? without|phish|stalk|hotwire"
    r"|lethal dose|breathalyzer|/etc/shadow|stolen credit card|harass|minor|unsupervised access"
    r"|kids online|clone a credit|kreditkarte klont|入侵|explosivos|password"
)

# (group, weight, pattern) -- patterns run on lowercased, normalised text.
_PATTERNS: list[tuple[str, float, str]] = [
    (
        "override",
        0.9,
        rf"\b(?:ignore|disregard|forget|override|bypass|skip)\b(?:\s+\w+){{0,3}}?"
        rf"\s+{_PRIOR}\s+(?:\w+\s+)?{_INSTR}",
    ),
    (
        "override",
        0.9,
        r"ignorez les instructions|ignora (?:todas )?las instrucciones"
        r"|vergiss alle (?:vorherigen )?anweisungen|忽略.{0,8}(?:指令|指示)"
        r"|以前の指示を無視",
    ),
    (
        "override",
        0.8,
        r"forget the \w+ task|previous rules don'?t apply|new instructions for the"
        r" (?:assistant|ai)|stop the review\. instead",
    ),
    (
        "persona",
        0.5,
        r"\b(?:you are now|you'?re now|from now on,? you are|you are no longer"
        r"|you have two personalities|du bist jetzt|你现在是)\b",
    ),
    (
        "unrestricted",
        0.6,
        r"no (?:content )?polic(?:y|ies)|no restrictions|without (?:any )?"
        r"(?:restrictions?|limits|safety guidelines)|no rules|ohne regeln"
        r"|没有任何限制|uncensored|unfiltered|never refuses|doesn'?t follow "
        r"guidelines|not have to abide|broken free|break the rules|"
        r"answer without limits",
    ),
    (
        "dan",
        0.6,
        r"do anything now.{0,80}\b(?:rules|confines|restrictions)|\bstay (?:dan|stan)\b"
        r"|\b(?:dan|stan|aim|antigpt|devmode)\b,",
    ),
    ("extraction_soft", 0.6, r"\byour (?:system|hidden|initial) (?:prompt|instructions)"),
    ("dev_mode", 0.6, r"developer mode|dev ?mode|admin_?mode|god mode|jailbroken"),
    (
        "filters_off",
        0.7,
        r"(?:safety )?filters? (?:= ?off|disabled)|disable your (?:guidelines|"
        r"filters|safety)|safety (?:filters|rules) (?:= ?)?off",
    ),
    (
        "extraction",
        0.85,
        r"(?:print|reveal|show|repeat|output|reply with|tell me|dump)\b.{0,40}"
        r"(?:system prompt|hidden (?:developer )?instructions|initial "
        r"instructions|words above)",
    ),
    (
        "refusal_supp",
        0.5,
        r"(?:no|without) (?:warnings?|disclaimers?) or refusals|never (?:allowed"
        r" to )?refuse|never adds? warnings|never break (?:it|character)|"
        r"anything \w+ refuses|mandatory warning out of the way",
    ),
    (
        "fake_system",
        0.8,
        r"\[(?:end of )?(?:new )?system prompt\]|system override|"
        r"<!--[^>]{0,200}\b(?:ai|llm|assistant)\b|if you are an (?:llm|ai)|"
        r"note to ai|ai assistant:",
    ),
    (
        "authority",
        0.5,
        r"(?:openai|anthropic) developer|authori[sz]ed red.team|you are cleared"
        r"|authorization code",
    ),
    (
        "evasion",
        0.7,
        r"(?:so|that) (?:the )?(?:moderation|filters?|safety)\b.{0,30}(?:can'?t|"
        r"cannot|won'?t|don'?t) (?:read|detect|trigger|notice)|replace numbers with"
        r" letters|follow the instructions inside",
    ),
    ("mode_game", 0.5, r"opposite day|harmful ?= ?helpful|opposite of what"),
    ("grandma", 0.5, r"(?:grandmother|grandma).{0,80}(?:used to|would) (?:tell|read)"),
    ("hypothetical", 0.4, r"if you were an ai with no|hypothetically|thought experiment"),
    (
        "roleplay",
        0.3,
        r"\bpretend (?:you are|to be)|\bact as (?:a|an)\b|let'?s play a game|stay "
        r"(?:fully )?in character|role-?play",
    ),
    (
        "exact_steps",
        0.3,
        r"exact (?:steps|quantities)|step[- ]by[- ]step|real working "
        r"instructions|with root on",
    ),
    (
        "privileged_sim",
        0.4,
        r"act as a linux terminal|(?:root|admin) (?:access )?on (?:a|the)"
        r" (?:\w+'?s? )?(?:production|bank)",
    ),
    ("harm", 0.35, _HARM),
]
_COMPILED = [(g, w, re.compile(p, re.I | re.S)) for g, w, p in _PATTERNS]
# "a poem titled 'Ignore All Previous Instructions'" quotes the phrase rather than using it.
_QUOTED_TITLE = re.compile(r"(?:titled|called|named|phrase|term|slogan)\s+['\"“‘]", re.I)


def _collapse_spaced(text: str) -> str:
    def join(m: re.Match[str]) -> str:
        return re.sub(r"[-_. ]", "", m.group())

    return _SPACED.sub(join, text)


def normalise(text: str) -> tuple[str, dict[str, Any]]:
    """Return (normalised text, obfuscation stats)."""
    stripped = _ZERO_WIDTH.sub("", unicodedata.normalize("NFKC", text))
    n_zw = len(text) - len(stripped)
    leet_words = _LEET_WORD.findall(stripped)
    deleeted = _LEET_WORD.sub(lambda m: m.group().translate(_LEET), stripped)
    collapsed = re.sub(
        r"\b(?:[a-z]-){3,}[a-z]\b", lambda m: m.group().replace("-", ""), deleeted, flags=re.I
    )
    collapsed = re.sub(
        r"\b(?:[a-z] ){3,}[a-z]\b", lambda m: m.group().replace(" ", ""), collapsed, flags=re.I
    )
    words = max(1, len(stripped.split()))
    return collapsed, {"zero_width": n_zw, "leet_ratio": len(leet_words) / words}


def _decode_b64(text: str) -> list[str]:
    out = []
    for m in _B64.finditer(text):
        blob = m.group()
        try:
            raw = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True)
            dec = raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if dec.isprintable() and sum(c.isalpha() or c == " " for c in dec) > 0.8 * len(dec):
            out.append(dec)
    return out


class JailbreakDetector(Signal):
    """Built from a `JailbreakSignal`; only `method: heuristic` is implemented here."""

    def __init__(self, cfg: JailbreakSignal) -> None:
        if cfg.method != "heuristic":
            raise ValueError(f"JailbreakDetector implements method 'heuristic', not {cfg.method!r}")
        self.cfg = cfg
        self.name = cfg.name
        self.threshold = cfg.threshold

    def score(self, text: str) -> tuple[float, dict[str, float], dict[str, Any]]:
        norm, stats = normalise(text)
        decoded = _decode_b64(text)
        hay = "\n".join([norm, *decoded])
        fired: dict[str, float] = {}
        for group, weight, rx in _COMPILED:
            m = rx.search(hay)
            if not m:
                continue
            if _QUOTED_TITLE.search(hay[max(0, m.start() - 30) : m.start()]):
                weight *= 0.3
            fired[group] = max(fired.get(group, 0.0), weight)
        if stats["zero_width"]:
            fired["zero_width"] = 0.4
        if stats["leet_ratio"] >= 0.2:
            fired["leetspeak"] = 0.5
        if decoded:
            fired["base64"] = 0.3
        remaining = 1.0
        for w in fired.values():
            remaining *= 1.0 - w
        stats["decoded_base64"] = decoded
        return 1.0 - remaining, fired, stats

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        if self.cfg.include_history and ctx is not None:
            history = ctx.get("history", []) if isinstance(ctx, dict) else []
            text = "\n".join([*map(str, history), text])
        conf, fired, stats = self.score(text)
        return SignalResult(
            name=self.name,
            matched=conf >= self.threshold,
            confidence=conf,
            value="jailbreak" if conf >= self.threshold else None,
            details={"patterns": fired, "threshold": self.threshold, **stats},
        )
