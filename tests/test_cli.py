"""Generic CLI behaviour for every discovered subcommand: --help works, bad input is one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swa_kit import commands
from swa_kit.cli import EXIT_BAD_INPUT, build_parser, command_modules, main

COMMANDS = [module.NAME for module in command_modules()]


def test_every_command_module_is_complete():
    for module in command_modules():
        assert isinstance(module.NAME, str) and module.NAME and isinstance(module.HELP, str) and module.HELP
        assert callable(module.add_arguments) and callable(module.run), module.__name__


def test_the_command_table_matches_the_modules():
    """The CLI lists commands from commands.COMMANDS without importing them: it must say what the modules say."""
    found = sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))
    modules = {name: importlib.import_module(f"swa_kit.commands.{name}") for name in found}
    assert commands.COMMANDS == {m.NAME: commands.Command(name, m.HELP) for name, m in modules.items()}


def test_top_level_help_lists_every_command_with_its_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    for module in command_modules():
        assert module.NAME in out and " ".join(module.HELP.split()) in out


def test_the_foundation_commands_are_there():
    assert {"doctor", "window", "tour", "lab"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: swa-kit {name}")


@pytest.mark.parametrize("name", COMMANDS)
def test_unknown_option_is_one_line_and_exit_2(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--no-such-option-anywhere"])
    assert exit_info.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("swa-kit") and ": error:" in err, err


def test_no_or_unknown_command(capsys):
    for argv in ([], ["no-such-command"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == EXIT_BAD_INPUT
        assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["doctor", "--aiter-timeout", "-1"],
    ["doctor", "--aiter-timeout", "soon"],
    ["tour", "--notebooks", "/nonexistent/notebooks"],
    ["tour", "--cell-timeout", "0"],
    ["lab", "--notebooks", "/nonexistent/notebooks", "--dry-run"],
    ["lab", "--port", "70000", "--dry-run"],
])
def test_bad_values_of_the_foundation_commands(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_info:  # argparse-level rejections
        code = exit_info.code
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err, err


def test_tour_out_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("")
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    assert main(["tour", "--out", str(target), "--notebooks", str(notebooks)]) == EXIT_BAD_INPUT
    assert "is a file" in capsys.readouterr().err


def test_empty_notebooks_folder(tmp_path, capsys):
    assert main(["tour", "--notebooks", str(tmp_path), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert "no .ipynb notebooks" in capsys.readouterr().err


def test_python_dash_m_entry_point_rejects_bad_input_without_traceback():
    result = subprocess.run([sys.executable, "-m", "swa_kit", "tour", "--notebooks", "/nonexistent"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# --- the README's CLI reference, generated from the parser ----------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- cli-reference:begin -->", "<!-- cli-reference:end -->"


def cli_reference() -> str:
    """Markdown for every subcommand: its --help at a fixed width, so the text is the same on every machine."""
    parts = [BEGIN, "<!-- generated from the parser: SWA_KIT_WRITE_README=1 python -m pytest tests/test_cli.py "
                    "-k readme -->"]
    for module in command_modules():
        parser = argparse.ArgumentParser(prog=f"swa-kit {module.NAME}", description=module.HELP,
                                         formatter_class=lambda prog: argparse.HelpFormatter(prog, width=100))
        module.add_arguments(parser)
        parts += [f"### `swa-kit {module.NAME}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    parts.append(END)
    return "\n".join(parts)


def test_readme_cli_reference_matches_the_parser():
    text = README.read_text()
    assert BEGIN in text and END in text, f"README.md lacks the {BEGIN} ... {END} block"
    head, rest = text.split(BEGIN, 1)
    current, tail = rest.split(END, 1)
    generated = cli_reference()
    if os.environ.get("SWA_KIT_WRITE_README") == "1":
        README.write_text(head + generated + tail)
        current = generated[len(BEGIN):-len(END)]
    assert BEGIN + current + END == generated, (
        "README.md's CLI reference is out of date: SWA_KIT_WRITE_README=1 python -m pytest tests/test_cli.py -k readme")
    for name in COMMANDS:
        assert f"### `swa-kit {name}`" in text


def test_readme_setup_commands_and_ci_agree():
    text = README.read_text()
    main_job = 'pip install -e ".[aiter,notebooks]" && swa-kit tour'
    test_job = 'pip install -e ".[dev]" && python -m pytest -n 2'
    assert f"```bash\n{main_job}\n```" in text and f"```bash\n{test_job}\n```" in text
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert 'python -m pip install -q -e ".[dev]"' in ci
    assert "python -m pytest -n 2" in ci  # exactly the README's test command, on a line of its own
    assert not any("|| true" in line for line in ci)


def test_readme_and_help_list_every_exit_status(capsys):
    from swa_kit.exit_codes import ExitCode

    statuses = re.findall(r"^\| (\d+) \| ", README.read_text(), flags=re.MULTILINE)
    assert sorted(map(int, statuses)) == sorted(int(code) for code in ExitCode)
    with pytest.raises(SystemExit):
        main(["--help"])
    lines = capsys.readouterr().out.split("exit status:\n", 1)[1].splitlines()
    assert [int(line.split()[0]) for line in lines if line.strip()] == [int(code) for code in ExitCode]
