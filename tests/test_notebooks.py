"""Every notebook: its py:percent twin is in sync, and it executes headless on CPU within a time limit.

The drift check itself is tested in test_tour.py on a pair that has drifted. Kernels talk over
Unix sockets in private folders (swa_kit.lessons.tour), so pytest -n runs them in parallel safely.
"""

from __future__ import annotations

import os
import re

import pytest

from swa_kit.lessons.timing import cell_seconds
from swa_kit.lessons.tour import find_notebooks_dir, run_notebook, twin_drift

NOTEBOOKS = sorted(find_notebooks_dir().glob("*.ipynb"))
#: Seconds one notebook may take, kernel start included. Each takes 5-25 s on an idle 2-core CPU-only machine;
#: the margin absorbs a loaded machine (pytest -n 2 beside other work) while still catching a hang or a 10x slip.
LIMIT_S = float(os.environ.get("SWA_KIT_NOTEBOOK_LIMIT", "180"))
#: Seconds any one cell may block a learner on a 2-core machine (issue 35).
CELL_LIMIT_S = float(os.environ.get("SWA_KIT_CELL_LIMIT", "15"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_twin_in_sync(notebook):
    drift = twin_drift(notebook)
    assert not drift, (f"{notebook.name} and its py:percent twin differ (run `jupytext --sync {notebook}`):\n"
                       + "\n".join(drift))


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executes_headless(notebook):
    # one thread: the kernel shares the cores with the other pytest workers (see run_notebook)
    nb, run = run_notebook(notebook, cell_timeout=LIMIT_S, threads=1)
    assert run.status == "ok", f"{notebook.name}: cell index {run.failed_cell}: {run.error}"
    assert run.seconds <= LIMIT_S, f"{notebook.name} took {run.seconds:.0f} s (limit {LIMIT_S:.0f} s)"
    cells = cell_seconds(nb)
    print(f"{notebook.stem}: {run.seconds:.1f} s; cells (index, s): {[(i, round(t, 1)) for i, t in cells]}")
    slow = [(i, round(t, 1)) for i, t in cells if t > CELL_LIMIT_S]
    assert not slow, f"{notebook.name}: cells over {CELL_LIMIT_S:.0f} s (index, seconds): {slow}"


def test_readme_lists_every_notebook():
    readme = (find_notebooks_dir().parent / "README.md").read_text()
    missing = [p.name for p in NOTEBOOKS if f"(notebooks/{p.name})" not in readme]
    assert not missing, f"README.md's notebooks table lacks {missing}"


def _anchors(markdown: str) -> set[str]:
    """Explicit ``<a id>`` anchors and GitHub's heading slugs (lower case, spaces to dashes, punctuation dropped)."""
    ids = set(re.findall(r'<a id="([^"]+)"', markdown))
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return ids | {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_relative_links_resolve(notebook):
    """Every relative link in a notebook's markdown (glossary entries, docs, other notebooks) points at a file
    that exists and, for a .md target with #anchor, at an anchor that file has."""
    import nbformat

    text = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # absolute URLs are not checked here
        path, _, anchor = target.partition("#")
        file = (notebook.parent / path).resolve()
        if not file.is_file() or (anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text())):
            broken.append(target)
    assert not broken, f"{notebook.name} links to {broken}"
