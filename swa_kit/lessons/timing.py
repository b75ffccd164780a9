"""How long each lesson takes a learner, estimated from the notebook itself, against the time its header states.

One source for each notebook's time: the "**Goal.** In about N minutes" line of its header
(:func:`stated_minutes`). The workshop plans (:data:`PLANS`) read those times, and a test holds
``docs/workshop.md``'s tables to them. :func:`estimate` counts, without executing anything, what a learner
reads and does: prose at :data:`WORDS_PER_MINUTE`, a fixed allowance per code cell (reading the code and its
output), per figure, per "predict, then run" prompt and per exercise, plus the notebook's run time from the
recorded table :data:`RUN_SECONDS_FILE` (refreshed from a tour: ``python scripts/lesson_time.py --refresh
tour-out/summary.json``).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import jupytext

from swa_kit.errors import UsageError
from swa_kit.tables import format_table

#: Reading speed for prose (the issue's honest estimate; a typical silent-reading rate for technical text).
WORDS_PER_MINUTE = 200
#: Reading one code cell and its printed output or table.
CODE_CELL_MINUTES = 0.5
#: Looking at one figure (a plot or a drawn table) beyond reading its cell.
FIGURE_MINUTES = 1.0
#: Thinking through one "predict, then run" prompt before running the cell.
PREDICT_MINUTES = 1.0
#: Working one exercise: reading the question, trying, answering the check.
EXERCISE_MINUTES = 3.0
#: Slack each workshop plan keeps over the sum of its blocks.
PLAN_SLACK = 0.10

_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = _ROOT / "notebooks"
#: The notebooks' recorded run times (seconds, CPU only), written by ``scripts/lesson_time.py --refresh``.
RUN_SECONDS_FILE = _ROOT / "records" / "lesson_run_seconds.json"

_GOAL = re.compile(r"\*\*Goal\.\*\* In about (\d+) minutes")
_EXERCISE = re.compile(r"\*\*Exercise \d+\.\d+")
_PREDICT = re.compile(r"\*\*Predict, then run\.\*\*")
_DRAWING_MODULES = ("swa_kit.viz", "swa_kit.widgets", "matplotlib")
_WORD = re.compile(r"[A-Za-z0-9][\w'.-]*")


@dataclass(frozen=True)
class Estimate:
    """A learner's minutes for one notebook (or part of one), by what they spend them on."""

    notebook: str
    words: int
    code_cells: int
    figures: int
    predictions: int
    exercises: int
    run_seconds: float

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + self.code_cells * CODE_CELL_MINUTES + self.figures * FIGURE_MINUTES
                + self.predictions * PREDICT_MINUTES + self.exercises * EXERCISE_MINUTES + self.run_seconds / 60)


def notebook_path(stem: str) -> Path:
    """``notebooks/<stem>.py`` (a stem like ``05_kernels_and_performance`` or its number ``05``)."""
    matches = sorted(NOTEBOOKS_DIR.glob(f"{stem}*.py"))
    if len(matches) != 1:
        known = ", ".join(p.stem for p in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")))
        raise UsageError(f"notebook {stem!r} names {len(matches)} notebooks; give one of: {known}")
    return matches[0]


def stated_minutes(path: Path) -> int:
    """The minutes a notebook's header states ("**Goal.** In about N minutes")."""
    header = jupytext.read(path).cells[0].source
    found = _GOAL.search(header.replace("\n# ", " ").replace("\n", " "))
    if found is None:
        raise UsageError(f"{path.name}'s first cell states no time: it needs '**Goal.** In about N minutes'")
    return int(found.group(1))


def recorded_run_seconds() -> dict[str, float]:
    """The recorded run time of each notebook (stem -> seconds)."""
    return {k: float(v) for k, v in json.loads(RUN_SECONDS_FILE.read_text())["seconds"].items()}


def _drawing_names(cells: list) -> set[str]:
    """Names a notebook imports from the kit's figure and widget modules (functions, or module aliases)."""
    names: set[str] = set()
    for cell in cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(_python(cell.source))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_DRAWING_MODULES):
                names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.asname or a.name for a in node.names if a.name.startswith(_DRAWING_MODULES))
    return names


