"""benchmarks/gpu_run.py's kernel variants: an earlier build loads as a module of its own; no folder, refused."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))  # the script makes its output folder on import
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "benchmarks" / "gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_load_each_copy_and_refuse_a_missing_folder(gpu_run, tmp_path, monkeypatch) -> None:
    from swa_kit.attention import kit_triton

    monkeypatch.delenv("KIT_VARIANTS", raising=False)
    assert gpu_run._variants() == {}
    folder = tmp_path / "variants"
    folder.mkdir()
    shutil.copy(ROOT / "swa_kit" / "attention" / "kit_triton.py", folder / "earlier.py")
    monkeypatch.setenv("KIT_VARIANTS", str(folder))
    (name, module), = gpu_run._variants().items()
    assert name == "earlier" and module is not kit_triton and module.MAX_QUERIES == kit_triton.MAX_QUERIES
    monkeypatch.setenv("KIT_VARIANTS", str(tmp_path / "no_such_folder"))
    with pytest.raises(FileNotFoundError, match="KIT_VARIANTS='.*no_such_folder' is not a folder"):
        gpu_run._variants()
