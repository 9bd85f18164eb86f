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


# Script prefix for TMA tile kernels (x / w / out descriptors at a TmaConfig's boxes):
# compile_tma(kernel, cfg, dt, **scalars) compiles for sm90 with PDL on and checks the PTX
# has TMA loads and wgmma and the shared memory fits.
TMA_COMPILE = """
target = GPUTarget("cuda", 90, 32)

def compile_tma(kernel, cfg, dt, **scalars):
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    sig = dict(x_desc=f"tensordesc<{dt}[{bm},{bk}]>", w_desc=f"tensordesc<{dt}[{bn},{bk}]>",
               out_desc=f"tensordesc<{dt}[{bm},{bn}]>", **scalars)
    c = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PDL=True)
    src = ASTSource(kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    k = triton.compile(src, target=target,
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    assert "cp.async.bulk.tensor" in k.asm["ptx"] and "wgmma" in k.asm["ptx"]
    assert k.metadata.shared <= 227 * 1024, (cfg, k.metadata.shared)
    return k
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
