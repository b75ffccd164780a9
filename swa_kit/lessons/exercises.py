"""Exercise versions of the notebooks: the same jupytext source with the revealing cells stripped.

A notebook marks a cell that would give an exercise's answer away with the tag ``solution`` in its
py:percent header::

    # %% tags=["solution"]

:func:`exercise_notebook` reads a notebook (its ``.py`` twin or the ``.ipynb``) and drops those
cells, putting a short note in their place so the learner knows something follows once they have
answered. :func:`write_exercise_notebook` writes the result as ``NN_topic.exercises.ipynb``. The
tour executes both versions, and the tests do too: an exercise version must run on its own, so a
check cell given no answer yet says so instead of failing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.lessons.links import localize_links

SOLUTION_TAG = "solution"
SUFFIX = ".exercises.ipynb"
PLACEHOLDER = ("*(Answer cell removed in the exercise version: run your own answer through the check above, "
               "then open the full notebook.)*")


def solution_cells(nb: Any) -> list[int]:
    """Indices of the cells tagged ``solution``."""
    return [i for i, cell in enumerate(nb.cells) if SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])]


def exercise_notebook(source: Path | str) -> Any:
    """The notebook at ``source`` (``.py`` py:percent twin or ``.ipynb``) without its ``solution`` cells.

    Raises :class:`UsageError` when the notebook tags no cell: it has no exercise version to make.
    """
    import jupytext
    import nbformat

    source = Path(source)
    if not source.is_file():
        raise UsageError(f"notebook {str(source)!r} does not exist; give a notebooks/NN_topic.py or .ipynb path")
    nb = jupytext.read(source)
    stripped = set(solution_cells(nb))
    if not stripped:
        raise UsageError(f"{source.name} tags no cell {SOLUTION_TAG!r}: mark the cells that reveal an answer with "
                         f"'# %% tags=[\"{SOLUTION_TAG}\"]' in its py:percent twin")
    cells = []
    for i, cell in enumerate(nb.cells):
        if i not in stripped:
            cells.append(cell)
        elif not cells or cells[-1].source != PLACEHOLDER:  # one note per run of stripped cells
            cells.append(nbformat.v4.new_markdown_cell(PLACEHOLDER))
    nb.cells = cells
    nb.metadata.pop("jupytext", None)  # a generated file, not a paired twin
    return nb


def exercise_path(source: Path | str, out_dir: Path | str) -> Path:
    """Where the exercise version of ``source`` goes: ``out_dir/NN_topic.exercises.ipynb``."""
    return Path(out_dir) / (Path(source).stem + SUFFIX)


def write_exercise_notebook(source: Path | str, out_dir: Path | str) -> Path:
    """Write the exercise version of ``source`` into ``out_dir`` (created if needed); returns its path.

    Its links into the kit's tree (``../docs/glossary.md#aiter``) are rewritten to copies of those files under
    ``out_dir`` (:func:`swa_kit.lessons.links.localize_links`), so they work wherever the version is written.
    """
    import nbformat

    nb = exercise_notebook(source)
    target = exercise_path(source, out_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    localize_links(nb, Path(source).resolve().parent, target.parent)
    _link_exercise_neighbours(nb, Path(source).resolve().parent)
    nbformat.write(nb, target)
    return target


_NEIGHBOUR = re.compile(r"(\]\()([^)/\s#]+)\.ipynb(#[^)\s]*)?(\))")  # a link to a notebook beside this one


def _link_exercise_neighbours(nb: Any, source_dir: Path) -> None:
    """Point links to neighbouring notebooks at their exercise versions, written beside this one."""
    def rewrite(link: re.Match[str]) -> str:
        neighbour = source_dir / f"{link.group(2)}.py"
        if not neighbour.is_file() or not has_exercises(neighbour):
            return link.group(0)
        return f"{link.group(1)}{exercise_path(neighbour, '.').name}{link.group(3) or ''}{link.group(4)}"

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _NEIGHBOUR.sub(rewrite, cell.source)


def has_exercises(source: Path | str) -> bool:
    """Whether ``source`` tags any cell ``solution`` (so it has an exercise version)."""
    import jupytext

    return bool(solution_cells(jupytext.read(Path(source))))

