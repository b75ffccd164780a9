"""Every path's chain verify over its own decode, read from a ``gpu_run.py verify_paths`` record (no GPU needed).

The verify target (``TARGETS["verify_over_decode"]``) compares the kit's verify with the kit's decode. A record of
the ``verify_paths`` stage asks every path the same question on the same KV: per cell (head shape, batch, window),
each path's decode and its verify of ``DRAFTS`` queries in every request, and the kit's ragged verify beside them.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from swa_kit.measure.bench.results import KIT, TARGETS
from swa_kit.errors import UsageError
from swa_kit.resources import data_path

#: The recorded stage: one H200, 2026-12-02 (its ``note`` says how it ran).
VERIFY_PATHS_RECORD = data_path("bench", "verify_paths", "h200_2026-12-02_v13.json")
VERIFY_MODES = ("verify", "verify_ragged")


def load_verify_paths(path: Path | str = VERIFY_PATHS_RECORD) -> dict[str, Any]:
    """A ``verify_paths`` record (``note`` and ``rows``), refused by name if it is not one."""
    try:
        record = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list) or not record["rows"] \
            or not {"mode", "path", "page_size", "us"} <= set(record["rows"][0]):
        raise UsageError(f"{str(path)!r} is not a verify_paths record (gpu_run.py verify_paths writes one)")
    return record


def _times(rows: list[dict[str, Any]]) -> dict[tuple, float]:
    """Time (us) of each (head_dim, batch, window, path, page_size, mode) that ran and matched its reference (aiter's
    verify: with the dummy page zeroed, as the record explains)."""
    return {(r["head_dim"], r["batch"], r["window"], r["path"], r["page_size"], r["mode"]): r["us"] for r in rows
            if r.get("us") and (r.get("correct") or r.get("finite_dummy_correct"))}


def verify_over_decode(record: dict[str, Any], min_batch: int = 8) -> list[dict[str, Any]]:
    """Per path and verify mode, over the cells of batch ``min_batch`` and up: the verify's time over the same path's
    decode (least, median, most; to 3 decimals) and in how many cells it stays within the verify target."""
    times = _times(record["rows"])
    ratios: dict[tuple, list[float]] = {}
    for (dim, batch, window, path, page, mode), us in times.items():
        decode = times.get((dim, batch, window, path, page, "decode"))
        if mode in VERIFY_MODES and batch >= min_batch and decode:
            ratios.setdefault((path, page, mode), []).append(us / decode)
    if not ratios:
        raise UsageError(f"no cell of batch >= {min_batch} has a verify beside its path's decode in this record")
    limit = TARGETS["verify_over_decode"]
    return [{"path": path, "page_size": page, "mode": mode, "cells": len(values), "least": round(min(values), 3),
             "median": round(statistics.median(values), 3), "most": round(max(values), 3),
             f"within {limit}x": sum(value <= limit for value in values)}
            for (path, page, mode), values in sorted(ratios.items(), key=lambda item: str(item[0]))]


def next_fastest_verify(record: dict[str, Any], page_size: int, min_batch: int = 8) -> dict[str, Any]:
    """Against the kit's verify at ``page_size``: the fastest other path's verify time over the kit's, per cell of
    batch ``min_batch`` and up (least, most, and which path it was); each other path at its fastest page size."""
    times = _times(record["rows"])
    ratios: list[float] = []
    by: dict[str, int] = {}
    for (dim, batch, window, path, page, mode), kit in times.items():
        if (path, page, mode) != (KIT, page_size, "verify") or batch < min_batch:
            continue
        others: dict[str, float] = {}
        for (d, b, w, p, _, m), us in times.items():
            if (d, b, w, m) == (dim, batch, window, "verify") and p != KIT:
                others[p] = min(us, others.get(p, us))
        if others:
            fastest = min(others, key=others.__getitem__)
            ratios.append(others[fastest] / kit)
            by[fastest] = by.get(fastest, 0) + 1
    if not ratios:
        raise UsageError(f"no cell of batch >= {min_batch} has the kit's verify at page size {page_size} beside "
                         "another path's in this record")
    return {"cells": len(ratios), "least": min(ratios), "most": max(ratios), "next_fastest": by}
