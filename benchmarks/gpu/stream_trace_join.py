"""Where a streamed request's tokens wait: server trace joined with the client's timings.

python benchmarks/gpu/stream_trace_join.py TRACE.jsonl CLIENT.json [CLIENT.json...]

TRACE.jsonl is the server's STRIXLM_STREAM_TRACE file (strixlm/engine/stream_trace.py),
CLIENT.json a `strixlm bench serve --output-json` result; both stamp time.monotonic(), one
clock on one machine. Requests are joined by the response id and split into those whose
tokens all reached the client in one burst (end-to-end minus TTFT under 50 ms) and the
rest; for each group the script prints the median and p90 of every stage:
  send -> arrival -> first routed -> first body chunk -> client's first token
and the same for the last token.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

BURST_S = 0.05
# (label, later stamp, earlier stamp): each a (source, field), source "s" server, "c" client.
STAGES = [
    ("client send -> server arrival", ("s", "arrival"), ("c", "t_start")),
    ("arrival -> first output routed", ("s", "routed_first"), ("s", "arrival")),
    ("first routed -> first body chunk", ("s", "body_first"), ("s", "routed_first")),
    ("first body chunk -> client's first token", ("c", "t_first"), ("s", "body_first")),
    ("first -> last output routed", ("s", "routed_last"), ("s", "routed_first")),
    ("last routed -> last body chunk", ("s", "body_last"), ("s", "routed_last")),
    ("last body chunk -> client's last token", ("c", "t_last"), ("s", "body_last")),
]


def join(trace_lines: list[dict], client_requests: list[dict]) -> list[tuple[dict, dict]]:
    server = {t["id"]: t for t in trace_lines}
    return [(server[c["server_id"]], c) for c in client_requests
            if c.get("ok") and c.get("server_id") in server]  # fmt: skip


def stage_table(pairs: list[tuple[dict, dict]]) -> dict[str, tuple[float, float]]:
    """label -> (median, p90) in ms over the pairs that have both stamps."""
    out = {}
    for label, (sa, fa), (sb, fb) in STAGES:
        vals = []
        for s, c in pairs:
            a = (s if sa == "s" else c).get(fa)
            b = (s if sb == "s" else c).get(fb)
            if a is not None and b is not None:
                vals.append((a - b) * 1e3)
        if vals:
            out[label] = (float(np.median(vals)), float(np.percentile(vals, 90)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("clients", nargs="+")
    args = ap.parse_args()
    lines = [json.loads(x) for x in Path(args.trace).read_text().splitlines() if x.strip()]
    for path in args.clients:
        reqs = json.loads(Path(path).read_text()).get("requests", [])
        pairs = join(lines, reqs)
        burst = [p for p in pairs if p[1]["e2e"] - p[1]["ttft"] < BURST_S]
        rest = [p for p in pairs if p[1]["e2e"] - p[1]["ttft"] >= BURST_S]
        print(f"{path}: {len(pairs)} of {len(reqs)} requests joined; {len(burst)} in one burst")
        for name, group in (("one burst", burst), ("streamed", rest)):
            if not group:
                continue
            routed = np.median([s["routed"] for s, _ in group])
            bodies = np.median([s["bodies"] for s, _ in group])
            print(f"  {name} ({len(group)}): median outputs routed {routed:.0f}, body chunks"
                  f" {bodies:.0f}")  # fmt: skip
            for label, (med, p90) in stage_table(group).items():
                print(f"    {label:42s} median {med:9.1f} ms   p90 {p90:9.1f} ms")


if __name__ == "__main__":
    main()
