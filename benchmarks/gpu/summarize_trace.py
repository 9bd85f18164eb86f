"""Summarize a STRIXLM_STEP_TRACE csv: where the wall time of a run went.

python benchmarks/gpu/summarize_trace.py trace.csv

Steps are bucketed by kind (pure decode vs steps carrying prefill tokens) and by number of
requests. Per bucket: steps, total wall (start to next start), mean wall, mean host time
(schedule + launch + update), mean wait for the GPU, and the remainder ("other": output
processing and the caller's loop).
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    recs = [{k: float(v) for k, v in r.items()} for r in rows]
    buckets: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * 8)
    edges = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 10**9]
    total = 0.0
    for cur, nxt in zip(recs, recs[1:], strict=False):
        wall = (nxt["t_start"] - cur["t_start"]) * 1e3
        total += wall
        kind = "decode" if cur["num_tokens"] == cur["num_reqs"] else "prefill"
        n = int(cur["num_reqs"])
        hi = next(e for e in edges if n <= e)
        host = cur["schedule_ms"] + cur["launch_ms"] + cur["update_ms"]
        b = buckets[(kind, f"<={hi}")]
        b[0] += 1
        b[1] += wall
        b[2] += host
        b[3] += cur["wait_ms"]
        b[4] += wall - host - cur["wait_ms"]
        b[5] += cur["schedule_ms"]
        b[6] += cur["launch_ms"]
        b[7] += cur["update_ms"]
    print(f"{len(recs)} steps, {total / 1e3:.2f} s traced")
    print(
        f"{'kind':8s} {'reqs':>7s} {'steps':>6s} {'total s':>8s} {'share':>6s} "
        f"{'wall ms':>8s} {'host ms':>8s} {'wait ms':>8s} {'other ms':>8s}"
        f" {'sched':>6s} {'launch':>6s} {'update':>6s}"
    )
    for (kind, lab), (n, wall, host, wait, other, sch, lau, upd) in sorted(
        buckets.items(), key=lambda kv: (kv[0][0], int(kv[0][1][2:]))
    ):
        print(
            f"{kind:8s} {lab:>7s} {int(n):6d} {wall / 1e3:8.3f} {wall / total:6.1%} "
            f"{wall / n:8.2f} {host / n:8.2f} {wait / n:8.2f} {other / n:8.2f}"
            f" {sch / n:6.2f} {lau / n:6.2f} {upd / n:6.2f}"
        )
    # Steps where the GPU result was already there (host-bound: the GPU may have idled).
    walls = [
        ((nxt["t_start"] - cur["t_start"]) * 1e3, cur)
        for cur, nxt in zip(recs, recs[1:], strict=False)
    ]
    idle = [(w, r) for w, r in walls if r["wait_ms"] < 0.05]
    print(f"host-bound steps (wait < 0.05 ms): {len(idle)}, {sum(w for w, _ in idle) / 1e3:.3f} s")
    for w, r in sorted(walls, key=lambda x: -(x[0] - x[1]["wait_ms"]))[:8]:
        print(
            f"  slowest host: wall {w:7.2f} ms, wait {r['wait_ms']:6.2f}, schedule"
            f" {r['schedule_ms']:6.2f}, launch {r['launch_ms']:6.2f}, update"
            f" {r['update_ms']:6.2f}, {int(r['num_reqs'])} reqs, {int(r['num_tokens'])} tokens"
        )
    try:
        with open(path + ".gc.json") as f:
            print("garbage collector pauses:", f.read())
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1])
