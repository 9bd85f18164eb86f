"""Keeping Python's garbage collector off the start-up heap while steps run.

After start-up the process holds hundreds of thousands of long-lived objects (the model's
modules, one KVBlock per cache block). A full collection walks all of them, stalling the
step loop for tens of milliseconds while the GPU idles. Freezing moves them out of the
collector's reach (as vLLM does in its engine process); reference counting still frees
them, and cycles created later are still collected.

The engine process freezes once, for its whole life. In-process use (LLM.generate) freezes
only for the call and unfreezes after it, so a library user's later cyclic garbage, or a
deleted engine, is collected as usual. STRIXLM_GC_FREEZE=0 turns both off (A/B runs).

The API server's process (tokenizer, FastAPI, the imports) freezes its start-up heap too,
once it is up: under a GPU-paced token source its event loop spent much of a burst in
collections that walked that heap (benchmarks/serve_path_probe.py, session 32: 500 x 128
tokens at a 3 ms step, 116 / 130 req/s unfrozen vs 151 / 156 frozen).
STRIXLM_API_GC_FREEZE=0 turns that one off, STRIXLM_GC_FREEZE=0 all of them.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0


def enabled() -> bool:
    return os.environ.get("STRIXLM_GC_FREEZE", "1") != "0"


def freeze_for_process() -> None:
    """The engine process, after start-up: collect once, then freeze what is left."""
    if enabled():
        gc.collect()
        gc.freeze()


def freeze_api_process() -> bool:
    """The API server's process, once started: collect, then freeze (unless turned off)."""
    if not enabled() or os.environ.get("STRIXLM_API_GC_FREEZE", "1") == "0":
        return False
    freeze_for_process()
    return True


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze every object alive now for the duration (nested uses share one freeze)."""
    global _depth
    if not enabled():
        yield
        return
    if _depth == 0:
        gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
