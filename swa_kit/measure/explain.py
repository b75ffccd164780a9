"""A routing plan as a reader wants it: one row per run of layers that share a route, or JSON.

``swa-kit explain`` and the audit print :func:`explain`; the plan itself comes from
:func:`swa_kit.engine.routing.plan`.
"""

from __future__ import annotations

import json
from typing import Any

from swa_kit.engine.routing import Plan
from swa_kit.tables import format_table

TABLE_COLUMNS = ["layer", "kind", "kernel", "window_arg", "effective_keys", "page_table", "buffer", "sglang", "kit"]


def explain(plan_: Plan, *, as_json: bool = False, group: bool = True) -> str:
    """The plan as text (a table; with ``group`` consecutive identical routes share one row) or JSON."""
    if as_json:
        return json.dumps(plan_.to_json(), indent=2)
    flags = plan_.pool
    header = (f"{plan_.model} · {flags.backend} backend · mode {plan_.mode} · worker {flags.worker} · "
              f"spec {plan_.spec} · topk {plan_.topk} · resolver {flags.resolver} · SGLang {plan_.sglang_version}")
    switches = (f"use_sliding_window_kv_pool={flags.use_sliding_window_kv_pool} "
                f"use_triton_unified_attention={flags.use_triton_unified_attention} "
                f"use_unified_verify={flags.use_unified_verify} kv_cache_vectorized_5d={flags.kv_cache_vectorized_5d} "
                f"env={plan_.env or '{}'}")
    lines = [header, switches]
    groups: dict[tuple, list[int]] = {}
    rows: dict[tuple, dict[str, Any]] = {}  # per group, its (last) row
    for entry in plan_.layers:
        row = {c: getattr(entry, c) for c in TABLE_COLUMNS[1:-2]}
        row["sglang"] = "RAISES" if entry.sglang_guard else "runs"
        row["kit"] = "WRONG KEYS" if entry.judgement else ("ok, " + entry.note if entry.note else "ok")
        key = tuple(str(row[c]) for c in TABLE_COLUMNS[1:]) if group else (entry.layer,)
        groups.setdefault(key, []).append(entry.layer)
        rows[key] = row
    table = [{"layer": layer_ranges(ids), **rows[key]} for key, ids in groups.items()]
    # Cells as str() shows them (a window argument prints as (1022, 0), as SGLang writes it)
    lines += format_table([{c: str(row[c]) for c in TABLE_COLUMNS} for row in table], TABLE_COLUMNS).splitlines()
    raised = next((p.sglang_guard for p in plan_.layers if p.sglang_guard), None)
    judged = next((p.judgement for p in plan_.layers if p.judgement), None)
    if raised:
        lines.append(f"SGLang raises: {raised}")
    if judged:
        lines.append(f"REFUSED (the kit: runs but attends the wrong keys): {judged}")
    return "\n".join(lines)


def layer_ranges(ids: list[int], shown: int = 3) -> str:
    """``[0, 1, 2, 4]`` as ``0-2,4``; long lists keep the first ``shown`` runs and the count."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    if len(text) > shown:
        return ",".join(text[:shown]) + f",... ({len(ids)} layers)"
    return ",".join(text) + (f" ({len(ids)} layers)" if len(ids) > 1 else "")
