"""Each notebook's estimated learner time against the time its header states, and the workshop plans' fit.

    python scripts/lesson_time.py                                  # the table; exit 1 if anything does not fit
    python scripts/lesson_time.py --refresh tour-out/summary.json  # record run times from a tour first

The estimate executes nothing: it counts words, code cells, figures, prompts and exercises
(swa_kit.lessons.timing) and adds the run times recorded in records/lesson_run_seconds.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from swa_kit.lessons import timing
from swa_kit.tables import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refresh", type=Path, metavar="SUMMARY",
                        help="a tour's summary.json: record its notebooks' run times before estimating")
    parser.add_argument("--note", default="CPU-only run times, from a `swa-kit tour` summary.json",
                        help="what the refreshed run times were measured on")
    args = parser.parse_args(argv)
    if args.refresh:
        timing.refresh_run_seconds(args.refresh, args.note)
    rows, problems = [], []
    for path in sorted(timing.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")):
        e, stated = timing.estimate(path), timing.stated_minutes(path)
        rows.append({"notebook": path.stem, "words": e.words, "code cells": e.code_cells, "figures": e.figures,
                     "predict": e.predictions, "exercises": e.exercises, "run s": f"{e.run_seconds:.0f}",
                     "estimate min": f"{e.minutes:.1f}", "stated min": stated, "fits": e.minutes <= stated})
        if e.minutes > stated:
            problems.append(f"{path.stem}: estimated {e.minutes:.1f} min, its header states {stated}")
    print_table(rows)
    for plan in timing.plans().values():
        spare = plan.budget_minutes - plan.planned_minutes
        margins = [b.minutes - timing.estimate(timing.notebook_path(b.notebook), b.sections).minutes
                   for b in plan.blocks if b.notebook]
        print(f"plan {plan.name}: {plan.planned_minutes} of {plan.budget_minutes} min planned, {spare} min "
              f"({spare / plan.budget_minutes:.0%}) spare (at most {plan.budget_minutes * (1 - timing.PLAN_SLACK):.0f} "
              f"with {timing.PLAN_SLACK:.0%} slack); each block at least {min(margins):.1f} min over its estimate")
        problems += timing.plan_problems(plan)
    for problem in problems:
        print("does not fit:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
