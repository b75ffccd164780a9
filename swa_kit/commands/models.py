"""``swa-kit models [--json]``: the bundled models, KV bytes per token, SGLang's real sizing and the per-request
minimum."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.models.configs import load_all, load_hf_config, load_model
from swa_kit.errors import UsageError
from swa_kit.models.memory import per_token_summary, savings
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.tables import print_table

NAME = "models"
HELP = ("list the bundled models with KV bytes per token, what SGLang's start-up pool sizing saves, and the "
        "per-request minimum beside it")
MINIMUM_NOTE = ("min_* columns: the PER-REQUEST MINIMUM (SWA layers hold only the window of one request at that "
                f"context), not SGLang's sizing; sglang_saved_pct: what SGLang {SGLANG_VERSION}'s pool configurator "
                "saves by default (SWA tokens = full tokens x swa_full_tokens_ratio 0.8), per token of context.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="one bundled model (default: all)")
    parser.add_argument("--hf-config", metavar="PATH", help="a config.json or a model directory, instead of NAME")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _minimum_rows(layout) -> list[dict]:
    return [{"model": r.model, "context": r.context, "one_pool_gib": r.as_row()["one_pool_gib"],
             "min_hybrid_gib": r.as_row()["hybrid_gib"], "min_saved_pct": r.as_row()["saved_pct"]}
            for r in savings(layout)]


def run(args: argparse.Namespace) -> int:
    from swa_kit.launch.decide import default_sizing  # reads transformers and builds pools: import when asked

    if args.hf_config and args.name:
        raise UsageError(f"give a bundled model NAME ({args.name!r}) or --hf-config PATH, not both")
    if args.hf_config:
        layouts = [load_hf_config(args.hf_config)]
    else:
        layouts = [load_model(args.name)] if args.name else load_all()
    sizing = [default_sizing(m) for m in layouts]
    if args.json:
        print_json([{**per_token_summary(m), "sglang_sizing": s, "per_request_minimum": _minimum_rows(m),
                     "sources": m.sources, "unverified": list(m.unverified)} for m, s in zip(layouts, sizing)])
        return 0
    print_table([per_token_summary(m) for m in layouts])
    print()
    print_table(sizing)
    print()
    print_table([r for m in layouts for r in _minimum_rows(m)])
    print(f"\n{MINIMUM_NOTE}")
    return 0
