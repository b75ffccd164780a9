"""``swa-kit doctor``: Python, torch, devices, Triton, aiter and Jupyter, and what each means for the kit."""

from __future__ import annotations

import argparse

from swa_kit.commands._args import positive_seconds
from swa_kit.commands._output import print_json
from swa_kit.measure.doctor import diagnose, exit_code, render_text, report
from swa_kit.machine import detect

NAME = "doctor"
HELP = "report what this machine can run (torch, GPUs, Triton, aiter tiers, Jupyter) and what is missing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (the environment and every finding)")
    parser.add_argument("--aiter-timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                        help="limit for the `import aiter` check, run in a child process (default 60)")


def run(args: argparse.Namespace) -> int:
    env = detect(native_timeout=args.aiter_timeout)
    if args.json:
        data = report(env)
        print_json(data)
        return data["exit_code"]
    findings = diagnose(env)
    print(render_text(findings))
    return exit_code(findings)
