"""Timing a GPU function as the engine runs it: captured in a CUDA graph and replayed, so
Python launch overhead does not count."""

from __future__ import annotations

import torch


def graph_time_us(fn, reps: int = 20, calls: int = 1) -> float:
    """Replay time of fn captured in a CUDA graph (median of 3 batches of reps), per call
    when the graph holds `calls` calls back to back (28: one per layer, as in a step)."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return replay_time_us(g, reps) / calls


def replay_time_us(g: torch.cuda.CUDAGraph, reps: int = 20) -> float:
    """Replay time of a captured (and instantiated) graph: median of 3 batches of reps."""
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return sorted(times)[1]
