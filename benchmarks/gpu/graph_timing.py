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
    return sorted(batch_times_ms(g.replay, reps))[1] * 1e3


def batch_times_ms(fn, reps: int, batches: int = 3) -> list[float]:
    """Per-call GPU time (ms) of fn over each of `batches` runs of reps calls, from CUDA
    events around each run."""
    times = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return times
