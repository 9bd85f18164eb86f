"""benchmarks/sass_tile_loop.py: the attention kernels' tile loops in sm90 SASS, on CPU.

Each run compiles in a subprocess (the knobs are read at import, and this suite runs
triton in interpreter mode), so these are compile-time properties of the loop changes the
docs cite: the lean loop, the aligned tiles and the per-block K / V pointers take
instructions off a tile's common path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton", reason="triton is not installed")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def _loops(tmp_path: Path, *args: str, **knobs: str) -> dict:
    if not (BIN / "ptxas").exists() or not (BIN / "cuobjdump").exists():
        pytest.skip("this triton ships no ptxas / cuobjdump")
    env = {k: v for k, v in os.environ.items()
           if k != "TRITON_INTERPRET" and not k.startswith("STRIXLM_ATTN_")}  # fmt: skip
    env.update(knobs)
    out = tmp_path / "loops.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sass_tile_loop.py"), *args,
         "--json", str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tile loop 0:" in r.stdout
    return json.loads(out.read_text())


def test_loop_changes_take_instructions_off_the_tile(tmp_path):
    default = _loops(tmp_path)  # per-block pointers, aligned tiles and the lean loop
    per_token = _loops(tmp_path, STRIXLM_ATTN_BLOCK_PTRS="0")
    unaligned = _loops(tmp_path, STRIXLM_ATTN_ALIGNED_TILES="0")
    per_tile = _loops(tmp_path, STRIXLM_ATTN_ALIGNED_TILES="0", STRIXLM_ATTN_LEAN_LOOP="0")
    runs = dict(default=default, per_token=per_token, unaligned=unaligned, per_tile=per_tile)
    common = {k: v["tile_loops"][0]["common"] for k, v in runs.items()}
    assert common["default"] < common["per_token"] < common["unaligned"] < common["per_tile"], (
        common
    )
    assert default["tile_loops"][0]["top"].get("LDGSTS") == 16  # K / V still cp.async, 16 B
    # 64-token tiles (run_remeasure.sh tile64) spread a tile's fixed work over more tokens.
    t64 = _loops(tmp_path, "--tile", "64")
    assert t64["tile"] == 64 and t64["tile_loops"][0]["common"] < 2 * common["default"]
    assert default["spill_bytes"] == 0 and default["registers"] <= 255
    assert 4 * default["shared_bytes"] <= 228 * 1024  # four programs an SM fit


def test_unified_kernel_loops(tmp_path):
    base = _loops(tmp_path, "--kernel", "unified", STRIXLM_ATTN_ALIGNED_TILES="0")
    per_token = _loops(tmp_path, "--kernel", "unified", STRIXLM_ATTN_BLOCK_PTRS="0")
    default = _loops(tmp_path, "--kernel", "unified")
    assert len(base["tile_loops"]) == 2  # the unmasked and the masked tile loop
    for b, a, d in zip(base["tile_loops"], per_token["tile_loops"], default["tile_loops"],
                       strict=True):  # fmt: skip
        assert d["common"] < b["common"] and a["common"] < b["common"], (b, a, d)
    assert default["registers"] < per_token["registers"], (default, per_token)


OFF = {"STRIXLM_ATTN_DEFER_SUM": "0", "STRIXLM_ATTN_ITEM_ROWS": "0",
       "STRIXLM_ATTN_CAUSAL_SCORES": "0"}  # fmt: skip


def test_tile_cuts_take_work_off_the_tile(tmp_path):
    """The deferred row sum (STRIXLM_ATTN_DEFER_SUM): the row sum no longer crosses the two
    warps at every tile (both kernels). Item rows (STRIXLM_ATTN_ITEM_ROWS): the persistent
    tile no longer repacks a carried q for the MMA. Together they take both off, and the
    causal-only score mask (STRIXLM_ATTN_CAUSAL_SCORES) more; all three are the default."""
    uncut = {}
    for kernel in ("persistent", "unified"):
        none = uncut[kernel] = _loops(tmp_path, "--kernel", kernel, **OFF)
        deferred = _loops(tmp_path, "--kernel", kernel, **{**OFF, "STRIXLM_ATTN_DEFER_SUM": "1"})
        for d, f in zip(none["tile_loops"], deferred["tile_loops"], strict=True):
            assert f["barriers"] < d["barriers"] and f["common"] < d["common"], (kernel, d, f)
        assert deferred["spill_bytes"] == 0, kernel
    d = uncut["persistent"]["tile_loops"][0]
    rows = _loops(tmp_path, **{**OFF, "STRIXLM_ATTN_ITEM_ROWS": "1"})["tile_loops"][0]
    both = _loops(tmp_path, **{**OFF, "STRIXLM_ATTN_ITEM_ROWS": "1", "STRIXLM_ATTN_DEFER_SUM": "1"})
    assert d["top"]["PRMT"] >= 16 and "PRMT" not in rows["top"], (d, rows)
    assert both["tile_loops"][0]["common"] < rows["common"] < d["common"], (d, rows, both)
    assert both["spill_bytes"] == 0 and both["tile_loops"][0]["barriers"] < d["barriers"]
    # The causal-only mask: the length test leaves the score mask (the loads keep it).
    three = _loops(tmp_path)  # the default
    assert three["tile_loops"][0]["common"] < both["tile_loops"][0]["common"], (both, three)
    assert three["spill_bytes"] == 0
