"""benchmarks/gpu/run_remeasure.sh, the device calls' driver: its section files parse, each
section name is defined once, and a mistyped name stops the call before anything runs (the
device time of a call is precious; a silent no-op section wasted it before)."""

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
