"""``swa-kit explain --model NAME --mode MODE``: the aiter backend's route for every layer, and its guards."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.configs import list_models
from swa_kit.exit_codes import ExitCode
from swa_kit.dispatch import ENV_DEFAULTS, MODES, RESOLVERS, SPEC_ALGOS, explain, plan

NAME = "explain"
HELP = "show which aiter kernel, window argument and page table SGLang uses per layer, and where it refuses"

JSON_SHAPE = (
    "--json prints one object: {\"layers\": [{layer, kind, path, window_arg, page_table, guard, ...} per layer], "
    "\"error\": null or the refusal message, plus model, mode, spec, topk, env and the backend flags}. "
    "An object, not a bare list, because a list cannot also carry the top-level error. Exit 0 when the plan "
    "is accepted, 3 when a guard refuses it (the JSON / table still prints)."
)
EXIT_REFUSED = ExitCode.REFUSED


def _env_pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. SGLANG_USE_AITER_UNIFIED_ATTN=1")
    key, value = text.split("=", 1)
    if key not in ENV_DEFAULTS:
        raise argparse.ArgumentTypeError(f"{key!r} does not affect aiter routing; known: {', '.join(ENV_DEFAULTS)}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = f"{HELP}. {JSON_SHAPE}"
    parser.add_argument("--model", required=True, choices=list_models(), metavar="NAME",
                        help="model spec from data/models: " + ", ".join(list_models()))
    parser.add_argument("--mode", required=True, choices=MODES, help="forward mode: " + ", ".join(MODES))
    parser.add_argument("--spec", default="none", choices=SPEC_ALGOS, help="speculative algorithm (default none)")
    parser.add_argument("--topk", type=int, default=1, help="speculative topk (default 1)")
    parser.add_argument("--worker", choices=("target", "draft"), default=None,
                        help="worker whose backend is planned (default: draft for draft_* modes, else target)")
    parser.add_argument("--resolver", choices=RESOLVERS, default="fixed",
                        help="SWA pool resolver: fixed (SGLang's), legacy or naive (the broken ones)")
    parser.add_argument("--env", type=_env_pair, action="append", default=[], metavar="KEY=VALUE",
                        help="routing variable, repeatable: " + ", ".join(f"{k} (default {v})" for k, v in
                                                                         ENV_DEFAULTS.items()))
    parser.add_argument("--json", action="store_true", help=JSON_SHAPE)


def run(args: argparse.Namespace) -> int:
    result = plan(args.model, args.mode, spec=args.spec, topk=args.topk, env=dict(args.env), worker=args.worker,
                  resolver=args.resolver, strict=False)
    if args.json:
        print_json(result.to_json())
    else:
        print(explain(result))
    return EXIT_REFUSED if result.error else ExitCode.OK
