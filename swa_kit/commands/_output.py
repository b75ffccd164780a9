"""Shared output helpers for subcommands: JSON that handles tuples and numpy/torch scalars."""

from __future__ import annotations

import json
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON (tuples become two-element lists)."""
    print(json.dumps(_plain(value), indent=2))


def print_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
    """Print dict rows as an aligned plain-text table."""
    if not rows:
        print("(no rows)")
        return
    columns = columns or list(rows[0])
    cells = [[str(_plain(row.get(c, ""))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
