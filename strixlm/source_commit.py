"""Which commit the running strixlm code came from, for benchmark records.

A checkout answers with `git rev-parse HEAD`. A `git archive` snapshot (how the GPU runs
carry the code) has no repository of its own, and a git call from inside it would name
whatever repository encloses it; git fills ARCHIVED_COMMIT in on export instead
(.gitattributes: export-subst).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ARCHIVED_COMMIT = "$Format:%H$"


def source_commit() -> str | None:
    """The archived commit, else HEAD of the checkout that holds this package (None when
    neither is known)."""
    if not ARCHIVED_COMMIT.startswith("$"):
        return ARCHIVED_COMMIT
    here = Path(__file__).resolve().parent
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", Path(__file__).name],
            cwd=here, capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        if tracked.returncode != 0:  # not this package's own checkout
            return None
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() or None
