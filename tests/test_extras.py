"""The extras fit the users: the base install serves the CLI and the library, the ``[notebooks]`` extra the notebooks,
and a command that needs a missing extra stops with one line naming it (the packages made unimportable here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from swa_kit.cli import main
from swa_kit.commands._extras import NOTEBOOK_MODULES, NOTEBOOKS, PICTURE_MODULES, missing
from swa_kit.exit_codes import ExitCode

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11 on

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INSTALL_LINE = 'pip install "swa_kit[notebooks]"'


def _names(requirements: list[str]) -> list[str]:
    return [re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements]


def test_the_notebooks_extra_is_the_list_the_commands_check() -> None:
    assert _names(PROJECT["optional-dependencies"][NOTEBOOKS]) == list(NOTEBOOK_MODULES)
    assert set(PICTURE_MODULES) <= set(NOTEBOOK_MODULES)


def test_the_base_install_has_no_notebook_stack_and_dev_has_it() -> None:
    base = set(_names(PROJECT["dependencies"]))
    assert base and not base & set(NOTEBOOK_MODULES), base & set(NOTEBOOK_MODULES)
    extras = PROJECT["optional-dependencies"]
    assert "swa_kit[aiter,notebooks]" in extras["dev"]
    assert "swa_kit[notebooks]" in extras["sglang"]  # pytest -m sglang collects the notebook tests' modules too


def test_environment_yml_installs_the_extras_of_the_readme_tour_command() -> None:
    readme = re.search(r'^pip install -e "\.\[([a-z,]+)\]" && swa-kit tour$', (ROOT / "README.md").read_text(), re.M)
    conda = re.search(r'^ +- -e "\.\[([a-z,]+)\]"$', (ROOT / "environment.yml").read_text(), re.M)
    assert readme and conda, "README's tour command or environment.yml's pip line not found"
    assert set(conda.group(1).split(",")) == set(readme.group(1).split(",")) == {"aiter", NOTEBOOKS}


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch):
    """Make the named top-level modules unimportable in this process (``import x`` raises ImportError)."""
    def hide_(*names: str) -> None:
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)
    return hide_


def test_missing_finds_what_cannot_be_imported(hide) -> None:
    assert missing(NOTEBOOK_MODULES) == []  # this venv has the extra
    hide("nbclient", "psutil")
    assert missing(NOTEBOOK_MODULES) == ["nbclient", "psutil"]
    assert missing(["no_such_module_anywhere", "os.path.nothing"]) == ["no_such_module_anywhere", "os.path.nothing"]


@pytest.mark.parametrize("argv", [["tour", "--no-progress"], ["lab", "--dry-run"], ["lab", "--no-browser"]])
@pytest.mark.parametrize("absent", ["nbclient", "jupyterlab", "matplotlib", "psutil"])
def test_tour_and_lab_stop_with_the_extra_to_install(argv, absent, hide, tmp_path, capsys) -> None:
    hide(absent)
    assert main([*argv, "--notebooks", str(tmp_path)]) == ExitCode.CANNOT_MEASURE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"swa-kit {argv[0]}: error: needs {absent}, not installed here: {INSTALL_LINE}\n"
    assert not (tmp_path / "tour-out").exists()


@pytest.mark.parametrize("argv", [["mask", "--mode", "decode", "--kv-len", "8", "--window", "4"],
                                  ["probe", "--path", "reference", "--keys", "3", "--mode", "decode"]])
def test_a_picture_without_matplotlib_stops_before_any_work(argv, hide, tmp_path, capsys) -> None:
    png = tmp_path / "out.png"
    hide("matplotlib")
    assert main([*argv, "--png", str(png)]) == ExitCode.CANNOT_MEASURE
    captured = capsys.readouterr()
    assert captured.out == "" and not png.exists()
    assert captured.err == f"swa-kit {argv[0]}: error: needs matplotlib, not installed here: {INSTALL_LINE}\n"
    # the same command without --png needs no matplotlib, and runs
    assert main(argv) == ExitCode.OK
    assert capsys.readouterr().out
