"""CPU seconds of processes and their threads, from /proc (Linux), as JSON on stdout.

python benchmarks/gpu/proc_cpu.py PID [PID...]: for each process and its children, every
thread's user + system time with its name, so a before / after pair around a benchmark
says which thread of which process was busy (the API server's event loop, its engine
reader, the engine process's step loop).
"""

from __future__ import annotations

import json
import os
import sys

TICK = os.sysconf("SC_CLK_TCK")


def thread_stat(path: str) -> tuple[str, float]:
    with open(path) as f:
        s = f.read()
    name = s[s.index("(") + 1 : s.rindex(")")]
    fields = s[s.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def children(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def threads(pid: int) -> dict[str, float]:
    """'tid name' -> CPU seconds of each thread of pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, cpu = thread_stat(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        out[f"{tid} {name}"] = cpu
    return out


def snapshot(pids: list[int]) -> dict[str, dict[str, float]]:
    seen, todo, out = set(), list(pids), {}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            out[str(pid)] = threads(pid)
            todo += children(pid)
        except OSError:
            continue
    return out


if __name__ == "__main__":
    print(json.dumps(snapshot([int(p) for p in sys.argv[1:]])))
