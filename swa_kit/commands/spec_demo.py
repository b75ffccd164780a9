"""``swa-kit spec-demo [--json]``: speculative decoding on the tiny hybrid-SWA model under each resolver."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from swa_kit import budget
from swa_kit.commands._args import add_budget_arguments, bounded_int
from swa_kit.commands._output import print_json
from swa_kit.lessons import DEMO_NEW_TOKENS
from swa_kit.tables import print_table

NAME = "spec-demo"
HELP = "EAGLE and FROZEN_KV MTP drafts x legacy/naive/fixed resolvers: acceptance, agreement, errors; guard run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--max-new-tokens", type=bounded_int(2, MAX_NEW_TOKENS), default=DEMO_NEW_TOKENS,
                        help=f"tokens generated per prompt (2..{MAX_NEW_TOKENS}, default {DEMO_NEW_TOKENS})")
    add_budget_arguments(parser)


# Upper bounds from timed runs on a busy 2-core machine: ~20 ms a decode step at 8 tokens, growing with the context.
STEP_SECONDS, CONTEXT_GROWTH = 25e-3, 1e-3  # per decode step; relative cost per token already in the context
BASE_BYTES, TOKEN_BYTES = 512 << 20, 64 << 10  # the tiny models and torch; KV and logs per generated token
EXTRA_RUNS = 3  # the guard experiment (twice) and the one-key-short run, each a plain greedy decode
MAX_NEW_TOKENS = 1 << 20


def demo_estimate(max_new_tokens: int) -> budget.Estimate:
    """The demo's bound: every run decodes every prompt for ``max_new_tokens`` steps."""
    from swa_kit.lessons.speculative import ALGORITHMS, DEMO_PROMPTS, RESOLVER_NAMES  # torch: not for --help

    runs = 1 + len(ALGORITHMS) * len(RESOLVER_NAMES) + EXTRA_RUNS
    steps = runs * len(DEMO_PROMPTS) * max_new_tokens
    return budget.Estimate(f"spec-demo of {max_new_tokens} new tokens ({steps:,} decode steps)",
                           BASE_BYTES + len(DEMO_PROMPTS) * max_new_tokens * TOKEN_BYTES,
                           steps * STEP_SECONDS * (1 + max_new_tokens * CONTEXT_GROWTH))


def run(args: argparse.Namespace) -> int:
    import torch

    from swa_kit.lessons.speculative import ALGORITHMS, DEMO_PROMPTS, RESOLVER_NAMES, run_demo
    from swa_kit.lessons.tiny_model import load_models

    estimate = budget.check(demo_estimate(args.max_new_tokens), "use a smaller --max-new-tokens")
    shown = budget.announce(estimate)
    if shown:
        print(f"swa-kit spec-demo: {estimate.describe()} (bound)", file=sys.stderr)
    torch.set_num_threads(1)  # tiny per-token ops: extra threads cost more than they save
    models = load_models()
    runs = 1 + len(ALGORITHMS) * len(RESOLVER_NAMES)  # plain greedy, then every (algorithm, resolver)
    with tqdm(total=runs * len(DEMO_PROMPTS) * args.max_new_tokens, desc="spec-demo", unit="tok",
              file=sys.stderr, disable=not shown, leave=False) as bar:
        result = run_demo(models, max_new_tokens=args.max_new_tokens, progress=bar.update)
    if args.json:
        print_json(result)
        return 0
    print(f"tiny hybrid-SWA model, window {result['window']} keys, {len(result['prompts'])} prompts x "
          f"{result['max_new_tokens']} new tokens")
    print_table(result["rows"], ["algorithm", "resolver", "acceptance_rate", "mean_accepted_length",
                                 "agreement_with_plain", "stopped_at", "error"])
    for row in result["rows"]:
        if row["dispatch_guard"]:
            print(f"  kit dispatch would refuse {row['algorithm']}/{row['resolver']}: {row['dispatch_guard']}")
    guard = result["guard_experiment"]
    print(f"\nguard off, layer {guard['layer']} on {guard['path']} ({guard['tier']}): agreement with plain "
          f"{guard['agreement_with_plain']}, first divergence at generated token {guard['first_divergence']} "
          f"(window fills at {guard['window_fills_at']})")
    print(f"guard on: {guard['error_with_guard']}")
    short = result["one_key_short"]
    keys = sorted({(a["intended_keys"], a["effective_keys"]) for a in short["attended"].values()})
    print(f"\nsliding layers on SGLang's unified window argument (intended -> attended keys {keys}): agreement "
          f"with plain {short['agreement_with_plain']}, first divergence at generated token "
          f"{short['first_divergence']}")
    print(f"\ntree draft (topk {result['tree_verify']['topk']}): {result['tree_verify']['error']}")
    print(f"\n{result['seconds']:.1f} s")
    return 0
