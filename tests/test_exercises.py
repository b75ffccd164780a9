"""Exercise versions: the cells tagged ``solution`` are stripped from the same jupytext source, nothing else."""

from __future__ import annotations

import jupytext
import nbformat
import pytest

from swa_kit.errors import UsageError
from swa_kit.lessons.exercises import (
    PLACEHOLDER,
    SOLUTION_TAG,
    exercise_notebook,
    has_exercises,
    solution_cells,
    write_exercise_notebook,
)
from swa_kit.lessons.tour import find_notebooks_dir

SOURCE = """# %% [markdown]
# # A title

# %%
question = ...

# %% tags=["solution"]
answer = 42

# %% tags=["solution", "other"]
print(answer)

# %%
print("after")
"""


def test_tagged_cells_are_stripped_and_replaced_by_one_note(tmp_path):
    source = tmp_path / "07_demo.py"
    source.write_text(SOURCE)
    assert has_exercises(source) and solution_cells(jupytext.read(source)) == [2, 3]
    nb = exercise_notebook(source)
    assert [c.source for c in nb.cells] == ["# A title", "question = ...", PLACEHOLDER, 'print("after")']
    assert all(SOLUTION_TAG not in c.metadata.get("tags", []) for c in nb.cells)
    target = write_exercise_notebook(source, tmp_path / "out")
    assert target.name == "07_demo.exercises.ipynb"
    assert [c.source for c in nbformat.read(target, as_version=4).cells] == [c.source for c in nb.cells]


def test_a_notebook_without_tags_or_a_missing_one_is_refused(tmp_path):
    untagged = tmp_path / "08_plain.py"
    untagged.write_text(SOURCE.replace('tags=["solution"]', "").replace('tags=["solution", "other"]', ""))
    assert not has_exercises(untagged)
    with pytest.raises(UsageError, match="tags no cell 'solution'"):
        exercise_notebook(untagged)
    with pytest.raises(UsageError, match="does not exist"):
        exercise_notebook(tmp_path / "missing.py")


def test_story_notebook_asks_before_it_reveals():
    source = find_notebooks_dir() / "00_the_story.py"
    full = jupytext.read(source)
    stripped = exercise_notebook(source)
    revealed = [c.source for i, c in enumerate(full.cells) if i in solution_cells(full)]
    assert len(revealed) >= 2
    kept = "\n".join(c.source for c in stripped.cells)
    for answer_source in revealed:
        assert answer_source not in kept
    # every check of a learner's answer comes before the first cell that reveals that answer
    checks = {"check_default_saving(my_percent)": "story_memory(", "check_triage(my_triage)": "story.triage(worker)"}
    sources = [c.source for c in full.cells]
    for check, reveal in checks.items():
        asked = next(i for i, s in enumerate(sources) if check in s)
        shown = next(i for i, s in enumerate(sources) if reveal in s)
        assert asked < shown and shown in solution_cells(full)


@pytest.mark.parametrize("name, checks", [
    ("03_draft_target_pool_sharing", {"check_resolver_breaks(my_breaks)": "check_resolver_breaks({",
                                      "check_which_worker(my_workers)": "check_which_worker({symptom"}),
    ("04_aiter_dispatch_and_guards", {"check_guard_way_out(my_refused_layers": "guard_and_way_out(",
                                      "check_one_key_short_sites(my_short_sites)": "short_sites([r.site"}),
    ("05_kernels_and_performance", {"check_headline_floor(my_floor_us)": "math_floor_us(",
                                    "check_sliding_share(my_sliding_percent)": "check_sliding_share(round("}),
])
def test_lessons_03_05_ask_before_they_reveal(name, checks):
    full = jupytext.read(find_notebooks_dir() / f"{name}.py")
    sources = [c.source if c.cell_type == "code" else "" for c in full.cells]  # prose may name a function
    tagged = solution_cells(full)
    for check, reveal in checks.items():
        asked = next(i for i, s in enumerate(sources) if check in s)
        shown = next(i for i, s in enumerate(sources) if reveal in s)
        assert asked < shown and shown in tagged, (check, reveal)
        assert all(reveal not in s for i, s in enumerate(sources) if i < asked), f"{reveal} before {check}"


