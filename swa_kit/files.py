"""Reading a user's file, bounded: a regular file, at most so many bytes, JSON at most so deep, every number finite.

Every file the kit reads on a user's behalf (a config, a trace, a recorded benchmark, server arguments, a
prompt) goes through :func:`read_text` or :func:`read_json`, so a special file (``/dev/zero``, a FIFO), a
huge file or a deeply nested one is refused in one line naming the file, before it costs memory or a
traceback. :func:`quote` keeps an echoed input to :data:`QUOTE_CHARS` characters.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from swa_kit.errors import UsageError

QUOTE_CHARS = 200  # the most of one input a message repeats
MAX_DEPTH = 32  # JSON nesting: a config nests text_config and a per-layer list, nothing real goes deeper


def quote(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters with how much was left out."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def read_text(path: str | Path, what: str, max_bytes: int) -> str:
    """The text of ``path``: a regular file of at most ``max_bytes`` bytes in UTF-8; ``what`` names it in errors."""
    name = f"{what} {quote(str(path))}"
    try:
        # O_NONBLOCK: opening a FIFO without a writer would wait forever; stat what was opened, then read
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
                raise UsageError(f"{name} is {kind}: give a regular file")
            data = handle.read(max_bytes + 1)
    except IsADirectoryError:
        raise UsageError(f"{name} is a folder: give a regular file") from None
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except OSError as error:
        raise UsageError(f"cannot read {name} ({type(error).__name__}: {error.strerror or error})") from None
    if len(data) > max_bytes:
        raise UsageError(f"{name} is over {max_bytes:,} bytes, more than any such file holds: is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"{name} is not UTF-8 text (byte {error.start}): give the text file itself") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def parse_json(text: str, name: str, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` as JSON: at most ``max_depth`` deep, no NaN/Infinity, numbers finite; ``name`` leads each error."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant,
                           parse_float=lambda s: _finite(float(s), s))
    except RecursionError:
        raise UsageError(f"{name}: JSON nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{name} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})") \
            from None
    except ValueError as error:  # a non-finite number, or an integer of more digits than Python reads
        raise UsageError(f"{name}: {str(error)[:QUOTE_CHARS]}") from None
    if _depth(value) > max_depth:
        raise UsageError(f"{name}: JSON nested deeper than {max_depth} levels")
    return value


def _finite(value: float, text: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{text[:QUOTE_CHARS]} is not a finite number")
    return value


def read_json(path: str | Path, what: str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """:func:`read_text`, then :func:`parse_json`: every error names ``what`` and the file."""
    return parse_json(read_text(path, what, max_bytes), f"{what} {quote(str(path))}", max_depth)
