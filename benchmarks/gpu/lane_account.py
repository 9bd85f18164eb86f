"""Where a profiled run's GPU time went, stream by stream: busy time, the attention kernels'
share of it, and how long two streams were busy at once.

    python benchmarks/gpu/lane_account.py TRACE.json [--steps N]

TRACE.json is a torch.profiler chrome trace (`prof.export_chrome_trace`). Its GPU work
(kernels, memcpys, memsets) is grouped by the stream each ran on; per stream, the union of
its intervals is its busy time. "Both busy" is the sum of the streams' busy times less the
time any stream was busy ("overlap": with two streams, the time both ran). Divided by
--steps, each is per step. For the ping-pong (models/pingpong.py) this says whether the GEMM lane
ran under attention, and whether attention slowed on its share of the SMs: compare the
attention time with the same step's off. profile_step.py prints it for every batch.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
ATTENTION = re.compile(r"paged|attn|attention|merge_segments", re.IGNORECASE)


@dataclass
class StreamAccount:
    busy_us: float = 0.0
    attention_us: float = 0.0
    launches: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list, repr=False)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the intervals (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def gpu_events(trace: dict) -> list[dict]:
    """The trace's GPU work: complete events of the kernel / memcpy / memset categories."""
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") in GPU_CATEGORIES and "dur" in ev:
            out.append(ev)
    return out


def account(events: list[dict]) -> tuple[dict[int, StreamAccount], float, float]:
    """Per stream (args.stream, else tid) its account; the time any stream was busy; the
    span from the first start to the last end, all in us."""
    streams: dict[int, StreamAccount] = defaultdict(StreamAccount)
    attention: dict[int, list[tuple[float, float]]] = defaultdict(list)
    everything = []
    for ev in events:
        stream = int(ev.get("args", {}).get("stream", ev.get("tid", 0)))
        s = float(ev["ts"])
        iv = (s, s + float(ev["dur"]))
        acc = streams[stream]
        acc.intervals.append(iv)
        acc.launches += 1
        if ATTENTION.search(ev.get("name", "")):
            attention[stream].append(iv)
        everything.append(iv)
    for stream, acc in streams.items():
        acc.busy_us = union_length(acc.intervals)
        acc.attention_us = union_length(attention[stream])
    any_busy = union_length(everything)
    span = max(e for _, e in everything) - min(s for s, _ in everything) if everything else 0.0
    return dict(streams), any_busy, span


def report(trace: dict, steps: int = 1, label: str = "") -> list[str]:
    """Lines of the account, per step (ms)."""
    streams, any_busy, span = account(gpu_events(trace))
    if not streams:
        return [f"##### lanes{label}: no GPU work in the trace"]
    per = 1e-3 / max(steps, 1)
    both = sum(a.busy_us for a in streams.values()) - any_busy
    attn = sum(a.attention_us for a in streams.values())
    other = sum(a.busy_us - a.attention_us for a in streams.values())
    lines = [
        f"##### lanes{label}: span {span * per:.3f} ms/step, GPU busy {any_busy * per:.3f},"
        f" idle {(span - any_busy) * per:.3f}, overlap {both * per:.3f},"
        f" attention {attn * per:.3f}, other {other * per:.3f}"
    ]
    for stream, a in sorted(streams.items(), key=lambda kv: -kv[1].busy_us):
        lines.append(
            f"    stream {stream}: busy {a.busy_us * per:.3f} ms/step, attention"
            f" {a.attention_us * per:.3f}, other {(a.busy_us - a.attention_us) * per:.3f},"
            f" {a.launches / max(steps, 1):.0f} launches/step"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args(argv)
    with open(args.trace) as f:
        trace = json.load(f)
    print("\n".join(report(trace, args.steps)))


if __name__ == "__main__":
    main()