def test_exercise_versions_links_resolve_where_they_are_written(tmp_path):
    """Glossary, docs and neighbour links of the exercise versions, written far from notebooks/, all resolve."""
    import re

    written = [write_exercise_notebook(p, tmp_path / "anywhere") for p in sorted(find_notebooks_dir().glob("0*.py"))]
    for target in written:
        text = "\n".join(c.source for c in nbformat.read(target, as_version=4).cells if c.cell_type == "markdown")
        links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
        assert any("glossary.md" in t for t in links), target.name
        broken = [t for t in links if not (target.parent / t.partition("#")[0]).is_file()]
        assert not broken, f"{target.name} links to {broken}"


def test_lab_exercises_writes_every_exercise_version_and_opens_them(tmp_path, capsys):
    """``swa-kit lab --exercises``: a dry run writes nothing; a run writes one version per tagged notebook into
    NOTEBOOKS/exercises, each without its solution cells, and JupyterLab is rooted there."""
    import shutil

    from swa_kit.commands.lab import open_exercises

    source = find_notebooks_dir()
    for twin in source.glob("0*.py"):
        shutil.copy(twin, tmp_path)
        shutil.copy(twin.with_suffix(".ipynb"), tmp_path)
    assert open_exercises(tmp_path, dry_run=True) == tmp_path / "exercises"
    assert not (tmp_path / "exercises").exists()
    folder = open_exercises(tmp_path, dry_run=False)
    tagged = sorted(p.stem for p in tmp_path.glob("0*.py") if has_exercises(p))
    written = sorted(p.name.removesuffix(".exercises.ipynb") for p in folder.glob("*.exercises.ipynb"))
    assert written == tagged and len(written) >= 7, written
    for name in written:
        full = jupytext.read(tmp_path / f"{name}.py")
        kept = {c.source for c in nbformat.read(folder / f"{name}.exercises.ipynb", as_version=4).cells}
        assert not {full.cells[i].source for i in solution_cells(full)} & kept, name
    assert f"wrote {len(written)} exercise versions" in capsys.readouterr().out


def test_generated_exercise_folder_is_ignored_by_git():
    import subprocess

    root = find_notebooks_dir().parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    probe = root / "notebooks" / "exercises" / "00_the_story.exercises.ipynb"
    result = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=root, check=False)
    assert result.returncode == 0, "notebooks/exercises/ is not git-ignored"


#: What draws a figure or runs an experiment in the notebooks: a demo, which the exercise versions keep.
DEMO_CALLS = ("_figure(", "plot_", "draw_", "acceptance_curve(", "guard_divergence(", "greedy_decode(",
              "_experiment(", "decision_table(", "probe_sglang_sites(", "audit.audit(", "compare_window(")


@pytest.mark.parametrize("source", sorted(find_notebooks_dir().glob("0*.py")), ids=lambda p: p.stem[:2])
def test_solution_cells_hold_answers_not_demos(source):
    """A ``solution`` cell gives an answer (it calls the exercise's check with it) and runs no demo: the exercise
    versions strip answers, and keep every figure and experiment."""
    nb = jupytext.read(source)
    for i in solution_cells(nb):
        cell = nb.cells[i]
        assert cell.cell_type == "code", f"{source.name} cell {i}: prose is not an answer: untag it"
        assert ".check_" in cell.source, f"{source.name} cell {i} is tagged but checks no answer"
        demos = [call for call in DEMO_CALLS if call in cell.source]
        assert not demos, f"{source.name} cell {i} runs a demo ({demos}): split it from the answer"


def test_workshop_dry_run_answers_every_exercise_of_plan_b():
    """scripts/workshop_dry_run.py has an answer for every ``...`` of every exercise that plan B names."""
    import re
    import runpy

    from swa_kit.lessons import timing

    dry_run = runpy.run_path(str(find_notebooks_dir().parent / "scripts" / "workshop_dry_run.py"))
    plan = timing.plans()["B"]
    assert dry_run["answered"](plan) == set(dry_run["NAMES"])
    for block in plan.blocks:
        if block.notebook is None:
            continue
        nb = exercise_notebook(timing.notebook_path(block.notebook))
        dry_run["answer_cells"](nb, set(dry_run["NAMES"]))
        left = [line for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines()
                if re.match(r"my_\w+(, my_\w+)* = \.\.\.", line)]
        assert not left, f"{block.notebook}: no dry-run answer for {left}"
