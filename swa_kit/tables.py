"""Plain-text tables of dict rows, for the CLI, the notebooks and any report that prints rows.

A hand-written formatter rather than ``tabulate``: the kit's tables are plain left-aligned columns under a dashed
rule, and these ten lines keep that exact layout without another dependency.
"""

from __future__ import annotations

from typing import Any, Sequence


def plain(value: Any) -> Any:
    """``value`` with tuples as lists, dict keys as strings and numpy/torch scalars as Python numbers."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``rows`` as aligned text: a header, a dashed rule, one line per row (``columns`` default: the first row's keys).

    A row without a column shows an empty cell; no rows give ``(no rows)``.
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0])
    cells = [[str(plain(row.get(c, ""))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = [columns, ["-" * w for w in widths], *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in lines)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
    """Print :func:`format_table`."""
    print(format_table(rows, columns))
