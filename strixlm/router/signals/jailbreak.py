"""Heuristic jailbreak / prompt-injection detector: weighted patterns over normalised text.

Normalisation strips zero-width characters, undoes leetspeak, collapses letters separated by
hyphens or spaces ("d-i-s-r-e-g-a-r-d"), and base64 blobs are decoded and scanned too.
Each pattern group fires at most once; the score is 1 - prod(1 - w) over fired groups.

Cost is linear in the prompt and small (a few ms at 8,000 tokens): the text is lowercased once
so no pattern needs IGNORECASE; NFKC and zero-width stripping run only on non-ASCII text; the
leetspeak pass runs only when a letter touches a leet digit somewhere; and each pattern runs
only when one of its anchors - literals, one of which every match contains - occurs in the
text (a plain substring test). tests/test_router_signals_text.py checks the anchors against
the patterns on the routing set and on every pattern's own examples.
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
_LEET_WORD = re.compile(r"\b(?=\w*[a-z])(?=\w*[013457])[a-z013457]{3,}\b")
_LEET_HINT = re.compile(r"[a-z][013457]|[013457][a-z]")  # any leet word has such a pair
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
# Anchors of each pattern above, in order: lowercase literals, one of which occurs in every
# text the pattern matches (so a pattern whose anchors are all absent cannot match).
_ANCHORS: list[tuple[str, ...]] = [
    ("ignore", "disregard", "forget", "override", "bypass", "skip"),
    ("ignorez", "ignora ", "vergiss", "忽略", "以前の指示を無視"),
    ("forget the", "previous rules don", "new instructions for the", "stop the review"),
    (
        "you are",
        "youre now",
        "you're now",
        "from now on",
        "you have two",
        "du bist jetzt",
        "你现在是",
    ),
    (
        "polic",
        "restriction",
        "without",
        "no rules",
        "ohne regeln",
        "没有任何限制",
        "uncensored",
        "unfiltered",
        "never refuses",
        "follow guidelines",
        "not have to abide",
        "broken free",
        "break the rules",
    ),
    ("do anything now", "stay dan", "stay stan", "dan,", "stan,", "aim,", "antigpt,", "devmode,"),
    ("your system", "your hidden", "your initial"),
    ("developer mode", "dev mode", "devmode", "admin_mode", "adminmode", "god mode", "jailbroken"),
    ("filter", "disable your", "safety rules"),
    ("system prompt", "hidden ", "initial instructions", "words above"),
    ("or refusals", "never ", "refuses", "mandatory warning"),
    ("system prompt]", "system override", "<!--", "if you are an", "note to ai", "ai assistant:"),
    ("developer", "authori", "you are cleared"),
    ("moderation", "filter", "safety", "replace numbers with letters", "instructions inside"),
    ("opposite", "harmful"),
    ("grandm",),
    ("if you were an ai", "hypothetically", "thought experiment"),
    ("pretend", "act as", "play a game", "in character", "roleplay", "role-play"),
    ("exact ", "step-by", "step by", "step-", "real working", "with root on"),
    ("linux terminal", "production", "bank"),
    (
        "meth",
        "napalm",
        "bomb",
        "explosiv",
        "sarin",
        "ricin",
        "nerve agent",
        "keylogger",
        "ransomware",
        "malware",
        "poison",
        "launder",
        "ghost gun",
        "firearm",
        "phish",
        "stalk",
        "hotwire",
        "lethal dose",
        "breathalyzer",
        "/etc/shadow",
        "stolen credit card",
        "harass",
        "minor",
        "unsupervised access",
        "kids online",
        "clone a credit",
        "kreditkarte klont",
        "入侵",
        "password",
    ),
]
assert len(_ANCHORS) == len(_PATTERNS)
# Patterns run on lowercased text, so they need no IGNORECASE (which defeats fast scanning).
_COMPILED = [
    (g, w, re.compile(p, re.S), anchors)
    for (g, w, p), anchors in zip(_PATTERNS, _ANCHORS, strict=True)
]
# "a poem titled 'Ignore All Previous Instructions'" quotes the phrase rather than using it.
_QUOTED_TITLE = re.compile(r"(?:titled|called|named|phrase|term|slogan)\s+['\"“‘]")
_HYPHENATED = re.compile(r"\b(?:[a-z]-){3,}[a-z]\b")
_SPACED_OUT = re.compile(r"\b(?:[a-z] ){3,}[a-z]\b")
_HYPHEN_HINT = re.compile(r"-[a-z]-")  # literal-led, so the engine scans fast
_SPACE_HINT = re.compile(r" [a-z] [a-z] ")


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _deleet(low: str) -> tuple[str, int]:
    """Translate leetspeak words; returns (text, number of leet words).

    A leet word (3+ characters of [a-z013457] with a letter and a leet digit, a whole word)
    always has a letter next to a leet digit, so only the words around such pairs are checked.
    """
    spans: list[tuple[int, int]] = []
    checked_until = 0  # hints come in order; one inside an already checked word is skipped
    for m in _LEET_HINT.finditer(low):
        start, end = m.start(), m.end()
        if start < checked_until:
            continue
        while start > 0 and _is_word_char(low[start - 1]):
            start -= 1
        while end < len(low) and _is_word_char(low[end]):
            end += 1
        checked_until = end
        if _LEET_WORD.fullmatch(low, start, end):
            spans.append((start, end))
    if not spans:
        return low, 0
    out, pos = [], 0
    for start, end in spans:
        out.append(low[pos:start])
        out.append(low[start:end].translate(_LEET))
        pos = end
    out.append(low[pos:])
    return "".join(out), len(spans)


def normalise(text: str) -> tuple[str, dict[str, Any]]:
    """Return (normalised lowercase text, obfuscation stats)."""
    stripped = text
    if not text.isascii():  # NFKC and zero-width characters only concern non-ASCII text
        if not unicodedata.is_normalized("NFKC", stripped):
            stripped = unicodedata.normalize("NFKC", stripped)
        if _ZERO_WIDTH.search(stripped):
            stripped = _ZERO_WIDTH.sub("", stripped)
    n_zw = len(text) - len(stripped)
    low, n_leet = _deleet(stripped.lower())
    if _HYPHEN_HINT.search(low):
        low = _HYPHENATED.sub(lambda m: m.group().replace("-", ""), low)
    if _SPACE_HINT.search(low):
        low = _SPACED_OUT.sub(lambda m: m.group().replace(" ", ""), low)
    ratio = n_leet / max(1, len(stripped.split())) if n_leet else 0.0
    return low, {"zero_width": n_zw, "leet_ratio": ratio}


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
        hay = "\n".join([norm, *(d.lower() for d in decoded)])
        fired: dict[str, float] = {}
        for group, weight, rx, anchors in _COMPILED:
            if not any(a in hay for a in anchors):
                continue
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
            history = ctx.get("history", []) if hasattr(ctx, "get") else []
            text = "\n".join([*map(str, history or []), text])
        conf, fired, stats = self.score(text)
        return SignalResult(
            name=self.name,
            matched=conf >= self.threshold,
            confidence=conf,
            value="jailbreak" if conf >= self.threshold else None,
            details={"patterns": fired, "threshold": self.threshold, **stats},
        )
