"""A dry run of a workshop plan, as a learner would do it: each notebook's exercise version, written outside the
kit's tree, executed cell by cell, with the plan's exercises answered by this script and graded by the notebooks'
own check cells.

    python scripts/workshop_dry_run.py            # both plans (docs/workshop.md's table)
    python scripts/workshop_dry_run.py --plan A   # one

An answer is the reference solution's value (``swa_kit.lessons.workshop``), written where the learner replaces the
``...``; the check cell must then say "right", and every exercise the plan leaves out must say "not answered yet".
The run times are the machine's (CPU, this process's notebooks only), not a learner's; the load average is printed
beside them. Exit 1 if a cell fails or a verdict is not the expected one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from swa_kit.lessons import timing
from swa_kit.lessons.exercises import write_exercise_notebook
from swa_kit.lessons.tour import run_notebook
from swa_kit.tables import print_table

#: What the script types for each ``my_*`` name: the reference solution, in the notebook's own namespace.
ANSWERS = {
    "my_percent": 'round(100 * story.story_memory("gemma4-31b")["default_saved_fraction"], 1)',
    "my_triage": "{case: story.triage(route) for case, route in story.TRIAGE_CASES.items()}",
    "my_values": 'windows.window_everywhere("gemma3-27b")',
    "my_counts": "windows.keys_if_passed_unconverted(gemma_keys)",
    "my_columns": "windows.tree_keys_seen(3)",
    "my_full, my_swa": 'pools.slots_held()["full"], pools.slots_held()["swa"]',
    "my_minimum_pct, my_default_pct": ('100 * pools.swa_pool_saving("gpt-oss-20b").saved_fraction, '
                                       'default_sizing("gpt-oss-20b")["sglang_saved_pct"]'),
    "my_breaks": '{a: next(iter(drafts.resolvers_that_break(a))) for a in ("EAGLE", "FROZEN_KV_MTP")}',
    "my_workers": "{symptom: answers[0] for symptom, answers in drafts.SYMPTOMS.items()}",
    "my_refused_layers": 'dispatch.guard_and_way_out("gemma3-27b")["refused_layers"]',
    "my_keys_after": 'dispatch.guard_and_way_out("gemma3-27b")["keys_after_way_out"]',
    "my_short_sites": "dispatch.one_key_short_sites(5)",
    "my_short_layers": 'dispatch.one_key_short_layers("gemma4-31b", "decode")',
}
#: The ``my_*`` names each exercise's cell assigns.
NAMES = {"0.1": ["my_percent"], "0.2": ["my_triage"], "1.1": ["my_values"], "1.2": ["my_counts"],
         "1.3": ["my_columns"], "2.1": ["my_full, my_swa"], "2.2": ["my_minimum_pct, my_default_pct"],
         "3.1": ["my_breaks"], "3.2": ["my_workers"], "4.1": ["my_refused_layers", "my_keys_after"],
         "4.2": ["my_short_sites"], "4.3": ["my_short_layers"]}
_VERDICT = re.compile(r"Exercise (\d+\.\d+): (right|not yet right|not answered yet)\.")


def answered(plan: timing.Plan) -> set[str]:
    """The exercises a plan's blocks name ("**0.2** (triage)", "3.1, 3.2")."""
    return {number for block in plan.blocks for number in re.findall(r"\d+\.\d+", block.exercises)}


def answer_cells(nb: nbformat.NotebookNode, exercises: set[str]) -> None:
    """Write the reference answer of each of ``exercises`` where the exercise version has its ``...``."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for number in exercises:
            for names in NAMES.get(number, []):
                cell.source = re.sub(rf"^{re.escape(names)} = \.\.\.(?:, \.\.\.)?(?=\s|$)",
                                     f"{names} = {ANSWERS[names]}", cell.source, flags=re.M)


def verdicts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """The last verdict each exercise's check printed in the executed notebook."""
    found: dict[str, str] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            for number, verdict in _VERDICT.findall(text if isinstance(text, str) else "".join(text)):
                found[number] = verdict
    return found


def dry_run(plan: timing.Plan, out: Path) -> tuple[list[dict[str, object]], list[str]]:
    rows, problems = [], []
    wanted = answered(plan)
    for block in plan.blocks:
        if block.notebook is None:
            continue
        source = timing.notebook_path(block.notebook)
        target = write_exercise_notebook(source, out / f"plan-{plan.name}")
        nb = nbformat.read(target, as_version=4)
        mine = {n for n in wanted if n.startswith(f"{int(block.notebook)}.")}
        answer_cells(nb, mine)
        nbformat.write(nb, target)
        start = time.perf_counter()
        executed, run = run_notebook(target, cell_timeout=300, threads=1, cwd=target.parent)
        seconds = time.perf_counter() - start
        said = verdicts(executed)
        expected = {n: ("right" if n in mine else "not answered yet") for n in said}
        wrong = {n: v for n, v in said.items() if v != expected[n]}
        if run.status != "ok":
            problems.append(f"plan {plan.name}, {source.stem}: cell {run.failed_cell} failed: {run.error}")
        if wrong or not mine <= set(said):
            problems.append(f"plan {plan.name}, {source.stem}: verdicts {said}, expected right for {sorted(mine)}")
        rows.append({"plan": plan.name, "notebook": source.stem, "cells run": sum(c.cell_type == "code" for c in
                                                                                  executed.cells),
                     "answered right": ", ".join(sorted(n for n, v in said.items() if v == "right")) or "-",
                     "not answered": ", ".join(sorted(n for n, v in said.items() if v == "not answered yet")) or "-",
                     "run s": f"{seconds:.1f}", "status": run.status})
    return rows, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=sorted(timing.plans()), action="append",
                        help="the plan to run (repeat for both; default both)")
    args = parser.parse_args(argv)
    rows, problems = [], []
    with tempfile.TemporaryDirectory(prefix="swa-kit-dry-run-") as out:
        for name in args.plan or sorted(timing.plans()):
            start, load = time.perf_counter(), os.getloadavg()[0]
            plan_rows, plan_problems = dry_run(timing.plans()[name], Path(out))
            rows += plan_rows
            problems += plan_problems
            print(f"plan {name}: {time.perf_counter() - start:.0f} s machine time; load average at start "
                  f"{load:.1f}, at end {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print_table(rows)
    for problem in problems:
        print("problem:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
