"""The ``swa-kit`` command.

Each subcommand lives in its own module under :mod:`swa_kit.commands` and provides
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``. This file lists them
from :data:`swa_kit.commands.COMMANDS` and imports only the module of the command being run
(so ``swa-kit --help`` and ``swa-kit window`` start without torch), and turns the kit's
deliberate errors into a one-line reason and a non-zero exit, never a traceback. Any other exception is a
bug in the kit: one line names it and where to report it, and the exit status is ``CRASHED``, never one a
command gives (so a crash cannot pass for an audit's findings). Exit statuses are
:class:`swa_kit.exit_codes.ExitCode`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback
from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import NoReturn

from swa_kit import budget
from swa_kit.commands import COMMANDS
from swa_kit.errors import SwaKitError
from swa_kit.exit_codes import DEBUG_ENV, ExitCode, epilog
from swa_kit.files import QUOTE_CHARS

MAX_MESSAGE_WORDS = 60  # an argparse message is a sentence and its choices; past that it echoes input


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (imported on first use)."""
    return importlib.import_module(f"swa_kit.commands.{COMMANDS[name].module}")


def command_modules() -> list[ModuleType]:
    """Every command's module, in :data:`COMMANDS` order (imports them all: for tests and the README)."""
    return [command_module(name) for name in COMMANDS]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments in one line (exit 2), like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {clip_message(message)}\n")


_LONG_WORD = re.compile(rf"\S{{{QUOTE_CHARS + 1},}}")


def clip_message(message: str) -> str:
    """argparse's ``message`` on one line, each word of it (a value it echoes) cut to :data:`QUOTE_CHARS` characters,
    and at most :data:`MAX_MESSAGE_WORDS` words (``unrecognized arguments`` lists every one)."""
    words = _LONG_WORD.sub(lambda m: f"{m.group()[:QUOTE_CHARS]}... ({len(m.group()) - QUOTE_CHARS:,} more characters)",
                           " ".join(message.split())).split(" ")
    kept = words[:MAX_MESSAGE_WORDS]
    return " ".join(kept) + (f" ... ({len(words) - len(kept):,} more words)" if len(words) > len(kept) else "")


def kit_version() -> str:
    """The installed distribution's version (``unknown`` when run from a checkout that was never installed)."""
    try:
        return version("swa_kit")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the commands in ``load`` (default: all) get their arguments, and so their imports."""
    parser = _Parser(prog="swa-kit", description="Sliding-window attention in LLM serving: teach, explore, debug.",
                     epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"swa-kit {kit_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        subparser = sub.add_parser(name, help=command.help, description=command.help)
        if load is None or name in load:
            module = command_module(name)
            module.add_arguments(subparser)
            subparser.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The top level has no option that takes a value, so the first word that is no option names the command.
    named = next((word for word in argv if not word.startswith("-")), None)
    try:
        return _run(argv, named)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as error:  # anything the kit did not raise on purpose is a bug in the kit
        _report_crash(f"swa-kit {named}" if named in COMMANDS else "swa-kit", error)
        return ExitCode.CRASHED


def _run(argv: list[str], named: str | None) -> int:
    """Parse ``argv`` and run its command; the kit's deliberate errors become one line and an exit status."""
    args = build_parser(load={named} & COMMANDS.keys() if named else set()).parse_args(argv)
    try:
        with budget.limits(getattr(args, "max_memory", None), getattr(args, "max_seconds", None)):
            return int(args.run(args) or 0)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error of ours
        sys.stderr.close()
        return ExitCode.OK
    except (SwaKitError, ValueError, OSError) as error:  # OSError: a file that is a folder, unreadable, ...
        print(f"swa-kit {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except MemoryError:
        print(f"swa-kit {args.command}: error: out of memory; try smaller sizes or a lower --max-memory",
              file=sys.stderr)
        return ExitCode.BAD_INPUT


def _report_crash(prog: str, error: Exception) -> None:
    """One line naming the exception, where it was raised and where to report it; the traceback with DEBUG_ENV=1."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    hint = "traceback below" if debug else f"rerun with {DEBUG_ENV}=1 for the traceback"
    print(f"{prog}: internal error: {type(error).__name__}: {_one_line(error)}{where}. This is a bug in swa-kit, not "
          f"in your input: please report it in swa-kit's issue tracker with this line and the command ({hint})",
          file=sys.stderr)
    if debug:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    raise SystemExit(main())
