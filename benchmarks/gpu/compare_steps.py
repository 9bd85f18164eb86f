"""Decode step times from several profile_step.py logs, side by side, as ratios to the first.

    python benchmarks/gpu/compare_steps.py BASE.log OTHER.log...

Each log's "##### batch B: X ms/step" lines give its step time at batch B; the table has a
row per batch and a column per log (its file name without .log), each a time and its ratio
to the first log's at that batch (below 1: faster). Where the logs have profile_step's
"##### lanes" lines, a second table gives each step's GPU time as attention / other
kernels / both busy at once.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

STEP = re.compile(r"^##### batch (\d+): ([0-9.]+) ms/step")
LANES = re.compile(
    r"^##### lanes batch (\d+): .*overlap ([0-9.]+), attention ([0-9.]+), other ([0-9.]+)"
)


def step_times(text: str) -> dict[int, float]:
    """Batch -> ms/step, from a profile_step.py log."""
    out = {}
    for line in text.splitlines():
        m = STEP.match(line.strip())
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def lane_times(text: str) -> dict[int, tuple[float, float, float]]:
    """Batch -> (attention, other, overlap) ms/step, from profile_step.py's lanes lines."""
    out = {}
    for line in text.splitlines():
        m = LANES.match(line.strip())
        if m:
            out[int(m.group(1))] = (float(m.group(3)), float(m.group(4)), float(m.group(2)))
    return out


def lane_table(runs: dict[str, dict[int, tuple[float, float, float]]]) -> list[str]:
    """GPU time a step: attention / other kernels / both lanes busy at once, per log."""
    names = list(runs)
    batches = sorted({b for lanes in runs.values() for b in lanes})
    lines = ["attention / other / overlap, ms a step (lane_account.py)"]
    lines.append("batch " + "".join(f"{n:>22s}" for n in names))
    for b in batches:
        cells = []
        for n in names:
            v = runs[n].get(b)
            cells.append("-" if v is None else f"{v[0]:.3f}/{v[1]:.3f}/{v[2]:.3f}")
        lines.append(f"{b:5d} " + "".join(f"{c:>22s}" for c in cells))
    return lines


def table(runs: dict[str, dict[int, float]]) -> list[str]:
    names = list(runs)
    base = runs[names[0]]
    batches = sorted({b for times in runs.values() for b in times})
    lines = ["batch " + "".join(f"{n:>22s}" for n in names)]
    for b in batches:
        cells = []
        for n in names:
            t = runs[n].get(b)
            if t is None:
                cells.append(f"{'-':>22s}")
            elif b in base and base[b] > 0:
                cells.append(f"{t:10.3f} ms (x{t / base[b]:.3f})")
            else:
                cells.append(f"{t:10.3f} ms         ")
        lines.append(f"{b:5d} " + "".join(f"{c:>22s}" for c in cells))
    return lines


def main(paths: list[str]) -> None:
    runs, lanes = {}, {}
    for p in paths:
        path = Path(p)
        text = path.read_text(errors="replace")
        runs[path.name.removesuffix(".log")] = step_times(text)
        lanes[path.name.removesuffix(".log")] = lane_times(text)
    print("\n".join(table(runs)))
    if any(lanes.values()):
        print("\n".join(lane_table(lanes)))


if __name__ == "__main__":
    main(sys.argv[1:])