def _python(source: str) -> str:
    """A code cell without its IPython magics."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _figures(source: str, drawing: set[str]) -> int:
    """Calls in a cell to a drawing function (``f(...)`` or ``module.f(...)`` of the names imported)."""
    count = 0
    for node in ast.walk(ast.parse(_python(source))):
        if isinstance(node, ast.Call):
            func = node.func
            root = func.value if isinstance(func, ast.Attribute) else func
            count += isinstance(root, ast.Name) and root.id in drawing
    return count


def _optional(markdown: str) -> bool:
    """An "## Optional ..." heading starts what a notebook leaves out of its stated time, to its end."""
    return re.search(r"^## Optional\b", markdown, re.M) is not None


def _section(markdown: str) -> int | None:
    found = re.search(r"^## (\d+)\b", markdown, re.M)
    return int(found.group(1)) if found else None


def estimate(path: Path, sections: tuple[int, ...] | None = None) -> Estimate:
    """What one notebook costs a learner, up to an "## Optional" heading (an appendix outside the stated time);
    ``sections`` keeps only those numbered sections ("## N ·"), the header and the unnumbered ones (the takeaway),
    as a presenter shows them. The recorded run time is shared
    out by code cell."""
    cells = jupytext.read(path).cells
    drawing = _drawing_names(cells)
    words = code = figures = predictions = exercises = 0
    current, kept, total = 0, 0, 0
    for cell in cells:
        if cell.cell_type == "markdown":
            if _optional(cell.source):
                current = -1  # the appendix: no section kept
            elif re.search(r"^## ", cell.source, re.M) and current != -1:
                current = _section(cell.source) or 0  # an unnumbered heading (the takeaway): every block keeps it
        keep = current != -1 and (sections is None or current == 0 or current in sections)
        total += cell.cell_type == "code"
        if not keep:
            continue
        if cell.cell_type == "markdown":
            words += len(_WORD.findall(cell.source))
            predictions += len(_PREDICT.findall(cell.source))
            exercises += len(_EXERCISE.findall(cell.source))
        elif cell.cell_type == "code":
            code += 1
            kept += 1
            figures += _figures(cell.source, drawing)
    runs = recorded_run_seconds()
    if path.stem not in runs:
        raise UsageError(f"no recorded run time for {path.stem} in {RUN_SECONDS_FILE.name}: refresh it from a tour "
                         "(python scripts/lesson_time.py --refresh tour-out/summary.json)")
    share = kept / total if total else 0.0
    return Estimate(path.stem, words, code, figures, predictions, exercises, runs[path.stem] * share)


@dataclass(frozen=True)
class Block:
    """One row of a workshop plan: a notebook (all of it, or the named sections) or a fixed activity."""

    label: str
    minutes: int
    notebook: str | None = None  # number, e.g. "03"
    sections: tuple[int, ...] | None = None  # presenter-led: only these sections are shown
    exercises: str = ""


@dataclass(frozen=True)
class Plan:
    name: str
    budget_minutes: int
    blocks: tuple[Block, ...]

    @property
    def planned_minutes(self) -> int:
        return sum(b.minutes for b in self.blocks)


def _hands_on(number: str, label: str, exercises: str) -> Block:
    """A self-paced block takes its notebook's stated time: the header is the one source."""
    return Block(label, stated_minutes(notebook_path(number)), number, None, exercises)


