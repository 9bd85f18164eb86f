"""Numeric tuning knobs from STRIXLM_* environment variables, read once at import (for A/B
runs on the GPU). A value that does not parse is an error that names the variable."""

from __future__ import annotations

import os


def env_int(name: str, default: int) -> int:
    """The integer in environment variable `name`, or default when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from e


def env_float(name: str, default: float) -> float:
    """The number in environment variable `name`, or default when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise ValueError(f"{name} must be a number, got {raw!r}") from e
