"""Names the Triton kernel variants that first appear after the engine is ready.

Triton builds one variant of a kernel per specialization: its constexprs, its argument
dtypes, and for each int argument whether it is 1 or a multiple of 16. The first call with
a new specialization compiles the variant, or loads it from Triton's disk cache. That call
stalls its step. A compile takes ~0.1-1 s, which is what the first server on a machine
pays, because its disk cache is cold. A cached load takes milliseconds and synchronizes
the device.

Start-up (the CUDA-graph captures and `ModelRunner.warmup_kernels`) is meant to meet every
variant that serving needs. This watch logs each variant that start-up missed, once, with
the time it took. The log names the argument to pin (`do_not_specialize`) or the shape to
warm up.

The hooks run only when a kernel misses Triton's in-memory cache, never on a cached
launch, so the watch costs nothing on the hot path. With a hook set, Triton also serializes
each variant's specialization to JSON when it builds it; `install` makes a failure there
harmless. The engine installs the watch only with STRIXLM_VARIANT_WATCH=1 (read at import)
until a GPU run has shown what it costs at start-up.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

ENABLED = os.environ.get("STRIXLM_VARIANT_WATCH", "0") != "0"


@dataclass
class VariantWatch:
    """Counts kernel variants built before and after `mark_ready`; logs the late ones."""

    ready: bool = False
    early: int = 0
    late: list[tuple[str, float]] = field(default_factory=list)  # (description, seconds)
    _started: dict[str, float] = field(default_factory=dict)  # repr(key): build start
    _built: dict[str, list[frozenset[str]]] = field(default_factory=dict)  # kernel: specs
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_cache_miss(self, *, key: Any, repr: str, **_: Any) -> bool:
        """Triton's jit_cache_hook: called before a variant is compiled or loaded. Returns
        False, which tells Triton to go on and build it."""
        with self._lock:
            # Triton's key may hold lists: its repr is a stable dict key.
            self._started[_key_repr(key)] = time.perf_counter()
        return False

    def on_built(
        self, *, key: Any, repr: str, fn: Any = None, compile: dict | None = None, **_: Any
    ) -> None:
        """Triton's jit_post_compile_hook: the variant is built and in memory."""
        name = getattr(fn, "name", None) or repr.split("[", 1)[0]
        spec = specialization(fn, compile)
        with self._lock:
            now = time.perf_counter()
            seconds = now - self._started.pop(_key_repr(key), now)
            earlier = self._built.setdefault(name, [])
            if not self.ready:
                earlier.append(spec)
                self.early += 1
                return
            nearest = min(earlier, key=lambda e: len(e ^ spec), default=frozenset())
            earlier.append(spec)
            # What sets it apart from the nearest variant built before: the argument to pin.
            what = f"{name}: now {_items(spec - nearest)}; was {_items(nearest - spec)}"
            self.late.append((what, seconds))
        logger.warning(
            "Triton built a kernel variant after start-up (%.0f ms; this step waited for it): %s",
            1e3 * seconds,
            what,
        )

    def start(self) -> None:
        """A start-up begins (an engine is being built): variants count as early again."""
        with self._lock:
            self.ready = False

    def mark_ready(self) -> None:
        """From now on every new variant is one that start-up missed."""
        with self._lock:
            self.ready = True
        logger.info("start-up built %d Triton kernel variants", self.early)


def specialization(fn: Any, compile: dict | None) -> frozenset[str]:
    """A variant's specialization as readable items, from the hook's `compile` argument:
    each constant (constexprs, and ints Triton made constant) as `name=value`, each
    argument Triton knows to be a multiple of 16 (ints) or 16-byte aligned (pointers) as
    `name%16`, each other argument's type as `name:type`, and the launch options."""
    if not compile:
        return frozenset()
    names = list(getattr(getattr(fn, "jit_function", None), "arg_names", None) or [])

    def arg(path: tuple) -> str:
        head = names[path[0]] if path and path[0] < len(names) else str(path[:1])
        return head + "".join(f"[{i}]" for i in path[1:])

    items = {f"{arg(p)}={v!r}" for p, v in (compile.get("constants") or {}).items()}
    for attrs in compile.get("configs") or []:
        items |= {f"{arg(p)}%16" for p, a in attrs.items() if "tt.divisibility" in str(a)}
    for name, ty in (compile.get("signature") or {}).items():
        if ty != "constexpr":
            items.add(f"{name}:{ty}")
    items |= {f"{k}={compile[k]}" for k in ("num_warps", "num_stages") if k in compile}
    return frozenset(items)


def _items(items: frozenset[str]) -> str:
    return "{" + ", ".join(sorted(items)) + "}"


def _key_repr(key: Any) -> str:
    # Module level because the hooks' own `repr` keyword (Triton's name) shadows the builtin.
    return repr(key)


WATCH = VariantWatch()


def install(watch: VariantWatch = WATCH) -> bool:
    """Set Triton's compile hooks to `watch` unless another hook is in place (then leave
    it alone). Returns whether the watch is installed. Without Triton there is nothing to
    watch."""
    try:
        from triton import knobs
    except ImportError:
        return False
    rt = knobs.runtime
    mine = (watch.on_cache_miss, watch.on_built)
    if (rt.jit_cache_hook, rt.jit_post_compile_hook) == mine:
        return True
    if rt.jit_cache_hook is not None or rt.jit_post_compile_hook is not None:
        return False
    _tolerate_unserializable_specializations()
    rt.jit_cache_hook, rt.jit_post_compile_hook = mine
    return True


def _tolerate_unserializable_specializations() -> None:
    """With a hook set, Triton JSON-encodes each variant's specialization before calling
    it, and a value JSON cannot encode (a constexpr holding a function, say) would fail
    that kernel's build. The watch never reads that encoding, so a failure gives an empty
    string instead of an error."""
    from triton.runtime import jit

    encode = jit.serialize_specialization_data
    if getattr(encode, "tolerant", False):
        return

    def tolerant(*args: Any, **kwargs: Any) -> str:
        try:
            return encode(*args, **kwargs)
        except (TypeError, ValueError):
            return ""

    tolerant.tolerant = True  # type: ignore[attr-defined]
    jit.serialize_specialization_data = tolerant
