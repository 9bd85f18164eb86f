"""benchmarks/gpu/run_remeasure.sh, the device calls' driver: its section files parse, each
section name is defined once, and a mistyped name stops the call before anything runs (the
device time of a call is precious; a silent no-op section wasted it before). The screened
A/Bs spend workload time only on a setting that screened faster and passed its check (the
GPU commands replaced by a stand-in `python` that writes what they would)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
SECTION_FILES = sorted((GPU / "remeasure").glob("*.sh"))

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _remeasure(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "OUT": str(tmp_path / "out")}
    cmd = ["bash", "benchmarks/gpu/run_remeasure.sh", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _defined_sections() -> list[str]:
    pattern = re.compile(r"^section_(\w+)\(\) \{", re.M)
    return [name for f in SECTION_FILES for name in pattern.findall(f.read_text())]


def test_device_scripts_parse():
    scripts = sorted(GPU.glob("*.sh")) + SECTION_FILES
    assert SECTION_FILES, "no section files under benchmarks/gpu/remeasure"
    for script in scripts:
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"


def test_each_section_defined_once():
    names = _defined_sections()
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, f"sections defined twice: {dupes}"
    assert {"closing", "checks", "screen", "tail64", "midgrid"} <= set(names)


def test_list_prints_every_section(tmp_path):
    r = _remeasure(tmp_path, "list")
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split()
    assert sorted(listed) == sorted(_defined_sections())


def test_unknown_section_stops_before_running(tmp_path):
    # "closing" is valid but must not start: the typo after it is checked first.
    r = _remeasure(tmp_path, "closing", "closng")
    assert r.returncode == 2
    assert "unknown section 'closng'" in r.stderr
    assert "=== " not in r.stdout  # lib.sh's run() prints "=== NAME" as a command starts
    assert not list((tmp_path / "out").glob("*.log"))


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the GPU commands; the sections' own inline scripts run the real python.
case "$1" in
  -) exec "$REAL_PYTHON" "$@" ;;
  benchmarks/gpu/bench_decode_timeline.py)
    json=$(echo "$@" | sed -n 's/.*--json \\([^ ]*\\).*/\\1/p')
    us=100; [[ $STRIXLM_ATTN_DEFER_SUM == 0 ]] && us=$FAKE_DEFER_US
    echo "[{\\"us_per_launch\\": $us}]" > "$json" ;;
  benchmarks/gpu/check_attention.py) exit "${FAKE_CHECK_RC:-0}" ;;
  *) echo "strixlm  fake workload run" ;;
esac
"""


@pytest.mark.parametrize(
    "defer_us,check_rc,screen_only,runs",
    [
        (99.0, 0, "", ["attn_check_uncut", "tp_warm"]
         + [f"tp_uncut_{k}{i}" for i in (1, 2, 3) for k in ("on", "off")]),
        (99.0, 1, "", ["attn_check_uncut"]),  # a wrong kernel gets no workload time
        (99.0, 0, "1", []),  # SCREEN_ONLY: the screen alone
        (99.8, 0, "", []),  # not 0.5% faster: no check, no workload
    ],
)  # fmt: skip
def test_screen_gates_the_workload_ab(tmp_path, defer_us, check_rc, screen_only, runs):
    """screen_ab (here through `uncut`): the per-launch screen decides whether the
    workload A/B runs, and a failed check_attention under the setting stops it."""
    import sys

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text(FAKE_PYTHON)
    (fake / "python").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "OUT": str(tmp_path / "out"), "REAL_PYTHON": sys.executable,
           "FAKE_DEFER_US": str(defer_us), "FAKE_CHECK_RC": str(check_rc),
           "SCREEN_ONLY": screen_only}  # fmt: skip
    r = subprocess.run(["bash", "benchmarks/gpu/run_remeasure.sh", "uncut"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == (1 if check_rc else 0), r.stderr  # a failed check fails the call
    started = re.findall(r"^=== (\S+)", r.stdout, re.M)
    screens = ["uncut_default1", "uncut_on", "uncut_default2"]
    assert started == screens + runs, r.stdout
