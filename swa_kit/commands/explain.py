"""``swa-kit explain (--model NAME | --hf-config PATH) --mode MODE``: each layer's route, SGLang's guard and the
kit's verdict."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.commands.audit import add_model_arguments
from swa_kit.engine.plan_args import BACKENDS, MODES
from swa_kit.engine.routing import ENV_DEFAULTS, RESOLVERS, plan
from swa_kit.engine.spec_algorithms import PLANNED
from swa_kit.measure.explain import explain
from swa_kit.exit_codes import ExitCode
from swa_kit.sglang_versions import SGLANG_VERSION, SGLANG_VERSIONS, versions_help

NAME = "explain"
HELP = ("show which kernel, window argument and page table SGLang uses per layer, what SGLang raises and what the kit "
        "judges")

JSON_SHAPE = (
    "--json prints one object: {\"layers\": [{layer, kind, kernel, window_arg, page_table, sglang_guard, judgement, "
    "sglang_guard_ways_out, judgement_ways_out (lists of alternatives), ...} per layer], \"error\": null or the "
    "refusal message, plus model, mode, spec, topk, env and the backend flags}. "
    "An object, not a bare list, because a list cannot also carry the top-level error. Exit "
    f"{int(ExitCode.OK)} when the plan is accepted, {int(ExitCode.REFUSED)} when SGLang raises or the kit judges a "
    "route wrong (the JSON / table still prints)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = f"{HELP}. {JSON_SHAPE}"
    add_model_arguments(parser)
    parser.add_argument("--mode", required=True, choices=MODES, help="forward mode: " + ", ".join(MODES))
    parser.add_argument("--spec", default="none", choices=PLANNED, help="speculative algorithm (default none)")
    parser.add_argument("--topk", type=int, default=1, help="speculative topk (default 1)")
    parser.add_argument("--worker", choices=("target", "draft"), default=None,
                        help="worker whose backend is planned (default: draft for draft_* modes, else target)")
    parser.add_argument("--resolver", choices=RESOLVERS, default=None,
                        help=f"SWA pool resolver: fixed (SGLang {SGLANG_VERSION}'s, the default), legacy or naive (the "
                             "broken ones)")
    parser.add_argument("--backend", choices=BACKENDS, default="aiter", help="SGLang attention backend (default aiter)")
    parser.add_argument("--sglang-version", choices=SGLANG_VERSIONS, default=SGLANG_VERSION,
                        help=versions_help())
    parser.add_argument("--draft-hf-config", metavar="PATH", default=None,
                        help="the draft's config.json (EAGLE-family drafts; default: the draft SGLang derives)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable, repeatable: " + ", ".join(f"{k} (default {v})" for k, v in
                                                                         ENV_DEFAULTS.items()))
    parser.add_argument("--json", action="store_true", help=JSON_SHAPE)


def run(args: argparse.Namespace) -> int:
    from swa_kit.launch.drafts import draft_pool
    from swa_kit.launch.inputs import Launch, parse_env_pairs

    env = parse_env_pairs(args.env)
    algorithm = "" if args.spec == "none" else f"--speculative-algorithm {args.spec.upper()} "
    launch = Launch.from_inputs(hf_config=args.hf_config, model=args.model, env=env,
                                server_args=algorithm + (f"--speculative-eagle-topk {args.topk}" if algorithm else ""),
                                draft_hf_config=args.draft_hf_config)
    result = plan(launch.model, args.mode, spec=args.spec, topk=args.topk, env=env, worker=args.worker,
                  resolver=args.resolver, strict=False, backend=args.backend, sglang_version=args.sglang_version,
                  draft_model=draft_pool(launch).layout)
    if args.json:
        print_json(result.to_json())
    else:
        print(explain(result))
    return ExitCode.REFUSED if result.error else ExitCode.OK
