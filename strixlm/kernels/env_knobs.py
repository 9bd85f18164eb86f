"""Numeric tuning knobs from STRIXLM_* environment variables, read once at import (for A/B
runs on the GPU). A value that does not parse is an error that names the variable."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", int, float)


def _env(name: str, default: T, parse: Callable[[str], T], kind: str) -> T:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError as e:
        raise ValueError(f"{name} must be {kind}, got {raw!r}") from e


def env_int(name: str, default: int) -> int:
    """The integer in environment variable `name`, or default when it is unset."""
    return _env(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    """The number in environment variable `name`, or default when it is unset."""
    return _env(name, default, float, "a number")


def env_ints(
    name: str,
    default: tuple[int, ...],
    valid: Callable[[tuple[int, ...]], bool] | None = None,
    kind: str | None = None,
) -> tuple[int, ...]:
    """Comma-separated integers in environment variable `name` (as many as default has, and
    passing `valid` where given, which `kind` then describes), or default when it is
    unset."""

    def parse(raw: str) -> tuple[int, ...]:
        values = tuple(int(x) for x in raw.split(","))
        if len(values) != len(default) or (valid is not None and not valid(values)):
            raise ValueError(raw)
        return values

    return _env(name, default, parse, kind or f"{len(default)} comma-separated integers")
