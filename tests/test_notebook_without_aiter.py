"""Notebook 04 runs where the amd-aiter wheel is absent: its aiter cells say why and skip.

The kernel gets a ``sitecustomize`` that makes amd-aiter look uninstalled to the whole interpreter: its
distribution metadata is not found and the path finder does not find ``aiter``, the two ways the kit looks for
it. The rest of the environment is this one, so nothing else changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swa_kit.lessons.tour import find_notebooks_dir, run_notebook

HIDE_AITER = '''
import importlib.machinery
import importlib.metadata

_distribution = importlib.metadata.distribution
_find_spec = importlib.machinery.PathFinder.find_spec.__func__


def distribution(name):
    if name.lower().replace("_", "-") in ("amd-aiter", "aiter"):
        raise importlib.metadata.PackageNotFoundError(name)
    return _distribution(name)


def find_spec(cls, fullname, path=None, target=None):
    return None if fullname.split(".")[0] == "aiter" else _find_spec(cls, fullname, path, target)


importlib.metadata.distribution = distribution
importlib.machinery.PathFinder.find_spec = classmethod(find_spec)
'''
PROBE_AITER = ("from swa_kit.attention.paths import get_path; from swa_kit import machine; "
               "ok, why = get_path('aiter_triton_unified').available(); "
               "print(ok, machine.aiter_version(), machine.aiter_location(), why, sep='|')")


@pytest.fixture
def aiter_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """PYTHONPATH, for this test's child processes, under which amd-aiter looks uninstalled; returns the reason
    the aiter Triton path gives there."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_AITER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    probe = subprocess.run([sys.executable, "-c", PROBE_AITER], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    ok, version, location, why = probe.stdout.strip().split("|", 3)
    assert (ok, version, location) == ("False", "None", "None"), probe.stdout
    assert "amd-aiter" in why and 'swa_kit[aiter]' in why
    return why


@pytest.mark.notebook
def test_notebook_04_skips_its_aiter_cells_with_the_reason(aiter_hidden: str) -> None:
    notebook = find_notebooks_dir() / "04_aiter_dispatch_and_guards.ipynb"
    nb, run = run_notebook(notebook, cell_timeout=300, threads=1)
    assert run.status == "ok", f"cell index {run.failed_cell}: {run.error}"
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert f"aiter's Triton kernels cannot run here, so sections 3 and 4 skip them: {aiter_hidden}" in printed
    assert f"Exercise 4.2's check skipped: the unified sites were not measured ({aiter_hidden})" in printed
    assert f"aiter's unified_attention not drawn: {aiter_hidden}" in printed
    used = {p["path"] for p in run.paths}
    assert "aiter_triton_unified" not in used and "reference" in used  # the other paths still ran
