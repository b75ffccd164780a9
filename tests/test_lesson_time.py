"""The time budget: each notebook's estimate within its header's time, the plans within theirs, docs in step.

Nothing is executed: the estimate counts words, cells, figures, prompts and exercises, and reads the recorded run
times (records/lesson_run_seconds.json, refreshed from a tour with scripts/lesson_time.py --refresh).
"""

from __future__ import annotations

import json
import random
import re
import runpy
from pathlib import Path

import pytest

from swa_kit.errors import UsageError
from swa_kit.lessons import timing
from swa_kit.lessons.workshop import kernels

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(timing.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_estimate_within_stated_time(path: Path) -> None:
    estimate, stated = timing.estimate(path), timing.stated_minutes(path)
    assert estimate.minutes <= stated, f"{path.stem}: estimated {estimate.minutes:.1f} min, header states {stated}"


def test_notebook_05_is_a_twenty_minute_lesson() -> None:
    path = timing.notebook_path("05")
    assert timing.stated_minutes(path) == 20 and timing.estimate(path).minutes <= 20


@pytest.mark.parametrize("name", ["A", "B"])
def test_plans_fit_with_slack(name: str) -> None:
    plan = timing.plans()[name]
    assert plan.planned_minutes <= 0.9 * plan.budget_minutes
    assert timing.plan_problems(plan) == []


def test_workshop_doc_reads_the_plans_and_headers() -> None:
    doc = (ROOT / "docs" / "workshop.md").read_text()
    for plan in timing.plans().values():
        assert timing.plan_markdown(plan) in doc, f"docs/workshop.md's plan {plan.name} differs from timing.plans()"
    headings = re.findall(r"^## Notebook (\d\d): .* \((\d+) minutes\)$", doc, re.M)
    assert len(headings) >= 6
    for number, minutes in headings:
        assert int(minutes) == timing.stated_minutes(timing.notebook_path(number)), f"notebook {number}"


def test_notebook_05_takeaway_states_what_the_window_buys() -> None:
    """The takeaway's numbers, from the library: the reads cut against a saving in memory, never a residual share."""
    read = kernels.decode_kv_bytes("gemma4-31b", 128 * 1024)
    buys = kernels.what_the_window_buys("gemma4-31b", 128 * 1024)
    reads_cut = 1 - (read["sliding_layers"] + read["full_layers"]) / read["without_window"]
    text = timing.notebook_path("05").read_text()
    takeaway = text[text.index("# ## Takeaway"):text.index("# ## Optional")]
    assert f"by about {round(100 * reads_cut, -1):.0f} %" in takeaway
    assert f"drops by about {100 * buys['memory_saved_default']:.0f} %" in takeaway
    assert "memory more than decode time" not in text


def _write(tmp_path: Path, cells: list[str]) -> Path:
    path = tmp_path / "09_synthetic.py"
    path.write_text("\n\n".join(cells) + "\n")
    return path


def test_estimate_counts_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    words = [rng.randint(5, 400) for _ in range(3)]
    prose = [" ".join(f"w{i}" for i in range(n)) for n in words]
    path = _write(tmp_path, [
        f"# %% [markdown]\n# # 09\n# **Goal.** In about 12 minutes {prose[0]}",
        "# %%\n%matplotlib inline\nfrom swa_kit.viz import bench as viz\n"
        "from swa_kit.viz.probe import draw_probe\nx = 1",
        f"# %% [markdown]\n# ## 1 · One\n# **Exercise 9.1 (predict).** {prose[1]}\n# **Predict, then run.**",
        "# %%\nviz.time_vs_context(r)\ndisplay(draw_probe(r))\nprint(len(r))",
        "# %% [markdown]\n# ## 2 · Two\n# **Exercise 9.2.** a b",
        "# %%\ny = 2",
        f"# %% [markdown]\n# ## Optional appendix\n# **Exercise 9.3.** {prose[2]}",
        "# %%\nviz.ratios(r)",
    ])
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"note": "test", "seconds": {"09_synthetic": 60}}))
    monkeypatch.setattr(timing, "RUN_SECONDS_FILE", runs)
    whole = timing.estimate(path)
    header_words = 4 + 1 + 4 + 1 + words[0]  # "# 09", "**Goal.** In about 12 minutes"
    one_words = 3 + 1 + words[1] + 3  # "## 1 · One" counts "1", "One"; the exercise tag; "Predict, then run"
    assert (whole.code_cells, whole.figures, whole.exercises, whole.predictions) == (3, 2, 2, 1)
    assert whole.run_seconds == pytest.approx(60 * 3 / 4)
    assert whole.words > words[0] + words[1] and whole.words < header_words + one_words + 10
    assert timing.stated_minutes(path) == 12
    only_two = timing.estimate(path, sections=(2,))
    assert (only_two.code_cells, only_two.exercises, only_two.figures) == (2, 1, 0)
    expected = (only_two.words / 200 + 2 * 0.5 + 3 + 60 * 2 / 4 / 60)
    assert only_two.minutes == pytest.approx(expected)


def test_missing_goal_or_run_time_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, ["# %% [markdown]\n# # 09 no time here", "# %%\nx = 1"])
    with pytest.raises(UsageError, match="Goal"):
        timing.stated_minutes(path)
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"note": "test", "seconds": {}}))
    monkeypatch.setattr(timing, "RUN_SECONDS_FILE", runs)
    with pytest.raises(UsageError, match="--refresh"):
        timing.estimate(path)
    with pytest.raises(UsageError, match="00_the_story"):
        timing.notebook_path("7")


def test_refresh_from_a_tour_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"note": "old", "seconds": {"00_the_story": 5.0, "01_x": 7.0}}))
    monkeypatch.setattr(timing, "RUN_SECONDS_FILE", runs)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"notebooks": [
        {"name": "00_the_story", "status": "ok", "seconds": 12.34},
        {"name": "00_the_story.exercises", "status": "ok", "seconds": 99},
        {"name": "02_y", "status": "failed", "seconds": 1}]}))
    assert timing.refresh_run_seconds(summary, "new") == {"00_the_story": 12.3, "01_x": 7.0}
    assert json.loads(runs.read_text())["note"] == "new"
    summary.write_text(json.dumps({"notebooks": []}))
    with pytest.raises(UsageError, match="swa-kit tour"):
        timing.refresh_run_seconds(summary, "none")


def test_cell_seconds_reads_nbclient_timing() -> None:
    cells = [{"cell_type": "markdown", "metadata": {}},
             {"cell_type": "code", "metadata": {"execution": {"iopub.execute_input": "2026-01-01T00:00:00.000Z",
                                                               "shell.execute_reply": "2026-01-01T00:00:16.500Z"}}},
             {"cell_type": "code", "metadata": {}}]
    assert timing.cell_seconds({"cells": cells}) == [(1, 16.5)]


def test_script_passes_on_the_repository(capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(ROOT / "scripts" / "lesson_time.py"), run_name="lesson_time")["main"]
    code = main([])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "plan A" in out and "05_kernels_and_performance" in out
