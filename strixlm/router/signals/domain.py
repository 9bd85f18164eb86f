"""Domain signal: a classifier over prompt embeddings, trained from labelled examples.

``centroid``: each label's examples are averaged into a unit centroid; label probabilities are
a softmax of the cosine to each centroid divided by a temperature, chosen at build time from a
grid by leave-one-out log-likelihood (smoothed: 10% uniform) on the examples themselves
(each example scored against centroids that exclude it). ``logistic``: multinomial logistic
regression on the embeddings, L2-regularized, fitted with L-BFGS. Either way the value is the
most probable label and the signal matches when its probability reaches ``threshold``.

Examples come inline or from ``examples_path`` (relative to the config's folder): JSONL rows
with ``text`` (or ``prompt``) and ``label`` (or ``domain``), or YAML mapping label -> texts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from strixlm.router.config_signals import DomainSignal
from strixlm.router.signals.base import Signal, SignalResult
from strixlm.router.signals.embedding import embed_texts, prompt_embedding

TEMPERATURES = (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.15, 0.2)
L2 = 1e-3


class ExamplesError(ValueError):
    """The examples file is missing or malformed; the message names the file and the problem."""


def load_examples(path: Path) -> dict[str, list[str]]:
    """Label -> texts from a JSONL or YAML file."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ExamplesError(f"{path}: cannot read examples: {e.strerror or e}") from None
    out: dict[str, list[str]] = {}
    if path.suffix in (".jsonl", ".json"):
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text = row.get("text", row.get("prompt"))
                label = row.get("label", row.get("domain"))
            except (json.JSONDecodeError, AttributeError):
                raise ExamplesError(f"{path}:{n}: not a JSON object") from None
            if not isinstance(text, str) or not isinstance(label, str):
                raise ExamplesError(f"{path}:{n}: needs string 'text' and 'label' fields")
            out.setdefault(label, []).append(text)
    else:
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ExamplesError(f"{path}: invalid YAML: {e}") from None
        if not isinstance(data, dict) or not all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in data.values()
        ):
            raise ExamplesError(f"{path}: expected a mapping of label -> list of texts")
        out = {str(k): list(v) for k, v in data.items()}
    out = {k: v for k, v in out.items() if v}
    if len(out) < 2:
        raise ExamplesError(f"{path}: need examples for at least two labels (got {len(out)})")
    return out


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class CentroidModel:
    def __init__(self, emb: np.ndarray, y: np.ndarray, n_labels: int) -> None:
        sums = np.zeros((n_labels, emb.shape[1]))
        np.add.at(sums, y, emb)
        counts = np.bincount(y, minlength=n_labels).astype(np.float64)
        self.centroids = _unit(sums).astype(np.float32)
        self.temperature = self._calibrate(emb, y, sums, counts)

    @staticmethod
    def _calibrate(emb, y, sums, counts) -> float:
        # Leave-one-out: remove each example from its own label's centroid before scoring it.
        sims = emb @ _unit(sums).T
        own = sums[y] - emb
        has_rest = counts[y] > 1
        sims[np.arange(len(y)), y] = np.where(
            has_rest, np.einsum("ij,ij->i", emb, _unit(own)), sims[np.arange(len(y)), y]
        )
        # Smoothed likelihood: with a handful of examples every one may be classified right,
        # and the raw likelihood would then always pick the sharpest temperature.
        n_labels = sims.shape[1]
        best, best_nll = TEMPERATURES[0], np.inf
        for t in TEMPERATURES:
            p = _softmax(sims / t)[np.arange(len(y)), y]
            nll = -np.log(0.9 * p + 0.1 / n_labels).mean()
            if nll < best_nll:
                best, best_nll = t, nll
        return best

    def probs(self, vec: np.ndarray) -> np.ndarray:
        return _softmax(self.centroids @ vec / self.temperature)


class LogisticModel:
    def __init__(self, emb: np.ndarray, y: np.ndarray, n_labels: int) -> None:
        import torch

        x = torch.from_numpy(emb.astype(np.float32))
        target = torch.from_numpy(y.astype(np.int64))
        w = torch.zeros((n_labels, x.shape[1]), requires_grad=True)
        b = torch.zeros(n_labels, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ w.T * 10.0 + b, target)
            loss = loss + L2 * (w**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self.w = (w.detach().numpy() * 10.0).astype(np.float32)
        self.b = b.detach().numpy().astype(np.float32)

    def probs(self, vec: np.ndarray) -> np.ndarray:
        return _softmax(self.w @ vec + self.b)


class DomainClassifier(Signal):
    needs_embedding = True

    def __init__(self, cfg: DomainSignal, embedder: Any, base_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.embedder = embedder
        if cfg.examples is not None:
            examples = cfg.examples
        else:
            path = Path(cfg.examples_path)
            if not path.is_absolute():
                path = (base_dir or Path.cwd()) / path
            examples = load_examples(path)
        self.labels = sorted(examples)
        texts = [t for lab in self.labels for t in examples[lab]]
        y = np.array([i for i, lab in enumerate(self.labels) for _ in examples[lab]])
        emb = embed_texts(embedder, texts)
        model_cls = CentroidModel if cfg.classifier == "centroid" else LogisticModel
        self.model = model_cls(emb, y, len(self.labels))

    def probs(self, vec: np.ndarray) -> dict[str, float]:
        return {lab: float(p) for lab, p in zip(self.labels, self.model.probs(vec), strict=True)}

    def _evaluate(self, text: str, ctx: Any) -> SignalResult:
        p = self.model.probs(prompt_embedding(text, ctx, self.embedder))
        best = int(p.argmax())
        top = np.argsort(-p)[:3]
        return SignalResult(
            name=self.name,
            matched=float(p[best]) >= self.cfg.threshold,
            confidence=float(p[best]),
            value=self.labels[best],
            details={
                "classifier": self.cfg.classifier,
                "top": {self.labels[i]: round(float(p[i]), 4) for i in top},
            },
        )
