"""The ``swa-kit`` command.

Each subcommand lives in its own module under :mod:`swa_kit.commands` and provides
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``. This file lists them
from :data:`swa_kit.commands.COMMANDS` and imports only the module of the command being run
(so ``swa-kit --help`` and ``swa-kit window`` start without torch), and turns the kit's
deliberate errors into a one-line reason and a non-zero exit, never a traceback. Exit statuses are
:class:`swa_kit.exit_codes.ExitCode`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import NoReturn

from swa_kit import budget
from swa_kit.commands import COMMANDS
from swa_kit.errors import SwaKitError
from swa_kit.exit_codes import ExitCode, epilog

EXIT_BAD_INPUT = ExitCode.BAD_INPUT


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (imported on first use)."""
    return importlib.import_module(f"swa_kit.commands.{COMMANDS[name].module}")


def command_modules() -> list[ModuleType]:
    """Every command's module, in :data:`COMMANDS` order (imports them all: for tests and the README)."""
    return [command_module(name) for name in COMMANDS]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments in one line (exit 2), like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


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
    args = build_parser(load=COMMANDS.keys() & {named}).parse_args(argv)
    try:
        with budget.limits(getattr(args, "max_memory", None), getattr(args, "max_seconds", None)):
            return int(args.run(args) or 0)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error of ours
        sys.stderr.close()
        return ExitCode.OK
    except (SwaKitError, ValueError, OSError) as error:  # OSError: a file that is a folder, unreadable, ...
        print(f"swa-kit {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print(f"swa-kit {args.command}: error: out of memory; try smaller sizes or a lower --max-memory",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    raise SystemExit(main())
