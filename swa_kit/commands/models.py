"""``swa-kit models [--json]``: the shipped model specs, KV bytes per token and hybrid-pool savings."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.configs import load_all, load_model
from swa_kit.memory import per_token_summary, savings
from swa_kit.tables import print_table

NAME = "models"
HELP = "list the model specs in data/models with KV bytes per token and savings at 8k/32k/128k"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="one model (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    specs = [load_model(args.name)] if args.name else load_all()
    if args.json:
        print_json([{**per_token_summary(s), "savings": [r.as_row() for r in savings(s)],
                     "sources": s.sources, "unverified": list(s.unverified)} for s in specs])
        return 0
    print_table([per_token_summary(s) for s in specs])
    print()
    print_table([r.as_row() for s in specs for r in savings(s)])
    print("\nhybrid_gib assumes the SWA pool holds exactly the window per request; see swa_kit/memory.py.")
    return 0
