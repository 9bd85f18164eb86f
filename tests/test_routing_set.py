"""Sanity checks for the labelled routing set used by the semantic router (issue 4)."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "strixlm" / "router" / "data" / "routing_set.jsonl"

DOMAINS = {"math", "code", "science", "health", "law", "business", "creative_writing", "general"}
DECISIONS = {
    "math",
    "code",
    "science",
    "health",
    "law",
    "business",
    "creative",
    "general",
    "block_jailbreak",
    "redact_pii",
}
DOMAIN_TO_DECISION = {d: d for d in DOMAINS} | {"creative_writing": "creative"}
LANGS = {"fr", "es", "de", "zh", "ja"}

CARD_RE = re.compile(r"(?<![\d\w])(?:\d[ -]?){12,18}\d(?![\d\w])")
IBAN_RE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
SSN_RE = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "")
    s = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in s)) % 97 == 1


def card_candidates(text: str) -> list[str]:
    return [m.group(0) for m in CARD_RE.finditer(text)]


@pytest.fixture(scope="module")
def rows():
    with DATA.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _tagged(rows, tag):
    return [r for r in rows if tag in r["tags"]]


def test_fields_valid(rows):
    for r in rows:
        assert set(r) == {"id", "prompt", "domain", "expected_decision", "tags"}, r
        assert isinstance(r["id"], str) and r["id"]
        assert isinstance(r["prompt"], str) and r["prompt"].strip()
        assert r["domain"] in DOMAINS, r
        assert r["expected_decision"] in DECISIONS, r
        assert isinstance(r["tags"], list) and all(isinstance(t, str) for t in r["tags"])
        if r["expected_decision"] not in ("block_jailbreak", "redact_pii"):
            assert r["expected_decision"] == DOMAIN_TO_DECISION[r["domain"]], r


def test_unique_ids_and_prompts(rows):
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    prompts = [r["prompt"] for r in rows]
    assert len(prompts) == len(set(prompts))


def test_counts(rows):
    assert len(rows) >= 340
    by_domain = Counter(r["domain"] for r in rows)
    for d in DOMAINS - {"general"}:
        assert by_domain[d] >= 35, (d, by_domain[d])
    assert by_domain["general"] >= 10
    # prompts routed by domain (not jailbreak/pii) also cover each domain well
    routed = Counter(r["expected_decision"] for r in rows)
    for d in DECISIONS - {"general", "block_jailbreak", "redact_pii"}:
        assert routed[d] >= 30, (d, routed[d])

    jail = [r for r in rows if r["expected_decision"] == "block_jailbreak"]
    assert len(jail) >= 30
    assert all("jailbreak" in r["tags"] for r in jail)
    assert all(r["expected_decision"] == "block_jailbreak" for r in _tagged(rows, "jailbreak"))

    jb_look = _tagged(rows, "jailbreak_lookalike")
    assert len(jb_look) >= 15
    assert all(r["expected_decision"] == DOMAIN_TO_DECISION[r["domain"]] for r in jb_look)
    assert all("benign_lookalike" in r["tags"] for r in jb_look)

    pii = [r for r in rows if r["expected_decision"] == "redact_pii"]
    assert len(pii) >= 30
    for r in pii:
        assert any(t.startswith("pii:") for t in r["tags"]), r
    pii_types = {t for r in pii for t in r["tags"] if t.startswith("pii:")}
    required = {"pii:email", "pii:phone", "pii:credit_card", "pii:ssn", "pii:iban", "pii:address"}
    assert required <= pii_types
    assert all(
        r["expected_decision"] == "redact_pii"
        for r in rows
        for t in r["tags"]
        if t.startswith("pii:")
    )

    pii_look = _tagged(rows, "pii_lookalike")
    assert len(pii_look) >= 15
    assert all(r["expected_decision"] == DOMAIN_TO_DECISION[r["domain"]] for r in pii_look)

    non_en = [r for r in rows if any(t.startswith("non_english:") for t in r["tags"])]
    assert len(non_en) >= 10
    langs = {t.split(":", 1)[1] for r in non_en for t in r["tags"] if t.startswith("non_english:")}
    assert LANGS <= langs, langs
    assert len({r["domain"] for r in non_en}) >= 5


def test_credit_cards_pass_luhn(rows):
    cc_rows = _tagged(rows, "pii:credit_card")
    assert len(cc_rows) >= 5
    for r in cc_rows:
        cands = card_candidates(r["prompt"])
        assert cands, r["id"]
        assert all(luhn_ok(c) for c in cands), (r["id"], cands)


def test_card_lookalikes_fail_luhn(rows):
    look = _tagged(rows, "lookalike:credit_card")
    assert len(look) >= 2
    for r in look:
        cands = card_candidates(r["prompt"])
        assert cands, r["id"]
        assert not any(luhn_ok(c) for c in cands), (r["id"], cands)


def test_no_luhn_valid_numbers_outside_pii_rows(rows):
    for r in rows:
        if r["expected_decision"] == "redact_pii":
            continue
        for c in card_candidates(r["prompt"]):
            assert not luhn_ok(c), (r["id"], c)


def test_ibans_and_ssns_well_formed(rows):
    for r in _tagged(rows, "pii:iban"):
        ibans = IBAN_RE.findall(r["prompt"])
        assert ibans, r["id"]
        assert all(iban_ok(i) for i in ibans), (r["id"], ibans)
    for r in _tagged(rows, "pii:ssn"):
        assert SSN_RE.search(r["prompt"]), r["id"]
