"""Routing overhead benchmark: every signal of a config plus the decision, upstream excluded.

    python -m strixlm.router.bench_overhead [--config router.yaml] [--tokens 500 8000]
        [--requests 60] [--full-tokens 64] [--head-tokens 16] [--threads 1] [--json out.json]
        [--quality]

Each request is a distinct prompt (routing-set prompts and language samples, shuffled, cut to
the exact token count), so no cache keyed by text helps; the chunk cache of the tokenizer
warms up as it would on a server. Prints p50/p95 per signal, for the shared tokenization and
embedding, for the decision and in total, with the budget verdict (p95 <= 15 ms at ~500
tokens, <= 60 ms at ~8,000), and writes JSON. ``--quality`` adds the agreement of the fast
embedding with the plain full-model embedding (``embed_quality.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from strixlm.router.config import RouterConfigError, load_config

STARTER = Path(__file__).resolve().parent / "starter.yaml"
DATA = Path(__file__).resolve().parent / "data"
BUDGET_MS = {500: 15.0, 8000: 60.0}


def corpus() -> list[str]:
    texts = []
    for name, key in (("routing_set.jsonl", "prompt"), ("language_samples.jsonl", "text")):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)[key])
    return texts


def make_prompt(texts: list[str], n_tokens: int, count, rnd: random.Random) -> str:
    """Shuffled corpus texts joined until ``n_tokens`` tokens, cut at a whitespace chunk."""
    parts, total = [], 0
    while total < n_tokens:
        t = rnd.choice(texts)
        parts.append(t)
        total += count(t)
    words = "\n\n".join(parts).split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # the longest prefix of words within n_tokens
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else 0.0


def run(args: argparse.Namespace) -> dict:
    from strixlm.router.decisions import DecisionEngine
    from strixlm.router.embed_fast import FastEmbedder
    from strixlm.router.signals.registry import SignalContext, build_signals, extract_all

    cfg = load_config(args.config)
    t0 = time.perf_counter()
    emb = FastEmbedder(
        full_tokens=args.full_tokens, head_tokens=args.head_tokens, threads=args.threads
    )
    signals = build_signals(cfg, emb, base_dir=Path(args.config).parent)
    engine = DecisionEngine(cfg)
    startup_s = time.perf_counter() - t0
    texts, rnd = corpus(), random.Random(args.seed)
    report: dict = {
        "config": str(args.config),
        "full_tokens": args.full_tokens,
        "head_tokens": args.head_tokens,
        "threads": emb.encoder.session.get_session_options().intra_op_num_threads,
        "cpu_count": os.cpu_count(),
        "startup_s": round(startup_s, 2),
        "lengths": {},
    }
    for n in args.tokens:
        prompts = [make_prompt(texts, n, emb.count_tokens, rnd) for _ in range(args.requests)]
        warm = [make_prompt(texts, n, emb.count_tokens, rnd) for _ in range(args.warmup)]
        load_before = os.getloadavg()[0]
        rows: dict[str, list[float]] = {}
        for i, prompt in enumerate(warm + prompts):
            t_start = time.perf_counter()
            ctx = SignalContext.from_text(prompt, emb)
            results = extract_all(signals, ctx)
            t_dec = time.perf_counter()
            engine.decide(results)
            t_end = time.perf_counter()
            if i < len(warm):
                continue
            for name, res in results.items():
                rows.setdefault(f"signal:{name}", []).append(res.latency_ms)
            for name, ms in ctx.timings.items():
                rows.setdefault(f"shared:{name}", []).append(ms)
            rows.setdefault("decision", []).append((t_end - t_dec) * 1000.0)
            rows.setdefault("total", []).append((t_end - t_start) * 1000.0)
        tokens = [emb.count_tokens(p) for p in prompts]
        stats = {k: {"p50": pct(v, 50), "p95": pct(v, 95), "max": max(v)} for k, v in rows.items()}
        budget = BUDGET_MS.get(n)
        report["lengths"][str(n)] = {
            "tokens_mean": float(np.mean(tokens)),
            "requests": len(prompts),
            "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "stats_ms": stats,
            "budget_p95_ms": budget,
            "pass": None if budget is None else stats["total"]["p95"] <= budget,
        }
    if args.quality:
        from strixlm.router.embed_quality import measure_quality

        report["quality"] = measure_quality(emb)
    return report


def print_report(report: dict) -> None:
    print(
        f"config {report['config']}  full_tokens {report['full_tokens']}  "
        f"head_tokens {report['head_tokens']}  "
        f"threads {report['threads']}  cpus {report['cpu_count']}  startup {report['startup_s']} s"
    )
    for n, r in report["lengths"].items():
        print(
            f"\n~{n} tokens (mean {r['tokens_mean']:.0f}), {r['requests']} requests, "
            f"load average {r['loadavg_1min'][0]} -> {r['loadavg_1min'][1]}"
        )
        print(f"  {'part':<34}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
        for name, s in sorted(r["stats_ms"].items(), key=lambda kv: kv[0] == "total"):
            print(f"  {name:<34}{s['p50']:>9.2f}{s['p95']:>9.2f}{s['max']:>9.2f}")
        if r["budget_p95_ms"] is not None:
            verdict = "PASS" if r["pass"] else "FAIL"
            p95 = r["stats_ms"]["total"]["p95"]
            print(f"  {verdict}: total p95 {p95:.2f} ms vs budget {r['budget_p95_ms']:.0f} ms")
    if "quality" in report:
        from strixlm.router.embed_quality import print_quality

        print_quality(report["quality"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m strixlm.router.bench_overhead", description=__doc__)
    p.add_argument("--config", default=str(STARTER), help="router YAML (default: starter.yaml)")
    p.add_argument("--tokens", type=int, nargs="+", default=[500, 8000])
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--full-tokens", type=int, default=None, help="embed fully up to this")
    p.add_argument("--head-tokens", type=int, default=None, help="model tokens of longer ones")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="router_overhead.json", help="where to write the report")
    p.add_argument("--quality", action="store_true", help="also measure embedding agreement")
    args = p.parse_args(argv)
    from strixlm.router.embed_fast import FULL_TOKENS, HEAD_TOKENS

    args.full_tokens = FULL_TOKENS if args.full_tokens is None else args.full_tokens
    args.head_tokens = HEAD_TOKENS if args.head_tokens is None else args.head_tokens
    for flag, value, lo in (
        ("--requests", args.requests, 1),
        ("--warmup", args.warmup, 0),
        ("--head-tokens", args.head_tokens, 1),
        ("--full-tokens", args.full_tokens, args.head_tokens),
    ):
        if value < lo:
            p.error(f"{flag} must be >= {lo} (got {value})")
    if any(n < 1 for n in args.tokens):
        p.error(f"--tokens must be positive (got {args.tokens})")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1 (got {args.threads})")
    try:
        report = run(args)
    except RouterConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(report)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0 if all(r["pass"] is not False for r in report["lengths"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
