"""JSON output for subcommands: tuples and numpy/torch scalars as plain JSON values."""

from __future__ import annotations

import json
from typing import Any

from swa_kit.tables import plain


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON (tuples become lists)."""
    print(json.dumps(plain(value), indent=2))
