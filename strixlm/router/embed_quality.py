"""Quality cost of the fast embedder against the plain full-model embedding (``Embedder``).

Measured on the routing set (``data/routing_set.jsonl``), split by row parity: even rows
train (domain centroids, and the static table's alignment, refitted here without the odd
rows so that nothing is tested on what it was fitted on), odd rows test.

* ``routing_set``: cosine of fast vs. full embeddings over every prompt of the set.
* ``domain``: nearest-centroid domain accuracy on the test split's domain rows, centroids from
  the train split, with each embedder; and how often the two predict the same label.
* ``long_500`` / ``long_8000``: prompts made of test-split prompts of one domain, cut to
  ~500 and ~8,000 tokens (3 and 1 per domain): cosine of fast vs. full (chunked) embeddings,
  domain accuracy of each, and label agreement.

Takes a few minutes on 2 cores (the full model on ~80k tokens, plus refitting the table).
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "routing_set.jsonl"
ROUTED_ELSEWHERE = ("block_jailbreak", "redact_pii")


def _rows() -> list[dict]:
    return [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines() if x.strip()]


def _np(x) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float32)


def _centroids(emb: np.ndarray, labels: list[str]) -> tuple[list[str], np.ndarray]:
    names = sorted(set(labels))
    cents = np.stack([emb[[i for i, lab in enumerate(labels) if lab == n]].mean(0) for n in names])
    return names, cents / np.linalg.norm(cents, axis=1, keepdims=True)


def _predict(emb: np.ndarray, names: list[str], cents: np.ndarray) -> list[str]:
    return [names[i] for i in (emb @ cents.T).argmax(1)]


def _rate(a: list[str], b: list[str]) -> float:
    """Fraction of positions where the two label lists agree."""
    return round(float(np.mean([x == y for x, y in zip(a, b, strict=True)])), 4)


def _cos_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    cos = (a * b).sum(1)
    return {
        "mean": round(float(cos.mean()), 4),
        "p5": round(float(np.percentile(cos, 5)), 4),
        "min": round(float(cos.min()), 4),
    }


def _long_prompts(by_domain: dict[str, list[str]], n_tokens: int, per_domain: int, count, seed):
    rnd = random.Random(seed)
    out = []
    for domain in sorted(by_domain):
        for _ in range(per_domain):
            parts, total = [], 0
            while total < n_tokens:
                p = rnd.choice(by_domain[domain])
                parts.append(p)
                total += count(p) + 1
            out.append((domain, " ".join(parts)))
    return out


def heldout_embedder(fast, reference, train_texts: list[str]):
    """A copy of ``fast`` whose static table's alignment was fitted on ``train_texts`` only."""
    from strixlm.router.embed_static import build_table, distillation_texts

    clone = copy.copy(fast)
    clone.table = build_table(reference, distillation_texts(train_texts)).astype(np.float32)
    return clone


def measure_quality(fast, reference=None) -> dict:
    from strixlm.router.embedder import get_embedder

    reference = reference or get_embedder()
    rows = _rows()
    train = [r for i, r in enumerate(rows) if i % 2 == 0]
    test = [r for i, r in enumerate(rows) if i % 2 == 1]
    fast_h = heldout_embedder(fast, reference, [r["prompt"] for r in train])
    out: dict = {"full_tokens": fast.full_tokens, "head_tokens": fast.head_tokens}

    prompts = [r["prompt"] for r in rows]
    ref_all = _np(reference.embed(prompts))
    fast_all = fast_h.embed(prompts)
    fully = sum(len(fast.token_ids(p)) <= fast.full_tokens for p in prompts)
    out["routing_set"] = {
        "prompts": len(prompts),
        "embedded_fully": fully,
        "cosine": _cos_stats(fast_all, ref_all),
    }

    dom_train = [r for r in train if r["expected_decision"] not in ROUTED_ELSEWHERE]
    dom_test = [r for r in test if r["expected_decision"] not in ROUTED_ELSEWHERE]
    labels = [r["domain"] for r in dom_train]
    truth = [r["domain"] for r in dom_test]
    models = {}
    for name, emb in (("full", reference), ("fast", fast_h)):
        train_emb = _np(emb.embed([r["prompt"] for r in dom_train]))
        models[name] = _centroids(train_emb, labels)
    idx = {r["id"]: i for i, r in enumerate(rows)}
    test_idx = [idx[r["id"]] for r in dom_test]
    pred_full = _predict(ref_all[test_idx], *models["full"])
    pred_fast = _predict(fast_all[test_idx], *models["fast"])
    out["domain"] = {
        "test_rows": len(dom_test),
        "accuracy_full": _rate(pred_full, truth),
        "accuracy_fast": _rate(pred_fast, truth),
        "agreement": _rate(pred_full, pred_fast),
    }

    by_domain: dict[str, list[str]] = {}
    for r in dom_test:
        by_domain.setdefault(r["domain"], []).append(r["prompt"])
    for n_tokens, per_domain in ((500, 3), (8000, 1)):
        longs = _long_prompts(by_domain, n_tokens, per_domain, fast.count_tokens, n_tokens)
        texts = [t for _, t in longs]
        ref_long = np.stack([_np(reference.embed_one(t)) for t in texts])
        fast_long = fast_h.embed(texts)
        truth_long = [d for d, _ in longs]
        pf = _predict(ref_long, *models["full"])
        pq = _predict(fast_long, *models["fast"])
        out[f"long_{n_tokens}"] = {
            "prompts": len(texts),
            "tokens_mean": round(float(np.mean([fast.count_tokens(t) for t in texts])), 1),
            "cosine": _cos_stats(fast_long, ref_long),
            "accuracy_full": _rate(pf, truth_long),
            "accuracy_fast": _rate(pq, truth_long),
            "agreement": _rate(pf, pq),
        }
    return out


def print_quality(q: dict) -> None:
    print(
        f"\nquality vs the full-model embedding (full_tokens {q['full_tokens']}, "
        f"head_tokens {q['head_tokens']}; static table refitted without the test split)"
    )
    rs = q["routing_set"]
    c = rs["cosine"]
    print(
        f"  routing set: {rs['prompts']} prompts ({rs['embedded_fully']} embedded fully), "
        f"cosine mean {c['mean']} p5 {c['p5']} min {c['min']}"
    )
    d = q["domain"]
    print(
        f"  domain (centroids, {d['test_rows']} held-out rows): accuracy full {d['accuracy_full']}"
        f" fast {d['accuracy_fast']}, same label {d['agreement']}"
    )
    for key in ("long_500", "long_8000"):
        r = q[key]
        c = r["cosine"]
        print(
            f"  {key} ({r['prompts']} prompts, ~{r['tokens_mean']:.0f} tokens): cosine mean "
            f"{c['mean']} min {c['min']}; domain accuracy full {r['accuracy_full']} fast "
            f"{r['accuracy_fast']}, same label {r['agreement']}"
        )
