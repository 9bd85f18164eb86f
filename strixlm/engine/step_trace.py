"""Per-step timing trace for finding where an engine's wall time goes.

Set STRIXLM_STEP_TRACE=/path/trace.csv and every EngineCore step appends one row: when it
started, how long the host spent scheduling, launching, waiting for the GPU's result and
updating requests, and how many tokens/requests the launched step carried. A wait near zero
means the host is the bottleneck; a long wait means the GPU is.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import time
from dataclasses import astuple, dataclass, fields


@dataclass
class StepRecord:
    t_start: float
    schedule_ms: float
    launch_ms: float
    wait_ms: float
    update_ms: float
    num_tokens: int
    num_reqs: int
    num_sampled: int


class StepTracer:
    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[StepRecord] = []
        self.t0 = time.perf_counter()
        # Garbage-collector pauses by generation (count, seconds): they stall the loop.
        self.gc_pauses = {g: [0, 0.0] for g in range(3)}
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)
        atexit.register(self.flush)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            pause = self.gc_pauses[info["generation"]]
            pause[0] += 1
            pause[1] += time.perf_counter() - self._gc_start

    @classmethod
    def from_env(cls) -> StepTracer | None:
        path = os.environ.get("STRIXLM_STEP_TRACE")
        return cls(path) if path else None

    def add(self, rec: StepRecord) -> None:
        rec.t_start -= self.t0
        self.records.append(rec)

    def flush(self) -> None:
        if not self.records:
            return
        with open(self.path, "w") as f:
            f.write(",".join(x.name for x in fields(StepRecord)) + "\n")
            for r in self.records:
                cells = (f"{v:.4f}" if isinstance(v, float) else str(v) for v in astuple(r))
                f.write(",".join(cells) + "\n")
        pauses = {f"gen{g}": {"count": c, "seconds": t} for g, (c, t) in self.gc_pauses.items()}
        with open(self.path + ".gc.json", "w") as f:
            json.dump(pauses, f)
