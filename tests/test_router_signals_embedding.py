"""Embedding-based signals (embedding, domain, complexity, fact_check with embeddings) and the
registry: build_signals from a config, one embedding per request, long prompts not truncated."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from strixlm.router import embedder as emb_mod

if importlib.util.find_spec(emb_mod.PACKAGE) is None:
    pytest.skip(f"model package missing: {emb_mod.INSTALL_HINT}", allow_module_level=True)
pytest.importorskip("onnxruntime")

from strixlm.router.config import load_config, validate_data  # noqa: E402
from strixlm.router.config_signals import (  # noqa: E402
    ComplexitySignal,
    DomainSignal,
    EmbeddingSignal,
    FactCheckSignal,
)
from strixlm.router.embed_fast import get_fast_embedder  # noqa: E402
from strixlm.router.signals.complexity import ComplexityClassifier  # noqa: E402
from strixlm.router.signals.domain import DomainClassifier, ExamplesError  # noqa: E402
from strixlm.router.signals.embedding import EmbeddingMatcher  # noqa: E402
from strixlm.router.signals.fact_check import FactCheckDetector  # noqa: E402
from strixlm.router.signals.registry import (  # noqa: E402
    SignalContext,
    build_signals,
    extract_all,
)

ROUTER = Path(__file__).resolve().parents[1] / "strixlm" / "router"
ROWS = [json.loads(x) for x in (ROUTER / "data" / "routing_set.jsonl").read_text().splitlines()]
BY_ID = {r["id"]: r for r in ROWS}
DOMAIN_ROWS = [r for r in ROWS if r["expected_decision"] not in ("block_jailbreak", "redact_pii")]
CREATIVE = ["write a poem", "write a short story", "compose song lyrics"]


@pytest.fixture(scope="module")
def emb():
    return get_fast_embedder()


class CountingEmbedder:
    """The real fast embedder, counting how often a request embedding is computed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0

    def embed(self, texts):
        return self.inner.embed(texts)

    def token_ids(self, text):
        return self.inner.token_ids(text)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)

    def embed_ids(self, ids):
        self.calls += 1
        return self.inner.embed_ids(ids)


def base_config(signals: list[dict]) -> dict:
    return {
        "backends": [{"name": "b", "base_url": "http://127.0.0.1:9/v1", "models": ["m"]}],
        "signals": signals,
        "decisions": [{"name": "d", "models": [{"model": "m"}]}],
    }


# --- embedding --------------------------------------------------------------------------------


def test_embedding_signal_on_routing_set(emb):
    sig = EmbeddingMatcher(
        EmbeddingSignal(name="creative", type="embedding", candidates=CREATIVE, threshold=0.4), emb
    )
    for rid in ["creative_writing-001", "creative_writing-010", "creative_writing-012"]:
        res = sig.evaluate(BY_ID[rid]["prompt"])
        assert res.matched and res.value in CREATIVE, (rid, res)
    others = [r for r in DOMAIN_ROWS if r["domain"] not in ("creative_writing", "general")]
    hits = [r["id"] for r in others if sig.evaluate(r["prompt"]).matched]
    assert not hits, hits


def test_embedding_mean_aggregation(emb):
    mx = EmbeddingSignal(name="e", type="embedding", candidates=CREATIVE, aggregation="max")
    mean = mx.model_copy(update={"aggregation": "mean"})
    text = BY_ID["creative_writing-012"]["prompt"]
    r_max, r_mean = (
        EmbeddingMatcher(mx, emb).evaluate(text),
        EmbeddingMatcher(mean, emb).evaluate(text),
    )
    sims = list(r_max.details["similarities"].values())
    assert r_max.confidence == pytest.approx(max(sims), abs=1e-4)
    assert r_mean.confidence == pytest.approx(float(np.mean(sims)), abs=1e-4)


# --- domain -----------------------------------------------------------------------------------


