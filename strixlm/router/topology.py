"""The routing graph of a running config, as the dashboard draws it: signals -> decisions
(one edge per rule leaf that tests the signal) -> models (one node per backend endpoint a
decision's model refs resolve to, or the ref itself while nothing serves it yet)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from strixlm.router.config import AUTO, ModelRef, RouterConfig
from strixlm.router.proxy_backends import BackendPool


@dataclass
class Node:
    id: str
    kind: str  # "signal" | "decision" | "model"
    label: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Edge:
    source: str
    target: str
    kind: str  # "rule" (signal -> decision) | "model" (decision -> model)
    detail: dict[str, Any] = field(default_factory=dict)


def _ref_label(ref: ModelRef) -> str:
    return ref.model + (f"@{ref.backend}" if ref.backend else "")


def _plugins_of(cfg: RouterConfig, decision: str) -> list[str]:
    """Plugins that act on a decision (a plugin with no `decisions` list acts on all)."""
    return [
        f"{p.name} ({p.type})" for p in cfg.plugins if not p.decisions or decision in p.decisions
    ]


def build_topology(cfg: RouterConfig, pool: BackendPool) -> dict[str, Any]:
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    for s in cfg.signals:
        nodes[f"signal:{s.name}"] = Node(
            f"signal:{s.name}", "signal", s.name, {"type": s.type, "description": s.description}
        )
    for d in cfg.decisions:
        did = f"decision:{d.name}"
        nodes[did] = Node(
            did,
            "decision",
            d.name,
            {
                "priority": d.priority,
                "description": d.description,
                "catch_all": d.rules is None,
                "default": d.name == cfg.default_decision,
                "selection": (d.selection or cfg.selection).method,
                "plugins": _plugins_of(cfg, d.name),
            },
        )
        for loc, leaf in d.rules.leaves(()) if d.rules is not None else ():
            # A leaf under an odd number of `not`s counts against the decision.
            negated = sum(1 for part in loc if part == "not") % 2 == 1
            edges.append(
                Edge(
                    f"signal:{leaf.signal}",
                    did,
                    "rule",
                    {
                        "value": leaf.value,
                        "min_confidence": leaf.min_confidence,
                        "negated": negated,
                    },
                )
            )
        for ref in d.models:
            detail = {"ref": _ref_label(ref), "weight": ref.weight, "reasoning": ref.use_reasoning}
            endpoints = [c.endpoint for c in pool.candidates([ref])]
            if not endpoints:  # nothing serves it (yet): draw the ref itself
                mid = f"model:?{_ref_label(ref)}"
                nodes.setdefault(
                    mid, Node(mid, "model", _ref_label(ref), {"resolved": False, "backend": None})
                )
                edges.append(Edge(did, mid, "model", detail))
            for ep in endpoints:
                mid = f"model:{ep.backend}/{ep.model}"
                nodes.setdefault(
                    mid, Node(mid, "model", ep.model, {"resolved": True, "backend": ep.backend})
                )
                edges.append(Edge(did, mid, "model", detail))
    return {
        "strategy": cfg.decision_strategy,
        "default_decision": cfg.default_decision,
        "auto": AUTO,
        "nodes": [asdict(n) for n in nodes.values()],
        "edges": [asdict(e) for e in edges],
    }
