"""Where a profiled run's GPU time went: attention kernels, the other kernels, the time both
ran at once, and each stream's busy time.

    python benchmarks/gpu/lane_account.py TRACE.json [--steps N]

TRACE.json is a torch.profiler chrome trace (`prof.export_chrome_trace`). Its GPU work
(kernels, memcpys, memsets) is split two ways. By kind: the union of the attention
kernels' intervals, of the other kernels', and "overlap", the time both ran at once. By the
stream each ran on: its busy time and attention's share. Divided by --steps, each is per
step. (Kernels replayed from a CUDA graph may all be filed under the stream the graph was
launched on; the by-kind figures do not depend on that.) On one stream with programmatic
dependent launch, "overlap" also counts a kernel launched early and waiting on the one
before it (~2 ms a 256-row step on an H100), so compare it between runs, not with zero.
profile_step.py prints it for every batch.
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


@dataclass
class Account:
    """A trace's GPU time (us): per stream, the time anything ran, and the time attention
    kernels and the other kernels ran, wherever their streams were."""

    streams: dict[int, StreamAccount]
    any_busy_us: float
    span_us: float
    attention_us: float
    other_us: float

    @property
    def overlap_us(self) -> float:
        """Attention and other kernels at once. Counted by kernel kind, not stream, so
        kernels replayed from a CUDA graph count whatever stream the profiler files them
        under."""
        return self.attention_us + self.other_us - self.any_busy_us


def account(events: list[dict]) -> Account:
    """Each stream's (args.stream, else tid) account, and the whole trace's."""
    streams: dict[int, StreamAccount] = defaultdict(StreamAccount)
    attention: dict[int, list[tuple[float, float]]] = defaultdict(list)
    everything, attn_all, other_all = [], [], []
    for ev in events:
        stream = int(ev.get("args", {}).get("stream", ev.get("tid", 0)))
        s = float(ev["ts"])
        iv = (s, s + float(ev["dur"]))
        acc = streams[stream]
        acc.intervals.append(iv)
        acc.launches += 1
        if ATTENTION.search(ev.get("name", "")):
            attention[stream].append(iv)
            attn_all.append(iv)
        else:
            other_all.append(iv)
        everything.append(iv)
    for stream, acc in streams.items():
        acc.busy_us = union_length(acc.intervals)
        acc.attention_us = union_length(attention[stream])
    span = max(e for _, e in everything) - min(s for s, _ in everything) if everything else 0.0
    return Account(
        dict(streams),
        union_length(everything),
        span,
        union_length(attn_all),
        union_length(other_all),
    )


def report(trace: dict, steps: int = 1, label: str = "") -> list[str]:
    """Lines of the account, per step (ms)."""
    acc = account(gpu_events(trace))
    if not acc.streams:
        return [f"##### lanes{label}: no GPU work in the trace"]
    per = 1e-3 / max(steps, 1)
    lines = [
        f"##### lanes{label}: span {acc.span_us * per:.3f} ms/step, GPU busy"
        f" {acc.any_busy_us * per:.3f}, idle {(acc.span_us - acc.any_busy_us) * per:.3f},"
        f" overlap {acc.overlap_us * per:.3f}, attention {acc.attention_us * per:.3f},"
        f" other {acc.other_us * per:.3f}"
    ]
    for stream, a in sorted(acc.streams.items(), key=lambda kv: -kv[1].busy_us):
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
