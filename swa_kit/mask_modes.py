"""The forward modes :mod:`swa_kit.masks` draws, apart from it: ``swa-kit mask --help`` lists them without torch."""

from __future__ import annotations

MODES: tuple[str, ...] = ("prefill", "extend", "decode", "verify", "tree", "chunked")
