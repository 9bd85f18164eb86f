"""Kernel tests on CPU need triton in interpreter mode, which @triton.jit picks when a
function is decorated (triton's own triton.language helpers included). conftest.py sets
TRITON_INTERPRET=1 on machines without CUDA; on a CUDA machine, or after a module imported
triton compiled, call reimport_interpreted() before importing the kernel modules."""

from __future__ import annotations

import sys


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
