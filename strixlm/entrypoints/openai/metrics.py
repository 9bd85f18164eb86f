"""Prometheus metrics for the OpenAI server, with vLLM's names under a `strixlm:` prefix.

Engine-side values (running/waiting requests, KV cache usage, prefix cache, token totals)
are read from the client's latest StepStats at scrape time, so they never drift from the
engine. Latency histograms are fed by a client listener that sees every RequestOutput.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from strixlm.engine.request import RequestOutput

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
_ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
_E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip


class _EngineCollector(Collector):
    """Gauges and counters derived from the engine client's state when scraped."""

    def __init__(self, client, model_name: str) -> None:
        self.client = client
        self.model_name = model_name

    def collect(self) -> Iterator[Metric]:
        labels = [self.model_name]
        stats = self.client.stats
        sched = stats.scheduler if stats is not None else None

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(labels, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(labels, value)
            return c

        queries = sched.prefix_cache_queries if sched else 0
        hits = sched.prefix_cache_hits if sched else 0
        yield gauge(
            "strixlm:num_requests_running",
            "Sequences in the running batch.",
            sched.num_running if sched else 0,
        )
        yield gauge(
            "strixlm:num_requests_waiting",
            "Sequences waiting to be scheduled.",
            sched.num_waiting if sched else 0,
        )
        yield gauge(
            "strixlm:kv_cache_usage_perc",
            "Fraction of KV cache blocks held by live requests (1 = full).",
            sched.kv_cache_usage if sched else 0.0,
        )
        yield gauge(
            "strixlm:prefix_cache_hit_rate",
            "Prefix cache hits / queries (in blocks) since start.",
            hits / queries if queries else 0.0,
        )
        yield counter(
            "strixlm:prefix_cache_queries", "Blocks looked up in the prefix cache.", queries
        )
        yield counter("strixlm:prefix_cache_hits", "Blocks found in the prefix cache.", hits)
        yield counter(
            "strixlm:num_preemptions",
            "Preemptions of running sequences.",
            sched.num_preemptions if sched else 0,
        )
        yield counter(
            "strixlm:prompt_tokens",
            "Prefill tokens computed (prefix cache hits are not computed).",
            self.client.total_prompt_tokens,
        )
        yield counter(
            "strixlm:generation_tokens",
            "Generated tokens.",
            self.client.total_generation_tokens,
        )


@dataclass
class _Timing:
    arrival: float
    last: float | None = None


class ServerMetrics:
    """Owns its own registry so several apps (tests) can live in one process."""

    def __init__(self, client, model_name: str) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        lbl = ["model_name"]
        self.ttft = Histogram(
            "strixlm:time_to_first_token_seconds",
            "Time from arrival to the first generated token.",
            lbl,
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "strixlm:inter_token_latency_seconds",
            "Time between consecutive engine steps that gave one request tokens (the "
            "engine's step times).",
            lbl,
            buckets=_ITL_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "strixlm:e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            lbl,
            buckets=_E2E_BUCKETS,
            registry=self.registry,
        )
        self.success = Counter(
            "strixlm:request_success",
            "Finished requests (one per choice), by finish reason (stop, length, abort).",
            lbl + ["finished_reason"],
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(client, model_name))
        self._live: dict[str, _Timing] = {}
        # Bound children: .labels() costs a lookup per call, and on_output runs per token.
        self._ttft = self.ttft.labels(model_name)
        self._itl = self.itl.labels(model_name)
        self._e2e = self.e2e.labels(model_name)
        client.add_listener(self.on_output)

    def on_arrival(self, request_id: str) -> None:
        self._live[request_id] = _Timing(time.monotonic())

    def on_done(self, request_id: str, num_unfinished: int = 0) -> None:
        """The handler let go of the request; choices that never finished were aborted."""
        if self._live.pop(request_id, None) is not None and num_unfinished:
            self.success.labels(self.model_name, "abort").inc(num_unfinished)

    def on_output(self, ro: RequestOutput, now: float, step_times: list[float]) -> None:
        """As vLLM times them: TTFT and e2e when the output is routed (`now`: what the
        API process could send), ITL between the engine's step times (`step_times`), one
        observation per step, so steps the event loop routed together as one output keep
        their own spacing. `now` stands in for a step without a time."""
        t = self._live.get(ro.request_id)
        if t is None:
            return
        for at in step_times or [now]:
            if t.last is None:
                self._ttft.observe(now - t.arrival)
            else:
                self._itl.observe(at - t.last)
            t.last = at
        for c in ro.outputs:
            if c.finish_reason is not None:
                self.success.labels(self.model_name, c.finish_reason).inc()
        if ro.finished:
            self._e2e.observe(now - t.arrival)
            del self._live[ro.request_id]

    def render(self) -> bytes:
        return generate_latest(self.registry)
