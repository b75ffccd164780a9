"""The kit's run-time data comes from the package ``swa_kit.data``, and the wheel's package-data globs
cover every file its readers open (the built wheel itself is checked end to end by .ci/wheel-check)."""

from __future__ import annotations

import zipfile
from importlib.resources import files
from pathlib import Path, PurePosixPath

import pytest

from swa_kit import resources
from swa_kit.measure.bench import RECORDED_DIR, recorded_files
from swa_kit.measure.bench.verify_paths import VERIFY_PATHS_RECORD
from swa_kit.models.configs import MODELS_DIR, list_models
from swa_kit.lessons.tiny_model import CHECKPOINT, DATA_DIR
from swa_kit.resources import DATA_PACKAGE, data_path

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11 on

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_readers_take_their_folders_from_the_package() -> None:
    root = Path(str(files(DATA_PACKAGE))).resolve()
    assert data_path() == root
    assert (MODELS_DIR, DATA_DIR, RECORDED_DIR) == (root / "models", root / "tiny_model", root / "bench")


def test_package_data_ships_every_file_the_readers_open() -> None:
    globs = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"][DATA_PACKAGE]
    read = [MODELS_DIR / f"{name}.json" for name in list_models()] + recorded_files()
    read += [DATA_DIR / CHECKPOINT, DATA_DIR / "config.json", VERIFY_PATHS_RECORD]
    traces = sorted(data_path("traces").glob("*.jsonl"))  # swa-kit audit --trace's recorded example
    assert traces, "no recorded trace under data/traces"
    read += traces
    assert len(list_models()) >= 1 and recorded_files(), "the readers found no data at all"
    for path in read:
        assert path.is_file(), path
        relative = PurePosixPath(path.relative_to(data_path()).as_posix())
        assert any(relative.match(glob) for glob in globs), f"{relative} is read at run time but not in {globs}"


def test_data_inside_a_zip_is_refused_with_the_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "swa_kit.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("swa_kit/data/__init__.py", "")
    monkeypatch.setattr(resources, "files", lambda _package: zipfile.Path(archive, "swa_kit/data/"))
    with pytest.raises(FileNotFoundError, match="install swa_kit with pip"):
        data_path("models")
