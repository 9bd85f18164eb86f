"""How much would admitting the longest outputs first save on the standard workload? A probe
for issue 3, with no engine change.

With every request present at the start (offline generation), the run lasts as long as the
last request: its admission step plus its output length. In arrival order a long request
may be admitted late in the ~18 prefill steps of an 8192-token budget, and a smaller budget
spreads the prompts over more steps, where they could ride along in decode steps whose GEMMs
are latency-bound (docs/benchmarks.md, "Where the remaining time goes"), at the price of a
later admission. Sorting the requests by output length, longest first, keeps the longest
ones' admission at the start whatever the budget. This probe runs `strixlm bench
throughput` on the same requests in that order (the workload is sorted before the run; the
floor the benchmark prints simulates the sorted order too), so the budget can be varied:

    python benchmarks/gpu/probe_lof.py [--lof] THROUGHPUT_ARGS...

H200, session 36 (docs/benchmarks.md): longest first at the 8192-token budget ran +0.2-0.3%
(27,579-27,606 against 27,519-27,531 tok/s in arrival order); at 2048 it was even with that,
and smaller budgets lost (1024: -0.9%, 512: -3.4%). The prompts do not ride along for free,
so the engine's scheduler keeps arrival order.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from strixlm.benchmarks import throughput  # noqa: E402
from strixlm.benchmarks.workload import Workload  # noqa: E402


def longest_output_first(w: Workload) -> Workload:
    """The same requests, sorted by output length (longest first; ties keep their order)."""
    order = sorted(range(w.num_requests), key=lambda i: -w.output_lens[i])
    return Workload(
        [w.prompts[i] for i in order],
        [w.output_lens[i] for i in order],
        w.input_len_range,
        w.output_len_range,
        w.seed,
    )


def main(argv: list[str]) -> None:
    if "--lof" in argv:
        argv = [a for a in argv if a != "--lof"]
        make = throughput.make_workload
        throughput.make_workload = lambda *a, **k: longest_output_first(make(*a, **k))
    throughput.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
