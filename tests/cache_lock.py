"""One builder at a time for what the tests cache under $STRIXLM_CACHE.

The suite runs in several pytest-xdist workers; two of them may want the converted default
model or the trained scripted model at once. Each build is atomic already (temp folder,
then rename), so the lock only keeps the second worker from repeating the work: it waits,
then finds the first one's result.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cache_lock(name: str) -> Iterator[None]:
    root = Path(os.environ.get("STRIXLM_CACHE", Path.home() / ".cache" / "strixlm"))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
