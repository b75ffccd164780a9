"""``swa-kit resolve [--json]``: which SWA pool each resolver picks for every worker, and what breaks."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.tables import print_table

NAME = "resolve"
HELP = "print the SWA-pool resolver decision table (legacy / naive / fixed x role x algorithm x model kind)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows")
    parser.add_argument("--wrong", action="store_true", help="only the rows where a resolver picks the wrong pool")
    parser.add_argument("--hybrid-drafts", action="store_true",
                        help="add the draft rows of a hybrid-SWA draft (MiMoV2MTP, Step3p5MTP) that owns an SWA pool")


def run(args: argparse.Namespace) -> int:
    from swa_kit.engine.resolver import decision_table, hybrid_draft_table  # builds real pools: import only when asked

    table = decision_table() + (hybrid_draft_table() if args.hybrid_drafts else [])
    rows = [r for r in table if not (args.wrong and r["correct"])]
    if args.json:
        print_json(rows)
        return 0
    for row in rows:
        row["consequence"] = row["consequence"].split(":")[0]  # the long form is in --json
    print_table(rows, ["model", "role", "algorithm", "resolver", "returns", "wanted", "correct", "consequence"])
    return 0