def split_examples() -> tuple[dict[str, list[str]], list[dict]]:
    train = [r for i, r in enumerate(DOMAIN_ROWS) if i % 2 == 0]
    test = [r for i, r in enumerate(DOMAIN_ROWS) if i % 2 == 1]
    examples: dict[str, list[str]] = {}
    for r in train:
        examples.setdefault(r["domain"], []).append(r["prompt"])
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    return examples, test


@pytest.mark.parametrize("classifier,floor", [("centroid", 0.65), ("logistic", 0.65)])
def test_domain_accuracy_on_disjoint_split(emb, classifier, floor):
    examples, test = split_examples()
    cfg = DomainSignal(name="domain", type="domain", examples=examples, classifier=classifier)
    sig = DomainClassifier(cfg, emb)
    results = [sig.evaluate(r["prompt"]) for r in test]
    acc = float(np.mean([res.value == r["domain"] for res, r in zip(results, test, strict=True)]))
    print(f"\n{classifier} domain accuracy on {len(test)} held-out routing-set rows: {acc:.3f}")
    assert acc >= floor
    for res in results:
        assert 0.0 <= res.confidence <= 1.0 and res.value in examples
        assert res.matched == (res.confidence >= cfg.threshold)


def test_domain_examples_from_files(emb, tmp_path):
    (tmp_path / "ex.jsonl").write_text(
        "\n".join(
            json.dumps({"text": t, "label": lab})
            for lab, ts in {
                "math": ["solve 2x=4", "integrate x^2"],
                "chat": ["hi", "hello"],
            }.items()
            for t in ts
        )
    )
    (tmp_path / "ex.yaml").write_text("math: [solve 2x=4, integrate x^2]\nchat: [hi, hello]\n")
    for name in ("ex.jsonl", "ex.yaml"):
        cfg = DomainSignal(name="d", type="domain", examples_path=name)
        sig = DomainClassifier(cfg, emb, base_dir=tmp_path)
        assert sig.labels == ["chat", "math"]
        assert sig.evaluate("solve for y: 3y = 9").value == "math"
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(ExamplesError, match=r"bad.jsonl:1: needs string 'text' and 'label'"):
        DomainClassifier(
            DomainSignal(name="d", type="domain", examples_path="bad.jsonl"), emb, tmp_path
        )
    with pytest.raises(ExamplesError, match="cannot read"):
        DomainClassifier(
            DomainSignal(name="d", type="domain", examples_path="no.yaml"), emb, tmp_path
        )


# --- complexity and fact_check ----------------------------------------------------------------


def test_complexity_hard_and_easy(emb):
    cfg = ComplexitySignal(
        name="complexity",
        type="complexity",
        hard_examples=[
            "prove that there are infinitely many primes",
            "design a distributed lock service that survives network partitions",
            "derive the time complexity of this recursive algorithm and prove the bound",
        ],
        easy_examples=["what is 2 + 2", "say hello", "tell me a joke", "what day is it today"],
    )
    sig = ComplexityClassifier(cfg, emb)
    for rid in ["math-006", "math-020"]:
        assert sig.evaluate(BY_ID[rid]["prompt"]).value == "hard", rid
    for rid in ["general-001", "general-002", "general-009", "general-020"]:
        res = sig.evaluate(BY_ID[rid]["prompt"])
        assert res.value == "easy" and res.matched and res.confidence > 0.5, rid
    # A margin shifts the boundary: a large one makes everything easy.
    strict = ComplexityClassifier(cfg.model_copy(update={"margin": 0.5}), emb)
    assert strict.evaluate(BY_ID["math-006"]["prompt"]).value == "easy"


def test_fact_check_embedding_method(emb):
    sig = FactCheckDetector(FactCheckSignal(name="f", type="fact_check", method="embedding"), emb)
    for rid in ["general-019", "general-015", "health-014"]:
        res = sig.evaluate(BY_ID[rid]["prompt"])
        assert res.matched and "embedding_score" in res.details, (rid, res)
    for rid in ["creative_writing-001", "code-020", "math-002", "general-001"]:
        assert not sig.evaluate(BY_ID[rid]["prompt"]).matched, rid


