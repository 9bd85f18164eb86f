"""Decisions: rule trees over signal results, the strategy that picks one decision, and the
mapping from a model ref's `use_reasoning` / `reasoning_effort` to each model family's fields.

A rule leaf matches when its signal matched, carries the leaf's `value` (when given) and its
confidence reaches `min_confidence`. `all` takes the weakest child's confidence, `any` the
strongest matching child's, `not` one minus its child's. A decision without rules is a
catch-all: it always matches, with confidence 0, so any rule-based match beats it under the
confidence strategy.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from strixlm.router.config import Decision, ModelRef, RouterConfig, Rule
from strixlm.router.signals.base import SignalResult


@dataclass
class RuleOutcome:
    matched: bool
    confidence: float
    # Signals whose leaves matched on the path that made the rule match (for headers / logs).
    signals: list[str] = field(default_factory=list)


def result_values(result: SignalResult) -> set[str]:
    """Every value a signal result carries: its `value`, plus `details["values"]` (signals
    that report several labels) and `details["types"]` (PII types found)."""
    out = {result.value} if result.value is not None else set()
    for key in ("values", "types"):
        extra = result.details.get(key)
        if isinstance(extra, list | tuple | set):
            out.update(str(v) for v in extra)
    return out


def evaluate_rule(rule: Rule, results: dict[str, SignalResult]) -> RuleOutcome:
    if rule.signal is not None:
        res = results.get(rule.signal)
        if res is None:
            return RuleOutcome(False, 0.0)
        ok = res.matched
        if ok and rule.value is not None:
            ok = rule.value in result_values(res)
        if ok and rule.min_confidence is not None:
            ok = res.confidence >= rule.min_confidence
        return RuleOutcome(ok, res.confidence, [rule.signal] if ok else [])
    if rule.all is not None:
        kids = [evaluate_rule(r, results) for r in rule.all]
        ok = all(k.matched for k in kids)
        sigs = [s for k in kids for s in k.signals] if ok else []
        return RuleOutcome(ok, min(k.confidence for k in kids), sigs)
    if rule.any is not None:
        kids = [evaluate_rule(r, results) for r in rule.any]
        hits = [k for k in kids if k.matched]
        if hits:
            return RuleOutcome(
                True, max(k.confidence for k in hits), [s for k in hits for s in k.signals]
            )
        return RuleOutcome(False, max(k.confidence for k in kids))
    assert rule.not_ is not None  # the config guarantees exactly one operator
    kid = evaluate_rule(rule.not_, results)
    return RuleOutcome(not kid.matched, 1.0 - kid.confidence)


@dataclass
class DecisionMatch:
    decision: Decision
    confidence: float
    signals: list[str]
    fallback: bool = False  # chosen as default_decision because nothing matched

    @property
    def name(self) -> str:
        return self.decision.name


class DecisionEngine:
    """Evaluates every decision of a config and picks one by its `decision_strategy`."""

    def __init__(self, cfg: RouterConfig) -> None:
        self.decisions = list(cfg.decisions)
        self.strategy: Literal["priority", "confidence"] = cfg.decision_strategy
        self.default = next((d for d in self.decisions if d.name == cfg.default_decision), None)

    def evaluate_all(self, results: dict[str, SignalResult]) -> list[DecisionMatch]:
        """The matching decisions, best first by the strategy (config order breaks ties)."""
        matches = []
        for d in self.decisions:
            if d.rules is None:
                matches.append(DecisionMatch(d, 0.0, []))
                continue
            out = evaluate_rule(d.rules, results)
            if out.matched:
                matches.append(DecisionMatch(d, out.confidence, list(dict.fromkeys(out.signals))))
        if self.strategy == "priority":
            key = lambda m: (-m.decision.priority, -m.confidence)  # noqa: E731
        else:
            key = lambda m: (-m.confidence, -m.decision.priority)  # noqa: E731
        return sorted(matches, key=key)  # stable: config order breaks remaining ties

    def decide(self, results: dict[str, SignalResult]) -> DecisionMatch | None:
        matches = self.evaluate_all(results)
        if matches:
            return matches[0]
        if self.default is not None:
            return DecisionMatch(self.default, 0.0, [], fallback=True)
        return None


# ---- reasoning fields per model family -------------------------------------------------------


@dataclass(frozen=True)
class ReasoningFamily:
    """How one family of models is told to think: chat-template kwargs that switch thinking
    on/off, or an OpenAI-style `reasoning_effort` (these models always reason; off = unset)."""

    name: str
    pattern: str  # regex searched in the lowercased model name
    kind: Literal["chat_template_kwargs", "reasoning_effort"]
    keys: tuple[str, ...] = ()


# The one table. First match wins, so specific names come before general ones.
REASONING_FAMILIES: tuple[ReasoningFamily, ...] = (
    ReasoningFamily("gpt-oss", r"gpt-oss", "reasoning_effort"),
    ReasoningFamily("openai-o", r"(?:^|/)o\d(?:-|$)|(?:^|/)gpt-5", "reasoning_effort"),
    ReasoningFamily("qwen3", r"qwen3|qwq", "chat_template_kwargs", ("enable_thinking",)),
    # DeepSeek V3.1's template reads `thinking`; R1-style templates `enable_thinking`.
    ReasoningFamily(
        "deepseek", r"deepseek", "chat_template_kwargs", ("thinking", "enable_thinking")
    ),
    ReasoningFamily("nemotron", r"nemotron", "chat_template_kwargs", ("enable_thinking",)),
    ReasoningFamily("granite", r"granite", "chat_template_kwargs", ("thinking",)),
    ReasoningFamily("glm", r"glm-4\.[5-9]|glm-[5-9]", "chat_template_kwargs", ("enable_thinking",)),
)


def reasoning_family(model: str) -> ReasoningFamily | None:
    low = model.lower()
    return next((f for f in REASONING_FAMILIES if re.search(f.pattern, low)), None)


def reasoning_fields(model: str, ref: ModelRef) -> dict[str, Any]:
    """Request fields that carry `ref`'s reasoning choice to `model`; {} for unknown families
    (nothing to say to them) and for effort-style families when reasoning is off."""
    fam = reasoning_family(model)
    if fam is None:
        return {}
    if fam.kind == "reasoning_effort":
        return {"reasoning_effort": ref.reasoning_effort or "medium"} if ref.use_reasoning else {}
    return {"chat_template_kwargs": {k: ref.use_reasoning for k in fam.keys}}


def apply_reasoning(body: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A copy of a request body with reasoning fields merged (template kwargs merged key by
    key, so a client's other template kwargs survive)."""
    out = copy.copy(body)
    for key, val in fields.items():
        if key == "chat_template_kwargs":
            merged = dict(out.get(key) or {})
            merged.update(val)
            out[key] = merged
        else:
            out[key] = val
    return out
