"""Kernel tests on CPU need triton in interpreter mode, which @triton.jit picks when a
function is decorated (triton's own triton.language helpers included). conftest.py sets
TRITON_INTERPRET=1 on machines without CUDA; on a CUDA machine, or after a module imported
triton compiled, call reimport_interpreted() before importing the kernel modules."""

from __future__ import annotations

import os
import sys
import threading


def reimport_interpreted(*kernel_modules: str) -> None:
    """If triton was imported compiled, drop its Python side and the given kernel modules
    from sys.modules so they are imported again, interpreted (set TRITON_INTERPRET=1 first).
    Import the kernels afterwards with importlib.import_module: `from strixlm.kernels import
    x` could hand back the stale compiled module still attached to the package."""
    std = sys.modules.get("triton.language.standard")
    if std is None or type(getattr(std, "cdiv", None)).__name__ != "JITFunction":
        return
    for name in list(sys.modules):
        if name == "triton" or (name.startswith("triton.") and not name.startswith("triton._C")):
            del sys.modules[name]
    for name in kernel_modules:
        sys.modules.pop(name, None)


def skip_repeated_lang_patching() -> None:
    """Triton's interpreter re-patches triton.language on every call of a jit helper
    (tl.max, tl.where, our own helpers): inspect.getmembers over the language modules, about
    half the CPU time of kernel-heavy tests. The re-patch is idempotent (patched members are
    no longer builtins; the rest is rebound to the same code), so within one kernel launch
    skip it when the helper's language modules are already patched. Nothing else changes;
    STRIXLM_TEST_INTERPRETER_PATCH=0 turns it off."""
    if os.environ.get("STRIXLM_TEST_INTERPRETER_PATCH") == "0":
        return
    try:
        import triton.language as tl
        from triton.runtime import interpreter as ti
    except ImportError:
        return
    names = ("_patch_lang", "_LangPatchScope", "GridExecutor", "InterpretedFunction")
    if not all(hasattr(ti, n) for n in names):
        return  # another triton: leave its interpreter as it is
    original = ti._patch_lang
    launch = threading.local()  # .done: ids of the modules patched in the running launch

    def patch_lang(fn):
        need = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        done = getattr(launch, "done", None)
        if done is not None and need and need <= done:
            return ti._LangPatchScope()  # a helper called inside the launch: nothing to do
        scope = original(fn)
        if done is not None:
            done |= need
        return scope

    run_grid = ti.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        outer = getattr(launch, "done", None)
        launch.done = set()
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            launch.done = outer

    ti._patch_lang = patch_lang
    ti.GridExecutor.__call__ = grid_call
