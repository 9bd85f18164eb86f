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


def _by_batch(text: str, pattern: re.Pattern, value) -> dict:
    """Batch (the pattern's first group) -> value(match), over the log's matching lines."""
    out = {}
    for line in text.splitlines():
        if m := pattern.match(line.strip()):
            out[int(m.group(1))] = value(m)
    return out


def step_times(text: str) -> dict[int, float]:
    """Batch -> ms/step, from a profile_step.py log."""
    return _by_batch(text, STEP, lambda m: float(m.group(2)))


def lane_times(text: str) -> dict[int, tuple[float, float, float]]:
    """Batch -> (attention, other, overlap) ms/step, from profile_step.py's lanes lines."""
    return _by_batch(
        text, LANES, lambda m: (float(m.group(3)), float(m.group(4)), float(m.group(2)))
    )


def _grid(runs: dict[str, dict], cell) -> list[str]:
    """A header of log names, then a row per batch: cell(log name, batch) in each column."""
    names = list(runs)
    batches = sorted({b for per_batch in runs.values() for b in per_batch})
    lines = ["batch " + "".join(f"{n:>22s}" for n in names)]
    for b in batches:
        lines.append(f"{b:5d} " + "".join(f"{cell(n, b):>22s}" for n in names))
    return lines


def lane_table(runs: dict[str, dict[int, tuple[float, float, float]]]) -> list[str]:
    """GPU time a step: attention / other kernels / both lanes busy at once, per log."""

    def cell(name: str, b: int) -> str:
        v = runs[name].get(b)
        return "-" if v is None else f"{v[0]:.3f}/{v[1]:.3f}/{v[2]:.3f}"

    return ["attention / other / overlap, ms a step (lane_account.py)", *_grid(runs, cell)]


def table(runs: dict[str, dict[int, float]]) -> list[str]:
    base = runs[next(iter(runs))]

    def cell(name: str, b: int) -> str:
        t = runs[name].get(b)
        if t is None:
            return "-"
        if base.get(b, 0) > 0:
            return f"{t:10.3f} ms (x{t / base[b]:.3f})"
        return f"{t:10.3f} ms         "

    return _grid(runs, cell)


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
