"""Evaluate a router config on a labelled set: accuracy per decision, confusion matrix,
per-signal latency. Used by `POST /api/v1/eval` and `strixlm router eval`.

A labelled set is JSONL, one object a line with the text in `prompt` (or `text`) and the
expected decision in `expected_decision` (or `expected`); `id` is optional. The default is the
routing set shipped in `strixlm/router/data/routing_set.jsonl`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strixlm.router.server_routing import RoutingCore

ROUTING_SET = Path(__file__).with_name("data") / "routing_set.jsonl"
NONE = "(none)"  # predicted when no decision matches and there is no default


@dataclass
class EvalRow:
    id: str
    text: str
    expected: str


def parse_rows(items: list[Any], source: str = "rows") -> list[EvalRow]:
    """Rows from parsed objects; raises ValueError naming the first bad row."""
    rows = []
    for i, obj in enumerate(items):
        if not isinstance(obj, dict):
            raise ValueError(f"{source}[{i}]: expected an object")
        text = obj.get("prompt", obj.get("text"))
        expected = obj.get("expected_decision", obj.get("expected"))
        if not isinstance(text, str) or not isinstance(expected, str):
            raise ValueError(
                f"{source}[{i}]: needs a string 'prompt' (or 'text') and a string "
                "'expected_decision' (or 'expected')"
            )
        rows.append(EvalRow(str(obj.get("id", i)), text, expected))
    if not rows:
        raise ValueError(f"{source}: no rows")
    return rows


def load_rows(path: str | Path | None = None) -> list[EvalRow]:
    path = Path(path) if path is not None else ROUTING_SET
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    items = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: invalid JSON: {e}") from None
    return parse_rows(items, str(path))


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    s = sorted(values)

    def pct(p: float) -> float:
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return {
        "mean": round(sum(s) / len(s), 4),
        "p50": round(pct(0.5), 4),
        "p95": round(pct(0.95), 4),
        "max": round(s[-1], 4),
    }


@dataclass
class EvalReport:
    n: int
    correct: int
    accuracy: float
    labels: list[str]
    per_decision: dict[str, dict[str, Any]]
    confusion: dict[str, dict[str, int]]
    signal_latency_ms: dict[str, dict[str, float]]
    routing_latency_ms: dict[str, float]
    unknown_expected: list[str] = field(default_factory=list)
    mistakes: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(core: RoutingCore, rows: list[EvalRow], max_mistakes: int = 50) -> EvalReport:
    confusion: dict[str, dict[str, int]] = {}
    signal_ms: dict[str, list[float]] = {name: [] for name in core.signals}
    routing_ms: list[float] = []
    mistakes = []
    correct = 0
    for row in rows:
        cls = core.classify(row.text)
        got = cls.decision or NONE
        routing_ms.append(cls.elapsed_ms)
        for name, res in cls.signals.items():
            signal_ms[name].append(res.latency_ms)
        for name, ms in cls.shared_ms.items():  # tokenize / embed, shared by the signals
            signal_ms.setdefault(f"_{name}", []).append(ms)
        confusion.setdefault(row.expected, {})
        confusion[row.expected][got] = confusion[row.expected].get(got, 0) + 1
        if got == row.expected:
            correct += 1
        elif len(mistakes) < max_mistakes:
            mistakes.append(
                {"id": row.id, "expected": row.expected, "predicted": got, "text": row.text[:160]}
            )
    known = [d.name for d in core.cfg.decisions]
    expected = list(dict.fromkeys(r.expected for r in rows))
    predicted = {p for row in confusion.values() for p in row}
    labels = list(dict.fromkeys([*known, *expected, *sorted(predicted)]))
    per_decision = {}
    for label in labels:
        support = sum(confusion.get(label, {}).values())
        hits = confusion.get(label, {}).get(label, 0)
        n_pred = sum(row.get(label, 0) for row in confusion.values())
        if support == 0 and n_pred == 0:
            continue
        per_decision[label] = {
            "support": support,
            "correct": hits,
            "accuracy": round(hits / support, 4) if support else None,  # recall of the label
            "predicted": n_pred,
            "precision": round(hits / n_pred, 4) if n_pred else None,
        }
    return EvalReport(
        n=len(rows),
        correct=correct,
        accuracy=round(correct / len(rows), 4),
        labels=[lb for lb in labels if lb in per_decision],
        per_decision=per_decision,
        confusion=confusion,
        signal_latency_ms={k: _percentiles(v) for k, v in signal_ms.items()},
        routing_latency_ms=_percentiles(routing_ms),
        unknown_expected=[e for e in expected if e not in known],
        mistakes=mistakes,
    )


def format_report(r: EvalReport) -> str:
    """Plain-text tables: per decision, the confusion matrix, signal latency."""
    out = [f"accuracy {r.accuracy:.1%} ({r.correct}/{r.n})", ""]
    w = max([len("decision"), *(len(lb) for lb in r.labels)])
    out.append(f"{'decision':<{w}}  support  correct  accuracy  predicted  precision")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    for lb in r.labels:
        d = r.per_decision[lb]
        out.append(
            f"{lb:<{w}}  {d['support']:>7}  {d['correct']:>7}  {pct(d['accuracy']):>8}  "
            f"{d['predicted']:>9}  {pct(d['precision']):>9}"
        )
    out += ["", "confusion (rows: expected; columns: predicted, numbered as the rows)"]
    cols = r.labels
    cw = max(4, len(str(len(cols) - 1)) + 1)
    out.append(" " * (w + 5) + "".join(f"{i:>{cw}}" for i in range(len(cols))))
    for i, lb in enumerate(cols):
        row = r.confusion.get(lb, {})
        out.append(f"{i:>3}  {lb:<{w}}" + "".join(f"{row.get(c, 0):>{cw}}" for c in cols))
    out += ["", "latency (ms)          mean      p50      p95      max"]
    items = [*r.signal_latency_ms.items(), ("routing (all)", r.routing_latency_ms)]
    for name, s in items:
        nums = "  ".join(f"{s[k]:>7.3f}" for k in ("mean", "p50", "p95", "max"))
        out.append(f"{name[:20]:<20}  {nums}")
    if r.unknown_expected:
        out += ["", f"expected decisions missing from the config: {', '.join(r.unknown_expected)}"]
    return "\n".join(out)
