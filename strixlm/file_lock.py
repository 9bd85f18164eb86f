"""One builder at a time for files several processes may build at once.

Cached artifacts (the converted default model, the router's ONNX encoder and its token
table) are written atomically (a temp file or folder, then a rename), so a reader never
sees half of one. Two processes starting together on a cold cache would still both build
it, and a second rename of a folder can pull the first one away from a process already
reading it. Holding this lock around "check, else build" makes the second process wait,
then find the first one's result.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on `<target>.lock` (beside target) for the block."""
    try:
        import fcntl
    except ImportError:  # not POSIX: concurrent starts may each build (still atomically)
        yield
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
