"""Ahead-of-time compiles of Triton kernels for the H200 (sm90), without a GPU.

The interpreter that runs the kernels on CPU never compiles them and is lax about types;
ptxas ships with triton, so a compile for sm90 catches what the interpreter lets through.
It runs in a subprocess because this process has triton in interpreter mode.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Prefix of every script: exit 3 when this triton has no AOT API (the test then skips).
PRELUDE = """
import sys
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except Exception:
    sys.exit(3)
"""


def assert_compiles(script: str) -> None:
    """Run PRELUDE + script (which prints "compiled" at the end) without the interpreter."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", PRELUDE + script],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode == 3:
        pytest.skip("this triton has no ahead-of-time compile API")
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
