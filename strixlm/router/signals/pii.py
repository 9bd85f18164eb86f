"""Regex + checksum PII detection (email, phone, card, SSN, IBAN, IP, API key, person, address)."""

from __future__ import annotations

import bisect
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from strixlm.router.config_signals import PIISignal
from strixlm.router.signals.base import Signal, SignalResult


@dataclass(frozen=True)
class PIISpan:
    start: int
    end: int
    type: str
    text: str


# Placeholder / documentation values that are never personal data.
_EXAMPLE_EMAIL_DOMAINS = re.compile(
    r"@(?:[\w-]+\.)*(?:example\.(?:com|org|net)|test|invalid|localhost)$", re.I
)
_PLACEHOLDER_ADDRESSES = re.compile(
    r"123 main st|221b baker st|742 evergreen terrace|1600 pennsylvania ave|anytown", re.I
)
_KNOWN_BAD_SSNS = {"078051120", "219099999", "123456789"}

_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
_SSN = re.compile(r"(?<![\w-])(\d{3})[- ](\d{2})[- ](\d{4})(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]|\.\d)")
_VERSION_CTX = re.compile(r"version|upgrad|downgrad|release|librar|package|\bv\d|pin\b", re.I)
_PHONE = re.compile(
    r"(?<![\w+-])(?:"
    r"\+\d{1,3}[ .-]?\(?\d{1,4}\)?(?:[ .-]?\d{2,4}){1,4}"  # international
    r"|(?:1[ .-]?)?\(?[2-9]\d{2}\)?[ .-]?\d{3}[ .-]?\d{4}"  # NANP
    r"|0\d{1,4}(?:[ .-]?\d{2,4}){2,4}"  # national trunk prefix (FR, JP, UK, ...)
    r"|1[3-9]\d[ -]?\d{4}[ -]?\d{4}"  # CN mobile
    r")(?![\w-])"
)
_API_KEY = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})\b"
)
_STREET = (
    r"(?:Street|St|Avenue|Ave|Road|Rd|Drive|Dr|Lane|Ln|Boulevard|Blvd|Court|Ct|Way|Place|Pl"
    r"|Terrace|Circle|Cir|Highway|Hwy|Parkway|Pkwy|Square|Sq|Close|Crescent)"
)
_ADDRESS = re.compile(
    rf"\b\d{{1,5}}[A-Za-z]?\s+(?:[A-Z][a-z]+\s+){{1,3}}{_STREET}\b\.?"
    r"(?:,?\s*(?:Apt|Suite|Unit|#)\s*\w+)?"
    r"(?:,\s*[A-Z][a-z]+(?:\s[A-Z][a-z]+)?)?"  # city
    r"(?:,?\s*(?:[A-Z]{2}\s+\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2}))?"  # US / UK
)
_PERSON = re.compile(
    r"\b(?:(?:Dr|Mr|Mrs|Ms|Prof)\.?\s+|(?:Tenant|Patient|Client|Owner|Principal|guest|"
    r"[Aa]ccount holder|Inhaber|[Nn]ame):?\s+)([A-Z][a-z]+(?:\s+[A-Z][a-z]+){1,2})"
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_iin_ok(digits: str) -> bool:
    n = len(digits)
    if digits[0] == "4":
        return n in (16, 19)
    p2, p4 = int(digits[:2]), int(digits[:4])
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649:
        return 16 <= n <= 19
    if 3528 <= p4 <= 3589 or p2 == 36 or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    return False


def ssn_ok(area: str, group: str, serial: str) -> bool:
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return area + group + serial not in _KNOWN_BAD_SSNS


def iban_ok(iban: str) -> bool:
    if not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def redact(text: str, spans: list[PIISpan] | list[dict[str, Any]]) -> str:
    """Replace each span with `[REDACTED:<TYPE>]` (spans may be PIISpan or their dict form)."""
    items = [
        (s["start"], s["end"], s["type"]) if isinstance(s, dict) else (s.start, s.end, s.type)
        for s in spans
    ]
    out, pos = [], 0
    for start, end, typ in sorted(items):
        if start < pos:
            continue
        out.append(text[pos:start])
        out.append(f"[REDACTED:{typ.upper()}]")
        pos = end
    out.append(text[pos:])
    return "".join(out)


class PIIDetector(Signal):
    """Built from a `PIISignal`. Validators (luhn, iban_checksum, ssn_area) apply when listed."""

    def __init__(self, cfg: PIISignal) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.types = [t for t in cfg.types if t not in set(cfg.allow_types)]
        self.allow_values = {self._norm(v) for v in cfg.allow_values}
        self.validators = set(cfg.validators)

    @staticmethod
    def _norm(v: str) -> str:
        return re.sub(r"[\s\-().]", "", v).lower()

    def find(self, text: str) -> list[PIISpan]:
        spans: list[PIISpan] = []
        # Taken spans never overlap, so sorted starts and ends find a clash by bisection
        # (a linear scan per candidate made prompts full of candidates quadratic).
        starts: list[int] = []
        ends: list[int] = []

        def add(start: int, end: int, typ: str) -> None:
            i = bisect.bisect_right(starts, start)
            if (i > 0 and ends[i - 1] > start) or (i < len(starts) and starts[i] < end):
                return
            value = text[start:end]
            if self._norm(value) in self.allow_values:
                return
            starts.insert(i, start)
            ends.insert(i, end)
            spans.append(PIISpan(start, end, typ, value))

        for typ in (
            "api_key",
            "email",
            "iban",
            "credit_card",
            "ssn",
            "ip_address",
            "phone",
            "address",
            "person",
        ):
            if typ in self.types:
                getattr(self, f"_find_{typ}")(text, add)
        return sorted(spans, key=lambda s: s.start)

    def _find_api_key(self, text: str, add) -> None:
        for m in _API_KEY.finditer(text):
            add(m.start(), m.end(), "api_key")

    def _find_email(self, text: str, add) -> None:
        for m in _EMAIL.finditer(text):
            if not _EXAMPLE_EMAIL_DOMAINS.search(m.group()):
                add(m.start(), m.end(), "email")

    def _find_iban(self, text: str, add) -> None:
        for m in _IBAN.finditer(text):
            raw = m.group()
            # The pattern may swallow a trailing group: shrink until the checksum holds.
            while raw:
                compact = raw.replace(" ", "")
                ok = (
                    iban_ok(compact)
                    if "iban_checksum" in self.validators
                    else (15 <= len(compact) <= 34)
                )
                if ok:
                    add(m.start(), m.start() + len(raw), "iban")
                    break
                raw = raw[:-1].rstrip()
                if len(raw.replace(" ", "")) < 15:
                    break

    def _find_credit_card(self, text: str, add) -> None:
        for m in _CARD.finditer(text):
            digits = re.sub(r"\D", "", m.group())
            if not 13 <= len(digits) <= 19 or not card_iin_ok(digits):
                continue
            if "luhn" in self.validators and not luhn_ok(digits):
                continue
            add(m.start(), m.end(), "credit_card")

    def _find_ssn(self, text: str, add) -> None:
        for m in _SSN.finditer(text):
            if "ssn_area" in self.validators and not ssn_ok(*m.groups()):
                continue
            add(m.start(), m.end(), "ssn")

    def _find_ip_address(self, text: str, add) -> None:
        for m in _IPV4.finditer(text):
            try:
                ip = ipaddress.IPv4Address(m.group())
            except ValueError:
                continue
            doc = any(
                ip in ipaddress.IPv4Network(n)
                for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
            )
            if doc or ip.is_loopback or ip.is_unspecified or ip.is_multicast:
                continue
            if _VERSION_CTX.search(text[max(0, m.start() - 60) : m.end() + 40]):
                continue
            add(m.start(), m.end(), "ip_address")

    def _find_phone(self, text: str, add) -> None:
        for m in _PHONE.finditer(text):
            n = sum(c.isdigit() for c in m.group())
            before, after = text[max(0, m.start() - 2) : m.start()], text[m.end() : m.end() + 2]
            if re.search(r"\d[ -]?$", before) or re.match(r"[ -]?\d", after):
                continue  # part of a longer digit run (e.g. a rejected card number)
            if 10 <= n <= 15:
                add(m.start(), m.end(), "phone")

    def _find_address(self, text: str, add) -> None:
        for m in _ADDRESS.finditer(text):
            ctx = text[m.start() : m.end() + 20]
            if not _PLACEHOLDER_ADDRESSES.search(ctx):
                add(m.start(), m.end(), "address")

    def _find_person(self, text: str, add) -> None:
        for m in _PERSON.finditer(text):
            if m.group(1).lower() not in ("john doe", "jane doe"):
                add(m.start(1), m.end(1), "person")

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        spans = self.find(text)
        types = sorted({s.type for s in spans})
        # Structured/validated types are strong evidence; heuristic ones (person) weaker.
        weights = {"person": 0.4, "address": 0.7, "phone": 0.8, "ip_address": 0.6}
        conf = max((weights.get(s.type, 0.95) for s in spans), default=0.0)
        return SignalResult(
            name=self.name,
            matched=conf >= self.cfg.threshold,
            confidence=conf,
            value=types[0] if types else None,
            details={
                "types": types,
                "spans": [{"start": s.start, "end": s.end, "type": s.type} for s in spans],
            },
        )
