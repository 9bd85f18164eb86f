"""The API server's streaming path under a GPU-paced token source, on the CPU (a diagnostic).

python benchmarks/serve_path_probe.py [--step-ms 6] [--max-num-seqs 256] [--port 8017]
    [--num-prompts 500] [--output-len 128] [--trace PATH] [--loop auto] [--http auto]

The real app (build_app: FastAPI, the OpenAI handlers, the output processor, delta merging,
uvicorn) serves from an AsyncEngineClient whose engine process is replaced by a thread
that, every --step-ms, admits waiting requests up to --max-num-seqs and emits one token per
running request, as the H200 engine does at the online benchmark's batch (5-8 ms a step).
Its messages take the same pickle round trip and the same hand-off to the event loop as
the real reader thread's. `strixlm bench serve` then runs against it in a subprocess, and
the script prints how many requests got all their tokens in one burst at the end (session
32: about half the GPU runs had 90-243 such requests of 500). With --trace, the server's
STRIXLM_STREAM_TRACE file is joined with the client's stamps (stream_trace_join.py). It
also prints the event loop thread's CPU time per token, the least noisy of its figures on a
machine whose cores the client shares.

This stands in for the engine only to load the serving path at the GPU's rate on a machine
without one; it is not a test of the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))
from proc_cpu import thread_stat  # noqa: E402
from stream_trace_join import BURST_S  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-ms", type=float, default=6.0)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--port", type=int, default=8017)
    ap.add_argument("--num-prompts", type=int, default=500)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--trace", default=None, help="STRIXLM_STREAM_TRACE file to write")
    ap.add_argument("--out", default="/tmp/serve_path_probe.json")
    ap.add_argument("--loop", default="auto", help="uvicorn's event loop: auto, asyncio, uvloop")
    ap.add_argument("--http", default="auto", help="uvicorn's HTTP parser: auto, h11, httptools")
    args = ap.parse_args()
    if args.trace:
        os.environ["STRIXLM_STREAM_TRACE"] = args.trace
        Path(args.trace).unlink(missing_ok=True)

    import uvicorn

    from strixlm.config import EngineConfig, ModelConfig
    from strixlm.core.scheduler import SchedulerStats
    from strixlm.engine.client import AsyncEngineClient
    from strixlm.engine.core import StepStats
    from strixlm.engine.model_info import load_model_info
    from strixlm.engine.request import EngineCoreOutput
    from strixlm.entrypoints.openai.api_server import build_app

    class Inbox:
        """What generate() and abort() put for the engine: taken by the pacing thread."""

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.items: list = []

        def put(self, msg) -> None:
            with self.lock:
                self.items.append(msg)

        def take(self) -> list:
            with self.lock:
                out, self.items = self.items, []
            return out

    class PacedClient(AsyncEngineClient):
        def start(self) -> None:
            self.in_q = Inbox()
            self.proc = None
            self.num_blocks = 100_000

        async def attach(self) -> None:
            self._loop = asyncio.get_running_loop()
            threading.Thread(target=self._pace, name="paced-engine", daemon=True).start()
            self._log_task = asyncio.create_task(self._log_loop())

        def _pace(self) -> None:
            waiting: deque = deque()
            running: dict[str, int] = {}
            step = args.step_ms / 1e3
            while True:
                t0 = time.monotonic()
                for kind, payload in self.in_q.take():
                    if kind == "add":
                        for r in payload:
                            waiting.append((r.request_id, r.sampling_params.max_tokens))
                    elif kind == "abort":
                        gone = set(payload)
                        waiting = deque(w for w in waiting if w[0] not in gone)
                        for rid in gone:
                            running.pop(rid, None)
                while waiting and len(running) < args.max_num_seqs:
                    rid, n = waiting.popleft()
                    running[rid] = n
                outs = []
                for rid in list(running):
                    running[rid] -= 1
                    done = running[rid] == 0
                    reason = "length" if done else None
                    outs.append(EngineCoreOutput(rid, [1234], finish_reason=reason))
                    if done:
                        del running[rid]
                if outs:
                    sched = SchedulerStats(len(running), len(waiting), 0.0, 0, 0, 0)
                    st = StepStats(sched, 0, len(outs), self.num_blocks, time.monotonic())
                    msg = ("outputs", outs, st)
                    msg = pickle.loads(pickle.dumps(msg))  # the real queue's round trip
                    self._post(msg)  # as the reader thread hands messages over
                time.sleep(max(0.0, step - (time.monotonic() - t0)))

    model = str(REPO / "strixlm" / "benchmarks" / "configs" / "qwen3-0.6b")
    config = EngineConfig(ModelConfig(model, load_format="dummy"), device="cpu")
    config.log_stats_interval_s = 1e9
    client = PacedClient(config, load_model_info(config.model))
    client.start()
    app = build_app(client)
    server = uvicorn.Server(
        uvicorn.Config(app, port=args.port, log_level="warning", loop=args.loop, http=args.http)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    cmd = [sys.executable, "-m", "strixlm.entrypoints.cli", "bench", "serve", "--port",
           str(args.port), "--num-prompts", str(args.num_prompts), "--random-input-len",
           str(args.input_len), "--random-output-len", str(args.output_len),
           "--output-json", args.out]  # fmt: skip
    stat = f"/proc/self/task/{thread.native_id}/stat"  # the event loop's thread
    cpu0 = thread_stat(stat)[1]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    loop_cpu = thread_stat(stat)[1] - cpu0
    server.should_exit = True
    thread.join(timeout=10)
    d = json.loads(Path(args.out).read_text())
    reqs = d["requests"]
    burst = sum(1 for r in reqs if r["ok"] and r["e2e"] - r["ttft"] < BURST_S)
    print(f"step {args.step_ms} ms: {d['request_throughput']:.1f} req/s, {burst} of {len(reqs)}"
          f" requests in one burst, TTFT p50 {d['ttft_ms']['median']:.0f} ms,"
          f" TPOT p50 {d['tpot_ms']['median']:.1f} ms, event loop CPU {loop_cpu:.2f} s"
          f" ({1e6 * loop_cpu / max(1, len(reqs) * args.output_len):.1f} us a token)")  # fmt: skip
    if args.trace:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu" / "stream_trace_join.py"),
                        args.trace, args.out], check=True)  # fmt: skip


if __name__ == "__main__":
    main()
