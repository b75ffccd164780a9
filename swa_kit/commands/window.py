"""``swa-kit window --from CONVENTION VALUE``: one window in every API's convention."""

from __future__ import annotations

import argparse
import re

from swa_kit.commands._output import print_json
from swa_kit.tables import print_table
from swa_kit.window import CONVENTIONS, Window, parse_value

NAME = "window"
HELP = "print a window value in every API's convention and the keys it attends"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Let "-1" and "-1,-1" (off sentinels) through as the positional VALUE rather than as
    # unknown options; this parser has no option that looks like a number.
    parser._negative_number_matcher = re.compile(r"^-\d+(,\s*-?\d+)?$")  # noqa: SLF001
    parser.add_argument("--from", dest="convention", required=True, choices=list(CONVENTIONS), metavar="CONVENTION",
                        help="convention VALUE is written in: " + ", ".join(CONVENTIONS))
    parser.add_argument("value", help="the window as that convention writes it, e.g. 1023, -1, none, 1023,0")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    window = Window.from_convention(args.convention, parse_value(args.value))
    everywhere = window.everywhere()
    if args.json:
        print_json({"keys": window.keys, **everywhere})
        return 0
    attended = "no window (full causal)" if window.keys is None else f"{window.keys} keys, counting the query itself"
    print(f"{args.convention} {args.value} attends {attended}")
    print_table([{"convention": n, "parameter": CONVENTIONS[n].parameter, "value": v} for n, v in everywhere.items()])
    return 0
