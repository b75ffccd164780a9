"""Blocks of the guides that are generated from the code (docs/cli.md's reference, CONTRIBUTING.md's tables).

A block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``. Its test builds the text from the code and
calls :func:`check_block`, which fails when the file holds anything else, naming the command that rewrites it:
the same test run with ``SWA_KIT_WRITE_DOCS=1``.
"""

from __future__ import annotations

import os
from pathlib import Path

WRITE = "SWA_KIT_WRITE_DOCS"


def check_block(path: Path, name: str, body: str, command: str) -> None:
    """Assert that ``path``'s block ``name`` is ``body``; with ``SWA_KIT_WRITE_DOCS=1``, write it there first."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text()
    assert text.count(begin) == 1 and text.count(end) == 1, f"{path.name} needs one {begin} ... {end} block"
    head, rest = text.split(begin, 1)
    current, tail = rest.split(end, 1)
    rewrite = f"{WRITE}=1 {command}"
    generated = f"\n<!-- generated, do not edit: {rewrite} -->\n{body.strip()}\n"
    if os.environ.get(WRITE) == "1":
        path.write_text(head + begin + generated + end + tail)
        current = generated
    assert current == generated, f"{path.name}'s {name} block is out of date: run {rewrite}"