# --- registry ---------------------------------------------------------------------------------


def test_build_signals_from_starter(emb):
    cfg = load_config(ROUTER / "starter.yaml")
    signals = build_signals(cfg, emb)
    assert list(signals) == [s.name for s in cfg.signals]
    ctx = SignalContext.from_text("solve for x: 2x + 3 = 7, it's urgent", emb)
    res = extract_all(signals, ctx)
    assert set(res) == set(signals)
    assert res["urgent"].matched and res["domain"].value == "math"
    assert res["language"].value == "en" and not res["long_context"].matched
    assert "error" not in str({k: v.details for k, v in res.items()})


def test_embedding_computed_once_per_request(emb):
    counting = CountingEmbedder(emb)
    cfg = validate_data(
        base_config(
            [
                {"name": "e1", "type": "embedding", "candidates": CREATIVE},
                {
                    "name": "e2",
                    "type": "embedding",
                    "candidates": ["fix my code"],
                    "aggregation": "mean",
                },
                {"name": "dom", "type": "domain", "examples": {"a": ["math"], "b": ["poetry"]}},
                {
                    "name": "cx",
                    "type": "complexity",
                    "hard_examples": ["prove"],
                    "easy_examples": ["hi"],
                },
                {"name": "fc", "type": "fact_check", "method": "embedding"},
                {"name": "ctx", "type": "context", "min_tokens": 1},
            ]
        )
    )
    signals = build_signals(cfg, counting)
    assert counting.calls == 0
    ctx = SignalContext.from_text("Write a poem about the sea", counting)
    res = extract_all(signals, ctx)
    assert counting.calls == 1 and all(not r.details.get("error") for r in res.values())
    extract_all(signals, ctx)
    assert counting.calls == 1
    extract_all(signals, SignalContext.from_text("another request", counting))
    assert counting.calls == 2
    assert res["ctx"].details == {
        "tokens": 6,
        "method": "tokenizer",
        "min_tokens": 1,
        "max_tokens": None,
    }


def test_long_prompt_planted_phrase_moves_embedding_signal(emb):
    law = " ".join(r["prompt"] for r in DOMAIN_ROWS if r["domain"] == "law")
    words = law.split()
    base = " ".join(words[i % len(words)] for i in range(6000))
    assert emb.count_tokens(base) > 7000
    sig = EmbeddingMatcher(EmbeddingSignal(name="e", type="embedding", candidates=CREATIVE), emb)
    planted = base + " Now write a poem about the sea and compose song lyrics about it."
    before = sig.evaluate(base, SignalContext.from_text(base, emb)).confidence
    after = sig.evaluate(planted, SignalContext.from_text(planted, emb)).confidence
    assert after > before + 1e-3, (before, after)


def test_unavailable_jailbreak_method_is_a_clear_error(emb):
    cfg = validate_data(base_config([{"name": "jb", "type": "jailbreak", "method": "classifier"}]))
    with pytest.raises(ValueError, match="signal 'jb': jailbreak method 'classifier'"):
        build_signals(cfg, emb)


class FailingEmbedder(CountingEmbedder):
    """The real embedder for building signals, failing at request time (say, out of memory)."""

    def embed_ids(self, ids):
        raise RuntimeError("embedding backend failed")


def test_failing_extractor_does_not_fail_the_request(emb):
    cfg = validate_data(
        base_config(
            [
                {"name": "e", "type": "embedding", "candidates": ["x"]},
                {"name": "kw", "type": "keyword", "keywords": ["hi"]},
            ]
        )
    )
    failing = FailingEmbedder(emb)
    signals = build_signals(cfg, failing)
    res = extract_all(signals, SignalContext.from_text("hi there", failing))
    assert not res["e"].matched and "RuntimeError" in res["e"].details["error"]
    assert res["kw"].matched  # the other signals still ran
