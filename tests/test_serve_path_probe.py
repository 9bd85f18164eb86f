"""benchmarks/serve_path_probe.py end to end at a small size: the real app, its paced token
source, the bench client in a subprocess, and the stream trace joined (CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from server_utils import free_port

REPO = Path(__file__).resolve().parents[1]


def test_probe_serves_every_request_and_joins_its_trace(tmp_path):
    out, trace = tmp_path / "bench.json", tmp_path / "trace.jsonl"
    cmd = [sys.executable, str(REPO / "benchmarks" / "serve_path_probe.py"), "--port",
           str(free_port()), "--num-prompts", "20", "--input-len", "16", "--output-len", "8",
           "--step-ms", "5", "--trace", str(trace), "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    saved = json.loads(out.read_text())
    assert saved["successful_requests"] == 20 and saved["total_output_tokens"] == 20 * 8
    assert "requests in one burst" in res.stdout
    assert "20 of 20 requests joined" in res.stdout
