"""ServerMetrics' inter-token latency follows the engine's step times, one observation a
step, even when an output carries several queued steps; TTFT and e2e are taken when the
output is routed (as vLLM's)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from strixlm.engine.request import CompletionOutput, RequestOutput
from strixlm.entrypoints.openai.metrics import ServerMetrics


class _Client:
    stats = None
    total_prompt_tokens = 0
    total_generation_tokens = 0

    def add_listener(self, fn) -> None:
        self.listener = fn


def _samples(metrics: ServerMetrics) -> dict[str, float]:
    text = metrics.render().decode()
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.endswith(("_count", "_sum", "_total"))
    }


def _out(tokens: list[int], finish: str | None = None) -> RequestOutput:
    return RequestOutput(
        "r",
        None,
        [1, 2],
        [CompletionOutput(0, "", tokens, finish_reason=finish)],
        finish is not None,
    )


def test_queued_steps_each_count_with_their_engine_times() -> None:
    client = _Client()
    m = ServerMetrics(client, "tiny")
    m.on_arrival("r")
    m._live["r"].arrival = 10.0
    # Step 1's token routed alone at 10.5; steps 2-4 routed late, together, at 13.0.
    client.listener(_out([5]), 10.5, [10.25])
    client.listener(_out([6, 7, 8], "length"), 13.0, [10.5, 10.75, 11.25])
    got = _samples(m)
    assert got["strixlm:time_to_first_token_seconds_count"] == 1
    assert got["strixlm:time_to_first_token_seconds_sum"] == 0.5  # routed at 10.5
    assert got["strixlm:inter_token_latency_seconds_count"] == 3
    assert got["strixlm:inter_token_latency_seconds_sum"] == 1.0  # 0.25 + 0.25 + 0.5
    assert got["strixlm:e2e_request_latency_seconds_sum"] == 3.0  # routed at 13.0
    assert got["strixlm:request_success_total"] == 1


def test_an_output_without_step_times_is_timed_when_routed() -> None:
    client = _Client()
    m = ServerMetrics(client, "tiny")
    m.on_arrival("r")
    m._live["r"].arrival = 1.0
    client.listener(_out([5], "stop"), 3.0, [])
    got = _samples(m)
    assert got["strixlm:time_to_first_token_seconds_sum"] == 2.0
    assert got["strixlm:e2e_request_latency_seconds_sum"] == 2.0
