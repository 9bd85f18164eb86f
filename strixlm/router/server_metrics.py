"""Prometheus metrics of the router (own registry, `strixlm_router:` prefix)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Routing overhead is sub-millisecond to tens of ms; upstream times reach minutes.
_ROUTING_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_UPSTREAM_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 600.0)


class RouterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "strixlm_router:requests",
            "Chat requests answered, by decision, selected model and HTTP status.",
            ["decision", "model", "status"],
            registry=r,
        )
        self.routing_latency = Histogram(
            "strixlm_router:routing_latency_seconds",
            "Routing overhead per request: signals + decision + selection (upstream excluded).",
            buckets=_ROUTING_BUCKETS,
            registry=r,
        )
        self.signal_latency = Histogram(
            "strixlm_router:signal_latency_seconds",
            "Time to evaluate one signal on one request.",
            ["signal"],
            buckets=_ROUTING_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "strixlm_router:decisions_matched",
            "Requests routed by each decision ('none' when nothing matched).",
            ["decision"],
            registry=r,
        )
        self.cache_hits = Counter(
            "strixlm_router:cache_hits", "Requests answered by the semantic cache.", registry=r
        )
        self.cache_misses = Counter(
            "strixlm_router:cache_misses", "Semantic cache lookups that missed.", registry=r
        )
        self.fast_responses = Counter(
            "strixlm_router:fast_responses",
            "Requests answered by a fast_response plugin, by decision.",
            ["decision"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "strixlm_router:upstream_errors",
            "Failed upstream attempts (connection errors, timeouts, 5xx), by backend and kind.",
            ["backend", "kind"],
            registry=r,
        )
        self.upstream_ttft = Histogram(
            "strixlm_router:upstream_ttft_seconds",
            "Time from sending to a backend to its first response bytes.",
            ["backend"],
            buckets=_UPSTREAM_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "strixlm_router:upstream_latency_seconds",
            "Time from sending to a backend to the end of its response.",
            ["backend"],
            buckets=_UPSTREAM_BUCKETS,
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