def plans() -> dict[str, Plan]:
    """The workshop's two plans; a self-paced block reads its notebook's header, a presenter-led one names the
    sections shown and is held to their estimate by :func:`plan_problems`."""
    presenter = Plan("A", 90, (
        Block("The story: the two bugs, the reported result, the triage rule (sections 2-3)", 17, "00", (2, 3),
              "**0.2** (triage)"),
        Block("The off-by-one trap (section 3)", 14, "01", (3,)),
        Block("Pools: the full->SWA mapping, the dummy slot and the sentinel (section 2)", 5, "02", (2,)),
        Block("Draft and target: three resolvers, failure 1 reproduced (sections 2 and 4)", 10, "03", (2, 4),
              "**3.1** (resolver)"),
        Block("aiter dispatch: predict first, the guard, the probe, SGLang's own lines (sections 2-3)", 28, "04",
              (2, 3), "**4.1** (guard), 4.2 (call sites)"),
        Block("Wrap-up: the four silent failures (below); notebooks 05 and 06 left as reading", 3),
    ))
    hands_on = Plan("B", 180, (
        _hands_on("00", "The story", "0.1, 0.2"),
        _hands_on("01", "Window conventions and masks", "1.1, 1.2, 1.3"),
        _hands_on("02", "KV pools, full vs SWA", "2.1, 2.2"),
        Block("Break", 9),
        _hands_on("03", "Draft and target pool sharing, speculative decoding end to end", "3.1, 3.2"),
        _hands_on("04", "aiter dispatch, guards, the probe", "4.1, 4.2, 4.3"),
        Block("Wrap-up; notebooks 05 and 06 and the capstone (below) as the follow-up", 2),
    ))
    return {"A": presenter, "B": hands_on}


def plan_markdown(plan: Plan) -> str:
    """The plan as the table ``docs/workshop.md`` shows (a test holds the document to it)."""
    rows, start = [], 0
    for block in plan.blocks:
        end = start + block.minutes
        link = f"[{block.notebook}](../notebooks/{notebook_path(block.notebook).stem}.ipynb)" if block.notebook else ""
        rows.append({"Time": f"{start // 60}:{start % 60:02d}-{end // 60}:{end % 60:02d}", "Block": block.label,
                     "Notebook": link, "Exercises": block.exercises})
        start = end
    return format_table(rows, markdown=True)


def plan_problems(plan: Plan) -> list[str]:
    """Why ``plan`` does not hold: over its budget less the slack, or a block shorter than its estimate."""
    problems = []
    allowed = plan.budget_minutes * (1 - PLAN_SLACK)
    if plan.planned_minutes > allowed:
        problems.append(f"plan {plan.name}: {plan.planned_minutes} min planned, more than {allowed:.0f} "
                        f"({plan.budget_minutes} min less {PLAN_SLACK:.0%} slack)")
    for block in plan.blocks:
        if block.notebook is None:
            continue
        needed = estimate(notebook_path(block.notebook), block.sections).minutes
        if needed > block.minutes:
            problems.append(f"plan {plan.name}, {block.label}: estimated {needed:.1f} min, planned {block.minutes}")
    return problems


def cell_seconds(notebook: dict) -> list[tuple[int, float]]:
    """(cell index, seconds) of each executed code cell, from the timing nbclient records in its metadata."""
    from datetime import datetime

    out = []
    for index, cell in enumerate(notebook["cells"]):
        run = cell.get("metadata", {}).get("execution", {})
        start, end = run.get("iopub.execute_input"), run.get("shell.execute_reply")
        if cell["cell_type"] == "code" and start and end:
            seconds = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                       - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            out.append((index, seconds))
    return out


def refresh_run_seconds(summary_path: Path, note: str) -> dict[str, float]:
    """Record each notebook's run time from a tour's ``summary.json`` (full notebooks only) into
    :data:`RUN_SECONDS_FILE`; returns the new table."""
    summary = json.loads(summary_path.read_text())
    seconds = {run["name"]: round(float(run["seconds"]), 1) for run in summary["notebooks"]
               if run.get("status") == "ok" and not run["name"].endswith(".exercises")}
    if not seconds:
        raise UsageError(f"{summary_path} records no notebook that ran ok: run `swa-kit tour` first")
    table = recorded_run_seconds() if RUN_SECONDS_FILE.exists() else {}
    table.update(seconds)
    RUN_SECONDS_FILE.write_text(json.dumps({"note": note, "seconds": dict(sorted(table.items()))}, indent=2) + "\n")
    return table
