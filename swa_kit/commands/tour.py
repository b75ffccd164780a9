"""``swa-kit tour``: execute every notebook headless; write HTML, figures and a summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from swa_kit.commands._args import positive_seconds
from swa_kit.commands._extras import NOTEBOOK_MODULES, require
from swa_kit.commands._output import print_json
from swa_kit.errors import UsageError
from swa_kit.exit_codes import ExitCode
from swa_kit.lessons.tour import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_OUT,
    find_notebooks_dir,
    list_notebooks,
    render_summary,
    run_tour,
    select_notebooks,
)

NAME = "tour"
HELP = "execute every notebook headless into an output folder (HTML, figures, summary.json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"output folder (default ./{DEFAULT_OUT})")
    parser.add_argument("--notebooks", type=Path, default=None, metavar="DIR",
                        help="folder of .ipynb notebooks (default: the notebooks shipped with the kit)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only the notebooks whose name starts with NAME, e.g. --only 04 (repeatable)")
    parser.add_argument("--cell-timeout", type=positive_seconds, default=DEFAULT_CELL_TIMEOUT, metavar="SECONDS",
                        help=f"limit for any one cell (default {DEFAULT_CELL_TIMEOUT:g})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print summary.json instead of the text summary")


def run(args: argparse.Namespace) -> int:
    if (stopped := require(NAME, NOTEBOOK_MODULES)) is not None:
        return stopped
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {str(args.out)!r} is a file, not a folder; pass another --out DIR")
    notebooks = select_notebooks(list_notebooks(find_notebooks_dir(args.notebooks)), args.only)
    summary = run_tour(notebooks, args.out, cell_timeout=args.cell_timeout, progress=not args.no_progress)
    if args.json:
        print_json(summary)
    else:
        print(render_summary(summary))
    return ExitCode.OK if summary["ok"] else ExitCode.DISAGREES
