"""The commit benchmark records name: HEAD in a checkout, the archived commit in a
`git archive` snapshot (git's export-subst), nothing from an enclosing repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from strixlm.source_commit import source_commit

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout() -> str:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    try:
        return _git("rev-parse", "HEAD")
    except subprocess.CalledProcessError:
        pytest.skip("not a git checkout")


def test_checkout_names_its_head(checkout):
    assert source_commit() == checkout


def test_archive_names_the_archived_commit(checkout, tmp_path):
    """A snapshot unpacked inside another repository (as the GPU runs carry it) names the
    commit it was archived from, not the enclosing repository's HEAD."""
    outer = tmp_path / "outer"
    outer.mkdir()
    _git("init", "-q", cwd=outer)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m",
         "outer", cwd=outer)  # fmt: skip
    tar = tmp_path / "snap.tar"
    _git("archive", "-o", str(tar), checkout, "strixlm/source_commit.py", "strixlm/__init__.py")
    snap = outer / "snap"
    with tarfile.open(tar) as t:
        t.extractall(snap, filter="data")
    code = "from strixlm.source_commit import source_commit; print(source_commit())"
    got = subprocess.run([sys.executable, "-c", code], cwd=snap, capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    assert got == checkout and got != _git("rev-parse", "HEAD", cwd=outer)
