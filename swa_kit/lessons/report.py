"""How notebooks say which compute path produced a result, in a line the tour can read.

A notebook cell that runs attention calls ``announce(result)`` (any object or dict with
``path``, ``tier`` and ``device``) or ``announce(path=..., tier=..., device=...)``; it
prints one line::

    [swa_kit] path=aiter_unified tier=aiter-triton-interpreter device=cpu

``swa-kit tour`` collects these lines from every executed notebook with
:func:`parse_announcements` and lists the paths each notebook used in its summary.
Tier names are those of :data:`swa_kit.tiers.TIERS`.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from swa_kit.errors import UsageError

PREFIX = "[swa_kit]"
FIELDS = ("path", "tier", "device")
_LINE = re.compile(r"^\[swa_kit\] path=(?P<path>\S+) tier=(?P<tier>\S+) device=(?P<device>\S+)\s*$", re.MULTILINE)


def _field(result: Any, name: str) -> Any:
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, name, None)


def format_announcement(result: Any = None, *, path: str | None = None, tier: str | None = None,
                        device: Any = None) -> str:
    """The announcement line for ``result`` (keyword arguments override its fields)."""
    values = {"path": path, "tier": tier, "device": device}
    for name in FIELDS:
        if values[name] is None and result is not None:
            values[name] = _field(result, name)
    for name, value in values.items():
        text = "" if value is None else str(value)
        if not text or any(c.isspace() for c in text):
            raise UsageError(f"announce: {name}={value!r} must be a non-empty word without spaces "
                             f"(give {name}= explicitly or set it on the result)")
        values[name] = text
    return f"{PREFIX} path={values['path']} tier={values['tier']} device={values['device']}"


def announce(result: Any = None, *, path: str | None = None, tier: str | None = None, device: Any = None) -> str:
    """Print (and return) the line that names the path, tier and device of ``result``."""
    line = format_announcement(result, path=path, tier=tier, device=device)
    print(line, flush=True)
    return line


def announce_all(results: Iterable[Any]) -> None:
    """Announce each distinct (path, tier, device) among ``results`` once, in first-seen order.

    Returns nothing, so a notebook cell ending with it shows only the printed lines.
    """
    for line in dict.fromkeys(format_announcement(result) for result in results):
        print(line, flush=True)


def parse_announcements(text: str) -> list[dict[str, str]]:
    """Every announcement in ``text``, in order, as ``{"path", "tier", "device"}`` dicts."""
    return [match.groupdict() for match in _LINE.finditer(text)]
