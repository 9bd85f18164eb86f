"""GPU check of the semantic router in front of two real `strixlm serve` backends.

Two backends serve the embedded SmolLM2-135M-Instruct on the GPU under different names
(`small-a`, `small-b`); `strixlm router serve` routes code prompts to b and the rest to a
(keyword, PII and jailbreak signals, a semantic cache and the replay log on). Then:

1. correctness: greedy answers through the router equal the backend's own (streamed and not),
   the x-vsr headers name the expected decision / model, a repeat is a cache hit;
2. overhead: streamed TTFT and total time, direct vs through the router, at concurrency 1
   and 16 (64 requests each), and the router's own `x-vsr-routing-ms` (p50 / p95);
3. failover: backend b is killed; code prompts are answered by a, with no errors.

    python benchmarks/gpu/check_router.py [--requests 64] [--max-tokens 64]

Prints PASS/FAIL lines and a table; JSON to $OUT/check_router.json when OUT is set.
Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from server_utils import RemoteServer, free_port  # noqa: E402

PROMPTS = [
    "How do I reverse a list in python?",
    "Write a python function that checks whether a number is prime.",
    "Explain what a closure is in javascript, with an example.",
    "What is the capital of Australia?",
    "Give me three tips for sleeping better.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Why is the sky blue?",
    "What should I pack for a weekend hiking trip?",
]
FAILS: list[str] = []
RESULTS: dict = {}


class Router:
    """`strixlm router serve --config FILE` in its own process group."""

    def __init__(self, config: Path, timeout: float = 300.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "strixlm.entrypoints.cli", "router", "serve"]
        cmd += ["--config", str(config), "--port", str(self.port)]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = tempfile.NamedTemporaryFile("w+", prefix="router-", suffix=".log")
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.flush()
                self.close()
                raise RuntimeError(f"router did not start:\n{Path(self.log.name).read_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


def kill(server: RemoteServer) -> None:
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILS.append(name)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))] if s else float("nan")


async def one(
    http: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int, system=None
):
    messages = [{"role": "user", "content": prompt}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    ttft, text = None, []
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        headers = r.headers
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            ev = json.loads(line[5:])
            for c in ev.get("choices") or []:
                if c["delta"].get("content"):
                    ttft = ttft or time.perf_counter() - t0
                    text.append(c["delta"]["content"])
    return ttft or float("nan"), time.perf_counter() - t0, "".join(text), headers


async def load(url: str, model: str, n: int, conc: int, max_tokens: int) -> dict:
    sem = asyncio.Semaphore(conc)
    tag = os.urandom(4).hex()
    async with httpx.AsyncClient(timeout=300) as http:

        async def run(i: int):
            async with sem:
                # Its own system message puts each request in its own semantic-cache scope,
                # so no cache hit skews the timing.
                system = f"You are assistant number {i} of run {tag}."
                return await one(http, url, model, PROMPTS[i % len(PROMPTS)], max_tokens, system)

        t0 = time.perf_counter()
        out = await asyncio.gather(*(run(i) for i in range(n)))
        wall = time.perf_counter() - t0
    routing = [float(h["x-vsr-routing-ms"]) for *_, h in out if "x-vsr-routing-ms" in h]
    return {
        "ttft_p50_ms": pct([o[0] for o in out], 0.5) * 1e3,
        "ttft_p95_ms": pct([o[0] for o in out], 0.95) * 1e3,
        "total_p50_ms": pct([o[1] for o in out], 0.5) * 1e3,
        "req_per_s": n / wall,
        "routing_p50_ms": pct(routing, 0.5) if routing else None,
        "routing_p95_ms": pct(routing, 0.95) if routing else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--kv-cache-gb", type=float, default=2.0, help="per backend")
    args = ap.parse_args()
    kv = str(int(args.kv_cache_gb * (1 << 30)))
    common = ["--max-model-len", "2048", "--kv-cache-memory", kv]
    a = RemoteServer(None, "--served-model-name", "small-a", *common, timeout=600)
    b = RemoteServer(None, "--served-model-name", "small-b", *common, timeout=600)
    tmp = Path(tempfile.mkdtemp(prefix="check-router-"))
    cfg = {
        "backends": [
            {"name": "a", "base_url": f"{a.url}/v1"},
            {"name": "b", "base_url": f"{b.url}/v1"},
        ],
        "signals": [
            {"name": "code", "type": "keyword", "keywords": ["python", "javascript", "function"]},
            {"name": "pii", "type": "pii"},
            {"name": "jailbreak", "type": "jailbreak"},
        ],
        "decisions": [
            {
                "name": "code",
                "priority": 10,
                "rules": "code",
                "models": [{"model": "small-b"}, {"model": "small-a"}],
            },
            {"name": "general", "models": [{"model": "small-a"}]},
        ],  # fmt: skip
        "plugins": [
            {"name": "cache", "type": "semantic_cache", "similarity_threshold": 0.99},
            {"name": "replay", "type": "router_replay", "path": str(tmp / "replay.sqlite")},
        ],
    }
    (tmp / "router.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    router = Router(tmp / "router.yaml")
    try:
        # 1. correctness
        for prompt in PROMPTS[:4]:
            code = any(w in prompt for w in ("python", "javascript", "function"))
            want_model = "small-b" if code else "small-a"
            direct = asyncio.run(load_one(b.url if code else a.url, want_model, prompt))
            routed = asyncio.run(load_one(router.url, "auto", prompt))
            h = routed[3]
            check(
                f"routed {prompt[:30]!r}",
                h["x-vsr-selected-model"] == want_model
                and h["x-vsr-selected-decision"] == ("code" if code else "general")
                and routed[2] == direct[2],
                f"decision {h.get('x-vsr-selected-decision')}, model "
                f"{h.get('x-vsr-selected-model')}, same text: {routed[2] == direct[2]}",
            )
        again = asyncio.run(load_one(router.url, "auto", PROMPTS[0]))
        check("semantic cache hit on repeat", again[3].get("x-vsr-cache-hit") == "true")

        # 2. overhead
        rows = []
        for conc in (1, 16):
            d = asyncio.run(load(a.url, "small-a", args.requests, conc, args.max_tokens))
            r = asyncio.run(load(router.url, "small-a", args.requests, conc, args.max_tokens))
            r_auto = asyncio.run(load(router.url, "auto", args.requests, conc, args.max_tokens))
            for name, m in (("direct", d), ("router pass-through", r), ("router auto", r_auto)):
                rows.append((conc, name, m))
            RESULTS[f"conc{conc}"] = {"direct": d, "passthrough": r, "auto": r_auto}
        print(f"\n{'conc':>4}  {'path':<20} {'ttft p50':>9} {'ttft p95':>9} {'total p50':>10} "
              f"{'req/s':>7} {'routing p50/p95 ms':>19}")  # fmt: skip
        for conc, name, m in rows:
            routing = (
                f"{m['routing_p50_ms']:.2f}/{m['routing_p95_ms']:.2f}"
                if m["routing_p50_ms"] is not None
                else "-"
            )
            print(
                f"{conc:>4}  {name:<20} {m['ttft_p50_ms']:>9.1f} {m['ttft_p95_ms']:>9.1f} "
                f"{m['total_p50_ms']:>10.1f} {m['req_per_s']:>7.2f} {routing:>19}"
            )
        c1 = RESULTS["conc1"]
        extra = c1["auto"]["ttft_p50_ms"] - c1["direct"]["ttft_p50_ms"]
        print(f"TTFT p50 through the router (auto) minus direct, concurrency 1: {extra:.1f} ms")
        routing = c1["auto"]["routing_p50_ms"]
        check("routing overhead p50 < 20 ms at concurrency 1", routing < 20.0, f"{routing:.2f} ms")

        # 3. failover
        kill(b)
        # A new system message: these must reach a backend, not the semantic cache.
        outs = [asyncio.run(load_one(router.url, "auto", p, "Be brief.")) for p in PROMPTS[:3]]
        models = [o[3]["x-vsr-selected-model"] for o in outs]
        hits = [o[3]["x-vsr-cache-hit"] for o in outs]
        ok = models == ["small-a"] * 3 and hits == ["false"] * 3
        check("failover to a after b is killed", ok, f"models {models}, cache hits {hits}")
    except Exception as e:  # report, do not hide
        check("run", False, f"{type(e).__name__}: {e}")
    finally:
        router.close()
        a.close()
        b.close()
    out = os.environ.get("OUT")
    if out:
        Path(out, "check_router.json").write_text(json.dumps(RESULTS, indent=1))
    print(f"\n{'ALL PASS' if not FAILS else 'FAILED: ' + ', '.join(FAILS)}")
    return 1 if FAILS else 0


async def load_one(url: str, model: str, prompt: str, system: str | None = None):
    async with httpx.AsyncClient(timeout=300) as http:
        return await one(http, url, model, prompt, 32, system)


if __name__ == "__main__":
    sys.exit(main())
