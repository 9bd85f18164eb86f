"""`strixlm bench serve` against a real server, and the server's clean SIGTERM shutdown."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_utils import RemoteServer

from strixlm.benchmarks import serve as bench_serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
import stream_trace_join  # noqa: E402

API_KEY = "sk-bench"


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return tmp_path_factory.mktemp("trace") / "stream_trace.jsonl"


@pytest.fixture(scope="module")
def server(tiny_llama_dir, trace_path):
    srv = RemoteServer(
        tiny_llama_dir, "--max-model-len", "256", "--kv-cache-memory", str(32 << 20),
        "--api-key", API_KEY, extra_env={"STRIXLM_STREAM_TRACE": str(trace_path)},
    )  # fmt: skip
    yield srv
    srv.close()


def _args(server, tmp_path, *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_serve.add_args(p)
    return p.parse_args(
        [
            "--base-url", server.url, "--api-key", API_KEY, "--num-prompts", "4",
            "--random-input-len", "12", "--random-output-len", "5",
            "--output-json", str(tmp_path / "bench.json"), *extra,
        ]
    )  # fmt: skip


def test_bench_serve_burst(server, tmp_path, capsys):
    result = bench_serve.run(_args(server, tmp_path, "--max-concurrency", "2"))
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["successful_requests"] == result["successful_requests"] == 4
    assert saved["failed_requests"] == 0
    assert saved["total_input_tokens"] == 4 * 12
    assert saved["total_output_tokens"] == 4 * 5
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(saved[key]) == {"mean", "median", "p90", "p99"}
        assert 0 < saved[key]["median"] <= saved[key]["p99"]
    assert saved["ttft_ms"]["mean"] < saved["e2el_ms"]["mean"]
    assert saved["request_throughput"] > 0 and saved["output_throughput"] > 0
    assert saved["config"]["model"] == os.path.basename(server_model_dir(server))
    out = capsys.readouterr().out
    assert "Serving Benchmark Result" in out and "Median TTFT (ms)" in out


def test_bench_serve_poisson_chat(server, tmp_path):
    result = bench_serve.run(
        _args(server, tmp_path, "--request-rate", "20", "--endpoint", "/v1/chat/completions")
    )
    assert result["successful_requests"] == 4 and result["total_output_tokens"] == 20


def test_stream_trace_lines_up_with_the_client(server, tmp_path, trace_path):
    """STRIXLM_STREAM_TRACE's server stamps and the bench's client stamps share one clock:
    every request joins by its response id, and each token's path runs forward in time."""
    bench_serve.run(_args(server, tmp_path))
    reqs = json.loads((tmp_path / "bench.json").read_text())["requests"]
    ids = {r["server_id"] for r in reqs}
    assert len(ids) == 4 and all(i.startswith("cmpl-") for i in ids)
    deadline = time.monotonic() + 30  # a line is written once the last write returned
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in trace_path.read_text().splitlines()]
        if ids <= {t["id"] for t in lines}:
            break
        time.sleep(0.1)
    pairs = stream_trace_join.join(lines, reqs)
    assert len(pairs) == 4
    for s, c in pairs:
        assert s["routed"] >= 1 and s["bodies"] >= 2 and s["streamed"]  # tokens, then [DONE]
        order = [c["t_start"], s["arrival"], s["routed_first"], s["body_first"], c["t_first"]]
        assert order == sorted(order), (s, c)
        order = [s["routed_last"], s["body_last"], s["sent_last"]]
        assert order == sorted(order) and c["t_first"] <= c["t_last"], (s, c)
    table = stream_trace_join.stage_table(pairs)
    assert len(table) == len(stream_trace_join.STAGES)


def test_sigterm_stops_server_and_engine(server):
    """SIGTERM to the whole process group, as GNU timeout and systemd send it, while a
    request streams: the engine leaves the shutdown to the server, which finishes the
    request, then stops the engine; nothing is reported leaked or dead."""
    engine = server.engine_pid()
    assert engine is not None
    # Few tokens: the server drains for at most 5 s, and a loaded CI machine is slow.
    body = {"model": server_model_name(server), "prompt": "hi", "max_tokens": 12,
            "ignore_eos": True, "stream": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream(
        "POST", server.url + "/v1/completions", json=body, headers=headers, timeout=60
    ) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        os.killpg(server.proc.pid, signal.SIGTERM)
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]" and not any("error" in line for line in rest), rest[-3:]
    assert server.proc.wait(timeout=30) == 0, server.output()
    out = server.output()
    assert "Application shutdown complete" in out
    assert "leaked" not in out and "engine process died" not in out, out
    assert not os.path.exists(f"/proc/{engine}") or _is_zombie(engine)


def server_model_name(server) -> str:
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    return r.json()["data"][0]["id"]


def server_model_dir(server) -> str:
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    return r.json()["data"][0]["root"]


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"
