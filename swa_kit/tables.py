"""Text and Markdown tables of dict rows, for the CLI, the notebooks and every report that prints rows.

A hand-written formatter rather than ``tabulate``: the kit's tables are plain left-aligned columns under a dashed
rule (or a plain Markdown table), and these lines keep that exact layout without another dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Sequence


def plural(count: int, word: str) -> str:
    """``'1 key'``, ``'2 keys'``: a count and its noun, for every printed count."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def plain(value: Any) -> Any:
    """``value`` with tuples as lists, dict keys as strings and numpy/torch scalars as Python numbers."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def _text(value: Any) -> str:
    return str(plain(value))


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, *, markdown: bool = False,
                 cell: Callable[[Any], str] = _text) -> str:
    """``rows`` as aligned text: a header, a dashed rule, one line per row; with ``markdown``, a Markdown table.

    ``columns`` default: the first row's keys. ``cell`` writes one value (default: ``str`` of :func:`plain`); a row
    without a column shows an empty cell, a ``|`` inside a Markdown cell is escaped; no rows give ``(no rows)``.
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0])
    cells = [[cell(row[c]) if c in row else "" for c in columns] for row in rows]
    if markdown:
        lines = [columns, ["---"] * len(columns), *([v.replace("|", "\\|") for v in r] for r in cells)]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = [columns, ["-" * w for w in widths], *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in lines)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
    """Print :func:`format_table`."""
    print(format_table(rows, columns))
