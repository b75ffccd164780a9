"""The kit's run-time data comes from the package ``swa_kit.data`` and its notebooks from ``swa_kit/notebooks``, and
the wheel's package-data globs cover every file the readers open, the notebooks and every file they link to (the
built wheel itself is checked end to end by .ci/wheel-check)."""

from __future__ import annotations

import os
import re
import zipfile
from importlib.resources import files
from pathlib import Path, PurePosixPath

import pytest

from swa_kit import resources
from swa_kit.measure.bench import RECORDED_DIR, recorded_files
from swa_kit.measure.bench.verify_paths import VERIFY_PATHS_RECORD
from swa_kit.models.configs import MODELS_DIR, list_models
from swa_kit.lessons.tiny_model import CHECKPOINT, DATA_DIR
from swa_kit.lessons.tour import list_notebooks, twin_path
from swa_kit.resources import DATA_PACKAGE, PACKAGE, data_path, notebooks_path

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11 on

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def _package_data(package: str) -> list[str]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"][package]


def _shipped(path: Path, root: Path, globs: list[str]) -> bool:
    relative = PurePosixPath(path.relative_to(root).as_posix())
    return any(relative.match(glob) for glob in globs)


def test_readers_take_their_folders_from_the_package() -> None:
    root = Path(str(files(DATA_PACKAGE))).resolve()
    assert data_path() == root
    assert (MODELS_DIR, DATA_DIR, RECORDED_DIR) == (root / "models", root / "tiny_model", root / "bench")


def test_package_data_ships_every_file_the_readers_open() -> None:
    globs = _package_data(DATA_PACKAGE)
    read = [MODELS_DIR / f"{name}.json" for name in list_models()] + recorded_files()
    read += [DATA_DIR / CHECKPOINT, DATA_DIR / "config.json", VERIFY_PATHS_RECORD]
    traces = sorted(data_path("traces").glob("*.jsonl"))  # swa-kit audit --trace's recorded example
    assert traces, "no recorded trace under data/traces"
    read += traces
    assert len(list_models()) >= 1 and recorded_files(), "the readers found no data at all"
    for path in read:
        assert path.is_file(), path
        assert _shipped(path, data_path(), globs), f"{path} is read at run time but not in {globs}"


def test_the_notebooks_come_from_the_package_and_keep_the_checkouts_layout() -> None:
    package = Path(str(files(PACKAGE))).resolve()
    assert notebooks_path() == (package / "notebooks").resolve() == ROOT / "notebooks"
    # inside the package, as in the checkout, ../data beside the notebooks is the shipped data
    assert (notebooks_path() / ".." / "data").resolve() == data_path()


def test_package_data_ships_the_notebooks_their_twins_and_what_they_link_to() -> None:
    globs, package = _package_data(PACKAGE), Path(str(files(PACKAGE)))
    notebooks = list_notebooks(notebooks_path())
    shipped = {f"notebooks/{path.name}" for notebook in notebooks for path in (notebook, twin_path(notebook))}
    for notebook in notebooks:
        links = re.findall(r"\]\(([^)\s#]+)", notebook.read_text())
        shipped |= {os.path.normpath(f"notebooks/{link}") for link in links if not re.match(r"[a-z]+:", link)}
    assert len(shipped) > 2 * len(notebooks), "the notebooks link to nothing"
    for relative in sorted(shipped):  # where the link lands inside the package: notebooks/../docs is docs/
        assert (package / relative).is_file(), relative
        assert _shipped(package / relative, package, globs), f"{relative} is not in swa_kit's package data {globs}"


def test_data_inside_a_zip_is_refused_with_the_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "swa_kit.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("swa_kit/data/__init__.py", "")
    monkeypatch.setattr(resources, "files", lambda _package: zipfile.Path(archive, "swa_kit/data/"))
    with pytest.raises(FileNotFoundError, match="install swa_kit with pip"):
        data_path("models")
