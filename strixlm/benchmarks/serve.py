"""Online serving benchmark: stream random prompts to a running OpenAI-compatible server.

Each request is a prompt of exactly --random-input-len random token ids (sent as a list of
ints), asking for exactly --random-output-len tokens (ignore_eos). Requests arrive all at
once (--request-rate inf) or as a Poisson process, optionally capped by --max-concurrency.
Measures TTFT, TPOT ((e2e - ttft) / (output tokens - 1)), ITL (gaps between streamed
chunks) and E2E latency; prints a table and optionally writes everything as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field

import aiohttp
import numpy as np

from strixlm.cli_args import port_number

# Token ids are drawn from this range: valid for any real vocabulary (and our tiny tests').
_ID_LOW, _ID_HIGH = 100, 5000


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", default=None, help="e.g. http://127.0.0.1:8000 (overrides host)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000)
    p.add_argument("--model", default=None, help="default: the first model of /v1/models")
    p.add_argument(
        "--endpoint",
        default="/v1/completions",
        choices=["/v1/completions", "/v1/chat/completions"],
        help="chat sends random words instead of token ids, so its input length is approximate",
    )
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--random-input-len", type=int, default=128)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--request-rate", type=float, default=float("inf"), help="req/s; inf = burst")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=6 * 3600, help="per-request seconds")
    p.add_argument("--output-json", default=None)


@dataclass
class _Result:
    ok: bool = False
    error: str = ""
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)
    # The response's id and time.monotonic() at send, first and last token: the server's
    # STRIXLM_STREAM_TRACE stamps on the same clock (benchmarks/gpu/stream_trace_join.py).
    server_id: str = ""
    t_start: float = 0.0
    t_first: float = 0.0
    t_last: float = 0.0


def _base_url(args: argparse.Namespace) -> str:
    return (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")


def _headers(args: argparse.Namespace) -> dict[str, str]:
    return {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}


def _payload(args: argparse.Namespace, model: str, ids: list[int]) -> dict:
    body = {
        "model": model,
        "max_tokens": args.random_output_len,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.endpoint == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": " ".join(f"w{i}" for i in ids)}]
    else:
        body["prompt"] = ids
    return body


async def _one(session: aiohttp.ClientSession, url: str, body: dict, prompt_len: int) -> _Result:
    res = _Result(prompt_len=prompt_len, t_start=time.monotonic())
    start = time.perf_counter()
    last = start
    chunks = 0
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return res
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if "error" in msg:
                    res.error = msg["error"].get("message", str(msg))
                    return res
                res.server_id = res.server_id or msg.get("id", "")
                if msg.get("usage"):
                    res.output_tokens = msg["usage"]["completion_tokens"]
                    res.prompt_len = msg["usage"]["prompt_tokens"]
                choices = msg.get("choices") or []
                # A token arrived if a choice carries text, or (a server without a
                # tokenizer) an empty completion text; role-only and usage-only chunks don't.
                if not any("text" in c or (c.get("delta") or {}).get("content") for c in choices):
                    continue
                now = time.perf_counter()
                if chunks == 0:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
                chunks += 1
        res.e2e = time.perf_counter() - start
        res.t_first = res.t_start + res.ttft
        res.t_last = res.t_start + (last - start)
        res.output_tokens = res.output_tokens or chunks
        res.ok = chunks > 0
        if not res.ok:
            res.error = "no tokens streamed"
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def _first_model(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(f"{base}/v1/models") as resp:
        resp.raise_for_status()
        return (await resp.json())["data"][0]["id"]


async def _bench(args: argparse.Namespace) -> tuple[list[_Result], float, str]:
    base = _base_url(args)
    rng = random.Random(args.seed)
    prompts = [
        [rng.randrange(_ID_LOW, _ID_HIGH) for _ in range(args.random_input_len)]
        for _ in range(args.num_prompts)
    ]
    gaps = [
        0.0 if args.request_rate == float("inf") else rng.expovariate(args.request_rate)
        for _ in prompts
    ]
    limit = asyncio.Semaphore(args.max_concurrency or len(prompts) or 1)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    connector = aiohttp.TCPConnector(limit=0)  # concurrency is ours to cap, not the pool's
    async with aiohttp.ClientSession(
        timeout=timeout, headers=_headers(args), connector=connector
    ) as session:
        model = args.model or await _first_model(session, base)
        url = base + args.endpoint

        async def limited(ids: list[int]) -> _Result:
            async with limit:
                return await _one(session, url, _payload(args, model, ids), len(ids))

        t0 = time.perf_counter()
        tasks = []
        for ids, gap in zip(prompts, gaps, strict=True):
            if gap:
                await asyncio.sleep(gap)  # Poisson arrivals: exponential gaps
            tasks.append(asyncio.create_task(limited(ids)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
    return list(results), duration, model


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    a = np.asarray(values) * 1000.0  # ms
    return {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
    }


def summarize(results: list[_Result], duration: float) -> dict:
    ok = [r for r in results if r.ok]
    n_in = sum(r.prompt_len for r in ok)
    n_out = sum(r.output_tokens for r in ok)
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "successful_requests": len(ok),
        "failed_requests": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:10],
        "duration_s": duration,
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": n_out / duration if duration else 0.0,
        "total_token_throughput": (n_in + n_out) / duration if duration else 0.0,
        "ttft_ms": _stats([r.ttft for r in ok]),
        "tpot_ms": _stats(tpot),
        "itl_ms": _stats([g for r in ok for g in r.itl]),
        "e2el_ms": _stats([r.e2e for r in ok]),
    }


def _print_table(s: dict) -> None:
    rows = [
        ("Successful requests", f"{s['successful_requests']}"),
        ("Failed requests", f"{s['failed_requests']}"),
        ("Benchmark duration (s)", f"{s['duration_s']:.2f}"),
        ("Total input tokens", f"{s['total_input_tokens']}"),
        ("Total generated tokens", f"{s['total_output_tokens']}"),
        ("Request throughput (req/s)", f"{s['request_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{s['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{s['total_token_throughput']:.2f}"),
    ]
    for key, title in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"),
                       ("e2el_ms", "E2E latency")):  # fmt: skip
        for stat in ("mean", "median", "p90", "p99"):
            rows.append((f"{stat.capitalize()} {title} (ms)", f"{s[key][stat]:.2f}"))
    print("{:=^60}".format(" Serving Benchmark Result "))
    for name, value in rows:
        print(f"{name:<44}{value:>16}")
    print("=" * 60)
    for e in s["errors"]:
        print(f"error: {e}")


def run(args: argparse.Namespace) -> dict:
    results, duration, model = asyncio.run(_bench(args))
    summary = summarize(results, duration)
    summary["config"] = {
        "base_url": _base_url(args),
        "endpoint": args.endpoint,
        "model": model,
        "num_prompts": args.num_prompts,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "request_rate": str(args.request_rate),
        "max_concurrency": args.max_concurrency,
        "seed": args.seed,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    summary["requests"] = [{k: v for k, v in asdict(r).items() if k != "itl"} for r in results]
    _print_table(summary)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(summary, f, indent=2)
    return summary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_args(p)
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
