"""Every ``swa-kit`` command shown in README.md and docs/*.md runs, in-process, and exits as its prose says.

Commands come from fenced code blocks and inline code. One that names a command alone (``swa-kit audit`` in a
sentence) must have a working ``--help``; one followed by "exit N" (e.g. "refuses, exit 3") must exit N; any
other must run without bad input (exit 2) or a crash (exit 70). Commands that need what a test machine lacks are
skipped by an explicit list, each with its reason.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from swa_kit.cli import main
from swa_kit.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Commands not run here, each with why.
SKIPPED: dict[str, str] = {
    "swa-kit lab": "starts a JupyterLab server",
    "swa-kit lab --exercises": "starts a JupyterLab server (tests/test_exercises.py writes the exercise versions)",
    "swa-kit tour": "executes every notebook (tests/test_tour.py runs it)",
    "swa-kit spec-demo": "decodes the tiny model under every resolver for minutes (tests/test_speculative.py)",
    "swa-kit COMMAND": "a placeholder for any command",
    "swa-kit audit ...": "the elided arguments are the reader's own launch",
    "swa-kit audit ... --sglang-version before-38756": "the elided arguments are the reader's own launch",
    "swa-kit audit ... --check-with-sglang": "the reader's own launch, and SGLang installed "
                                             "(tests/test_audit_sglang_check_sglang.py runs it)",
    "swa-kit key-gap --model DIR --prompt-file F": "needs a local checkpoint",
    "swa-kit key-gap --model DIR --prompt-file prompt.txt --new-tokens 64": "needs a local checkpoint",
    "swa-kit key-gap --model /models/gemma-4-31b-it --prompt-file long_prompt.txt": "needs Gemma-4's checkpoint",
    'swa-kit audit --hf-config config.json --server-args "..." --trace /tmp/swa-trace.jsonl':
        "needs a trace recorded in a live SGLang server",
    'swa-kit audit --engine vllm --hf-config config.json --server-args "..." --trace /tmp/vllm-trace.jsonl':
        "needs a trace recorded in a live vLLM server (tests/test_trace_vllm_records.py runs the command on records)",
}
_EXIT = re.compile(r"\s*\(?(?:refuses|refused)?,?\s*exit (\d+)")


def _commands() -> dict[str, tuple[str, int | None]]:
    """``{command: (file, the exit status its prose states or None)}``, whitespace normalised, comments dropped."""
    found: dict[str, tuple[str, int | None]] = {}
    for path in FILES:
        text = path.read_text()
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith("swa-kit "):
                    found.setdefault(" ".join(line.split("  #")[0].split()), (path.name, None))
        prose = re.sub(r"```.*?```", "", text, flags=re.S).replace("\n", " ")
        for match in re.finditer(r"`(swa-kit [^`]+)`", prose):
            stated = _EXIT.match(prose, match.end())
            command = " ".join(match.group(1).split())
            file, before = found.get(command, (path.name, None))
            found[command] = (file, int(stated.group(1)) if stated else before)
    return found


COMMANDS = _commands()


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's --help and usage errors
            code = stop.code if isinstance(stop.code, int) else ExitCode.BAD_INPUT
    return int(code or 0), out.getvalue()


def test_the_docs_show_commands_and_state_exits():
    assert len(COMMANDS) >= 30
    assert {c: e for c, (_, e) in COMMANDS.items() if e is not None} == {
        "swa-kit explain --model gemma3-27b --mode decode": 3,
        "swa-kit explain --model gemma4-31b --mode verify --spec eagle --topk 4": 3}
    assert set(SKIPPED) <= set(COMMANDS), set(SKIPPED) - set(COMMANDS)  # no stale skip


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in SKIPPED])
def test_command_runs_as_the_prose_says(command):
    file, stated = COMMANDS[command]
    argv = shlex.split(command)[1:]
    named_only = len(argv) == 1 and not argv[0].startswith("-")
    if named_only and run(argv)[0] == ExitCode.BAD_INPUT:  # a command named in a sentence: it must exist
        argv = [*argv, "--help"]
        stated = 0
    code, output = run(argv)
    if stated is not None:
        assert code == stated, f"{file}: `{command}` exits {code}, the prose says {stated}\n{output[-800:]}"
    else:
        assert code not in (ExitCode.BAD_INPUT, ExitCode.CRASHED), f"{file}: `{command}` exits {code}\n{output[-800:]}"
