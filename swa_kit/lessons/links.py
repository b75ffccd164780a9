"""Relative links of a notebook written somewhere else: the files they point at are copied beside it.

The tour writes executed notebooks into its output folder and :mod:`swa_kit.lessons.exercises` writes exercise
versions wherever it is asked; both keep a notebook's ``../docs/glossary.md#aiter`` working through
:func:`localize_links`.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")  # a markdown link's target, between "](" and ")"
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")  # https:, mailto:, file: ...: not relative


def localize_links(nb: Any, source_dir: Path, out: Path) -> list[Path]:
    """Make the relative links in ``nb``'s markdown work from ``out``, where the tour writes the notebook.

    A link to a file beside the notebook (another notebook) stays: the tour writes its neighbours beside it. A
    link that leaves ``source_dir`` for a file of the kit's tree (``../docs/glossary.md#aiter``) gets that file
    copied under ``out`` at its place relative to ``source_dir``'s parent (``out/docs/glossary.md``) and points
    there. Anything else (absolute URLs, anchors, missing files) stays as written. Returns the files copied.
    """
    here = Path(source_dir).resolve()
    copies: dict[Path, Path] = {}

    def rewrite(link: re.Match[str]) -> str:
        target = link.group(2)
        path, hash_, anchor = target.partition("#")
        if not path or _SCHEME.match(target):
            return link.group(0)
        file = (here / path).resolve()
        if not file.is_file() or file.parent == here or not file.is_relative_to(here.parent):
            return link.group(0)
        relative = file.relative_to(here.parent)
        copies[Path(out) / relative] = file
        return f"{link.group(1)}{relative.as_posix()}{hash_}{anchor}{link.group(3)}"

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _LINK.sub(rewrite, cell.source)
    for copy, original in copies.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(original, copy)
    return sorted(copies)
