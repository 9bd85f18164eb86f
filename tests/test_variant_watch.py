"""strixlm.kernels.variant_watch: the kernel variants built after start-up are counted and
logged, through Triton's own hook calling convention (JITFunction._call_hook, which
Triton's compile path uses), on the CPU."""

from __future__ import annotations

import logging

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from strixlm.kernels import variant_watch  # noqa: E402


def _probe_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


# A compiled-path JITFunction even where the suite runs Triton's interpreter (where
# @triton.jit would give an InterpretedFunction, which never builds variants).
PROBE = JITFunction(_probe_kernel)


def _options():
    from triton.backends.nvidia.compiler import CUDAOptions

    return CUDAOptions()


def _build(n_spec: str, block: object = 64) -> None:
    """What Triton's _do_compile does around a build of the variant whose int argument n
    specialized as n_spec ("1": made a constant, "D": a multiple of 16, "": neither): the
    cache hook, then the post hook, with the arguments Triton 3.6 passes (a string key,
    constants by argument path, the divisibility attributes)."""
    key = str(((("*bf16", "D"), ("i32", n_spec), ("constexpr", str(block))), "opts"))
    sig = {"x_ptr": "*bf16", "n": "constexpr" if n_spec == "1" else "i32", "BLOCK": "constexpr"}
    constants = {(2,): block} | ({(1,): 1} if n_spec == "1" else {})
    attrs = {(0,): [["tt.divisibility", 16]]} | (
        {(1,): [["tt.divisibility", 16]]} if n_spec == "D" else {}
    )
    args = (key, sig, 0, constants, _options(), [attrs], False)
    assert PROBE._call_hook(knobs.runtime.jit_cache_hook, *args) is False
    PROBE._call_hook(knobs.runtime.jit_post_compile_hook, *args)


@pytest.fixture
def no_hooks(monkeypatch):
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", None)


def test_late_variants_are_logged_with_their_specialization(no_hooks, caplog) -> None:
    watch = variant_watch.VariantWatch()
    assert variant_watch.install(watch)
    watch.start()
    _build("1")  # met at start-up: n == 1
    with caplog.at_level(logging.INFO, logger=variant_watch.__name__):
        watch.mark_ready()
        _build("D")  # serving meets n % 16 == 0: a variant start-up missed
    assert watch.early == 1
    assert len(watch.late) == 1
    variant, seconds = watch.late[0]
    # Named by what sets it apart from the variant start-up built: n is now a multiple of
    # 16 and an i32 argument, where start-up had it as the constant 1.
    assert variant == "_probe_kernel: now {n%16, n:i32}; was {n=1}"
    assert seconds >= 0
    text = caplog.text
    assert "start-up built 1 Triton kernel variants" in text
    assert "after start-up" in text and variant in text
    # A new start-up (another engine in the process) counts its variants as early again.
    watch.start()
    _build("")
    assert watch.early == 2 and len(watch.late) == 1


def test_install_is_idempotent_and_leaves_foreign_hooks_alone(no_hooks) -> None:
    watch = variant_watch.VariantWatch()
    assert variant_watch.install(watch)
    assert variant_watch.install(watch)  # already ours
    assert not variant_watch.install(variant_watch.VariantWatch())  # another watch's turn

    def foreign(**_):
        return False

    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = foreign, None
    assert not variant_watch.install(watch)
    assert knobs.runtime.jit_cache_hook is foreign


def test_a_specialization_json_cannot_encode_still_builds(no_hooks) -> None:
    """A constexpr holding a function: Triton's JSON encoding of it fails, and the watch
    must not turn that into a failed build."""
    watch = variant_watch.VariantWatch()
    assert variant_watch.install(watch)
    watch.mark_ready()
    _build("", block=_probe_kernel)
    assert len(watch.late) == 1
    assert watch.late[0][0].startswith("_probe_kernel: now {BLOCK=<function _probe_kernel")
