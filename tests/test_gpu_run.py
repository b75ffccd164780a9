"""benchmarks/gpu_run.py's kernel variants: an earlier build loads as a module of its own, never as the kit's path;
no folder refused. Its window sweep's line: fixed cost in us and streaming rate in TB/s, recovered from times built
from known ones."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from benchmark_scripts import load_script

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture
def gpu_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))  # the script makes its output folder on import
    return load_script("gpu_run")


def test_variants_load_each_copy_and_refuse_a_missing_folder(gpu_run, tmp_path, monkeypatch) -> None:
    from swa_kit.attention.kit import kernel as kit_triton

    monkeypatch.delenv("KIT_VARIANTS", raising=False)
    assert gpu_run._variants() == {}
    folder = tmp_path / "variants"
    folder.mkdir()
    shutil.copy(Path(kit_triton.__file__), folder / "earlier.py")
    monkeypatch.setenv("KIT_VARIANTS", str(folder))
    (name, module), = gpu_run._variants().items()
    assert name == "earlier" and module is not kit_triton and module.MAX_QUERIES == kit_triton.MAX_QUERIES
    monkeypatch.setenv("KIT_VARIANTS", str(tmp_path / "no_such_folder"))
    with pytest.raises(FileNotFoundError, match="KIT_VARIANTS='.*no_such_folder' is not a folder"):
        gpu_run._variants()


def test_the_window_sweep_line_recovers_a_known_fixed_cost_and_rate(gpu_run) -> None:
    import random

    rng = random.Random()
    fixed_us, rate_tbs = rng.uniform(5, 15), rng.uniform(1, 5)
    nbytes = sorted(rng.sample(range(2**24, 2**30), 5))
    us = [fixed_us + n / (rate_tbs * 1e12) * 1e6 for n in nbytes]
    fixed, rate = gpu_run.fit_fixed_and_rate(nbytes, us)
    assert fixed == pytest.approx(fixed_us, rel=1e-6) and rate == pytest.approx(rate_tbs, rel=1e-6)
    for few in ([2**20], [2**20, 2**20]):
        with pytest.raises(ValueError, match="a line needs two byte counts at least"):
            gpu_run.fit_fixed_and_rate(few, [1.0] * len(few))


def test_a_loaded_copy_leaves_the_kits_path_the_kits() -> None:
    """The table names the kit's module, so a copy loaded beside it (under a name of its own) never runs as the kit's
    path."""
    import pkgutil

    from benchmarks.kernel_variants import load_variant
    from swa_kit.attention.kit import kernel as kit_triton
    from swa_kit.attention.paths import get_path

    copy = load_variant(Path(kit_triton.__file__))
    assert copy is not kit_triton and copy.run_batch is not kit_triton.run_batch
    assert pkgutil.resolve_name(get_path("kit_triton_swa").implementation) is kit_triton.run_batch
