"""Benchmark results on the host: rows, ratios, targets, recorded runs, and their text summaries.

Nothing here needs a GPU: the CLI, the pictures, the workshop and notebook 05 read recorded
runs (``data/bench/*.json``, each with the machine, versions, date and exact command that
produced it) through these functions on any machine.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, cast

from swa_kit.measure.bench.cases import HEADLINE, DecodeCase, PrefillCase
from swa_kit.files import quote, read_json
from swa_kit.measure.bench.recorded import check_recorded
from swa_kit.resources import data_path

MAX_RECORDED_BYTES = 64 << 20  # a full grid with every row's settings is under 1 MiB
RECORDED_DIR = data_path("bench")

#: Issue #14's targets, over every decode cell of the grid (B 8, 32 and 128; B 1 has its own).
TARGETS = {
    "bandwidth": 0.90,  # kit window bytes / time over the copy bandwidth measured the same way, same run
    "vs_sdpa_window": 1.0,  # SDPA over a pre-sliced contiguous window (the ideal layout) time / kit time
    "b1_vs_fastest": 1 / 1.2,  # at B 1: fastest path's time / kit time (within 1.2x of the fastest)
    "verify_over_decode": 1.15,  # chain verify (2..8 drafts) time / decode time over the same KV (at most)
    "context_flatness": 1.10,  # kit time at the longest context / at the shortest (at most)
}
KIT = "kit_triton_swa"
#: A result's list of kit decode rows timed in their verify twin's query tile: the cost of the taller tile alone.
VERIFY_TILE = "decode_in_verify_tile"
#: Kit decode rows over as many keys as the verify twin's longest chain reads (the window and q_len - 1 more), in the
#: verify's query tile: everything a verify must do but mask its chains.
VERIFY_KEYS_TILE = "decode_over_verify_keys_in_verify_tile"

DECODE_PATHS = {
    KIT: "the kit's Triton kernel, paged (page size 1 via kv_indices, 16 via a block table); in verify rows the "
         "same kernel with 2..8 draft queries per request",
    "aiter_triton_unified": "aiter's Triton unified_attention through the kit's launcher (no host sync), page size 16",
    "flex_attention": "FlexAttention with a sliding BlockMask over the contiguous whole context (torch.compile)",
    "sdpa_window": "SDPA over a pre-sliced contiguous window (the ideal layout)",
    "sdpa_dense_mask": "SDPA over the whole contiguous context with a dense boolean mask (naive)",
    "sdpa_full": "SDPA over the whole contiguous context, no window (full attention)",
}
PREFILL_PATHS = {
    "flex_attention": "FlexAttention, causal sliding BlockMask (torch.compile)",
    "aiter_triton_unified": "aiter's Triton unified_attention through the kit's launcher, page size 16",
    "sdpa_dense_mask": "SDPA with a dense [T, T] boolean causal-window mask (naive)",
    "sdpa_full": "SDPA causal, no window (full attention)",
}


# -- rows and ratios --------------------------------------------------------------------------


def row_label(path: str, page_size: int | None) -> str:
    return path if page_size is None else f"{path}@p{page_size}"


def case_key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row["case"].items()))


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Give every timed row ``ratios[label] = other's time / this time`` for each other row of its case."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["mode"], case_key(row)), []).append(row)
    for group in groups.values():
        timed = [r for r in group if r.get("time_ms")]
        for row in timed:
            row["ratios"] = {o["label"]: o["time_ms"] / row["time_ms"] for o in timed if o is not row}


def make_row(mode: str, case: DecodeCase | PrefillCase, path: str, page_size: int | None, time_ms: float | None,
             copy_tbs: float | None, correct: bool | None, note: str = "",
             timing: dict[str, Any] | None = None, keys: int | None = None) -> dict[str, Any]:
    """One result row; bandwidth for decode and verify, TFLOP/s for prefill; ``timing`` says how it was timed.
    ``keys``: a decode row that attended that many keys, not its case's window (its bandwidth counts them)."""
    row: dict[str, Any] = {"mode": mode, "case": asdict(case), "path": path, "page_size": page_size,
                           "label": row_label(path, page_size), "time_ms": time_ms, "correct": correct,
                           "method": (timing or {}).get("method"), **({"keys": keys} if keys else {})}
    row.update({k: v for k, v in (timing or {}).items() if k not in ("method", "us")})
    if note:
        row["note"] = note if "note" not in row else f"{row['note']}; {note}"
    if time_ms:
        seconds = time_ms * 1e-3
        if isinstance(case, DecodeCase):
            row["window_bytes"] = case.kv_bytes(keys) if keys else case.window_bytes
            row["window_tbs"] = row["window_bytes"] / seconds / 1e12
            row["copy_fraction"] = row["window_tbs"] / copy_tbs if copy_tbs else None
        else:
            attended = None if path == "sdpa_full" else case.window
            row["flops"] = case.flops(attended)
            row["window_flops"] = case.flops(case.window)
            row["tflops"] = case.flops(attended) / seconds / 1e12
            row["window_tflops"] = case.flops(case.window) / seconds / 1e12
    return row


def headline_rows(result: dict[str, Any], window: int | None = None, **fixed: Any) -> list[dict[str, Any]]:
    """Timed decode rows of the headline family (optionally another window or shape), every context."""
    want = {k: v for k, v in HEADLINE.items() if k != "window"}
    want.update(fixed)
    window = cast(int, HEADLINE["window"]) if window is None else window
    return [r for r in result.get("decode", []) if r.get("time_ms") and r["case"]["window"] == window
            and r["case"].get("drafts", 0) == 0 and all(r["case"].get(k) == v for k, v in want.items())]


# -- the grid and its targets -----------------------------------------------------------------


def _cells(result: dict[str, Any]) -> dict[tuple, dict[str, dict[str, Any]]]:
    """Timed rows by (mode, case) then label."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in result.get("decode", []):
        if row.get("time_ms"):
            cells.setdefault((row["mode"], case_key(row)), {})[row["label"]] = row
    return cells


def grid_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per decode case and kit page size: time, share of copy, ratios, and the verify twin's ratio.

    Ratios are other path's time / kit time (above 1: the kit is faster); ``None`` where the
    other path was not timed at that case.
    """
    cells = _cells(result)
    same_bytes, read_bytes = same_bytes_fractions(result, "copy"), same_bytes_fractions(result, "read")
    tall_tiles, keys_tiles = _by_cell(result, VERIFY_TILE), _by_cell(result, VERIFY_KEYS_TILE)
    out = []
    for (mode, key), rows in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if mode != "decode":
            continue
        case = dict(key)
        drafts = verify_drafts(result)
        twin = cells.get(("verify", tuple(sorted({**case, "drafts": drafts}.items()))), {})
        traffic = DecodeCase(**{**case, "drafts": drafts}).least_bytes / DecodeCase(**case).least_bytes
        in_verify_tile, over_verify_keys = tall_tiles.get(key, {}), keys_tiles.get(key, {})
        fastest = min(r["time_ms"] for r in rows.values())
        for ps in (1, 16):
            kit = rows.get(row_label(KIT, ps))
            if kit is None:
                continue
            ratio = partial(_ratio, rows, kit)
            verify = twin.get(row_label(KIT, ps))
            tall, keys = in_verify_tile.get(row_label(KIT, ps)), over_verify_keys.get(row_label(KIT, ps))
            window_bytes: Any = kit.get("window_bytes")  # a record's value; None finds no fraction
            out.append({"case": case, "page_size": ps, "kit_us": kit["time_ms"] * 1e3,
                        "copy_fraction": kit.get("copy_fraction"), "correct": kit.get("correct"),
                        "same_bytes_copy_fraction": same_bytes.get(window_bytes),
                        "same_bytes_read_fraction": read_bytes.get(window_bytes),
                        "vs_sdpa_window": ratio("sdpa_window"), "vs_flex": ratio("flex_attention"),
                        "vs_aiter": ratio(row_label("aiter_triton_unified", 16)),
                        "vs_fastest": fastest / kit["time_ms"],
                        "verify_us": verify["time_ms"] * 1e3 if verify else None,
                        "verify_correct": verify.get("correct") if verify else None,
                        "verify_over_decode": verify["time_ms"] / kit["time_ms"] if verify else None,
                        "verify_bytes_over_decode": traffic if verify else None,
                        "verify_tile_over_decode": tall["time_ms"] / kit["time_ms"] if tall else None,
                        "verify_keys_tile_over_decode": keys["time_ms"] / kit["time_ms"] if keys else None})
    return out


def _by_cell(result: dict[str, Any], name: str) -> dict[tuple, dict[str, dict[str, Any]]]:
    """A result's list ``name`` of timed kit rows by decode case, then label."""
    rows: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in result.get(name, []):
        if row.get("time_ms"):
            rows.setdefault(case_key(row), {})[row["label"]] = row
    return rows


def same_bytes_fractions(result: dict[str, Any], how: str) -> dict[int, float]:
    """For each window size timed, the share of the copy ceiling that one ``how`` ("copy" or "read") of those
    bytes reached (runs before v8 timed no reads: empty)."""
    if how not in ("copy", "read"):
        raise ValueError(f"how={how!r}: the same bytes were timed by a 'copy' and by a 'read'")
    return {c["bytes"]: c["tbs"] / result["copy_tbs"] for c in result.get(f"{how}_same_bytes", [])}


def _ratio(rows: dict[str, dict[str, Any]], kit: dict[str, Any], label: str) -> float | None:
    return rows[label]["time_ms"] / kit["time_ms"] if label in rows else None


def verify_drafts(result: dict[str, Any]) -> int:
    return max((r["case"].get("drafts", 0) for r in result.get("decode", [])), default=0)


def _target(name: str, how: str, values: list[tuple[dict[str, Any], float]], at_most: bool = False
            ) -> dict[str, Any]:
    threshold = TARGETS[name]
    misses = [(cell, v) for cell, v in values if (v > threshold if at_most else v < threshold)]
    worst = (max if at_most else min)((v for _, v in values), default=None)
    return {"target": name, "threshold": threshold, "how": how, "cells": len(values), "worst": worst,
            "missed": len(misses), "met": (not misses) if values else None,
            "misses": [{**cell, "value": v} for cell, v in misses]}


def _cell(g: dict[str, Any]) -> dict[str, Any]:
    """Where a grid row sits: its case and page size."""
    return {**g["case"], "page_size": g["page_size"]}


def _verify_target(grid: list[dict[str, Any]]) -> dict[str, Any]:
    """Verify within 1.15x of decode; each miss says what the verify must move, what decode took in its tile, and
    what decode took over the verify's keys in its tile."""
    explained = ("verify_bytes_over_decode", "verify_tile_over_decode", "verify_keys_tile_over_decode")
    verify = _target("verify_over_decode", "kit verify (2..8 drafts) time / kit decode time, same KV",
                     [({**_cell(g), **{k: g[k] for k in explained}}, g["verify_over_decode"])
                      for g in grid if g["verify_over_decode"] is not None], at_most=True)
    limit = TARGETS["verify_over_decode"]
    if verify["misses"]:  # arithmetic on the shapes: every run has it
        verify["verify_bytes_misses_too"] = sum(m["verify_bytes_over_decode"] > limit for m in verify["misses"])
    for name, claim in (("verify_tile_over_decode", "verify_tile_misses_too"),
                        ("verify_keys_tile_over_decode", "verify_keys_tile_misses_too")):
        times = [m[name] for m in verify["misses"]]
        if times and None not in times:  # runs recorded before these rows were timed (v4; v11's first) make no claim
            verify[claim] = sum(t > limit for t in times)
    return verify


def evaluate_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #14's targets over the grid: how many cells each covers, which miss, and the worst value."""
    grid = grid_rows(result)

    def with_copy(g: dict[str, Any]) -> dict[str, Any]:
        return {**_cell(g), "same_bytes_copy_fraction": g["same_bytes_copy_fraction"],
                "same_bytes_read_fraction": g["same_bytes_read_fraction"]}

    batched = [g for g in grid if g["case"]["batch"] > 1]
    bandwidth = _target("bandwidth", "kit window bytes / time over the copy bandwidth (B > 1)",
                        [(with_copy(g), g["copy_fraction"]) for g in batched if g["copy_fraction"] is not None])
    for how in ("copy", "read"):  # recorded runs before the same-bytes copies (reads: v8) have none
        same = [m[f"same_bytes_{how}_fraction"] for m in bandwidth["misses"]]
        if same and None not in same:
            bandwidth[f"{how}_of_same_bytes_misses_too"] = sum(f < TARGETS["bandwidth"] for f in same)
    out = [
        bandwidth,
        _target("vs_sdpa_window", "SDPA-over-window time / kit time (B > 1)",
                [(_cell(g), g["vs_sdpa_window"]) for g in batched if g["vs_sdpa_window"] is not None]),
        _target("b1_vs_fastest", "fastest path's time / kit time at B 1",
                [(_cell(g), g["vs_fastest"]) for g in grid if g["case"]["batch"] == 1]),
    ]
    out.append(_verify_target(grid))
    flat: list[tuple[dict[str, Any], float]] = []
    contexts = sorted({g["case"]["context"] for g in grid})
    if len(contexts) >= 2:
        by = {(tuple(sorted(g["case"].items())), g["page_size"]): g for g in grid}
        for g in grid:
            if g["case"]["context"] == contexts[0]:
                long = by.get((tuple(sorted({**g["case"], "context": contexts[-1]}.items())), g["page_size"]))
                if long:
                    flat.append((_cell(g), long["kit_us"] / g["kit_us"]))
    out.append(_target("context_flatness", f"kit time at {contexts[-1] if contexts else '?'} / at "
                       f"{contexts[0] if contexts else '?'} keys", flat, at_most=True))
    prefill = [r for r in result.get("prefill", []) if r.get("time_ms") and r.get("correct") and
               r["path"] != "sdpa_full"]
    if prefill:
        best: dict[tuple, dict[str, Any]] = {}
        for r in prefill:
            key = (r["case"]["tokens"], r["case"]["window"])
            if key not in best or r["time_ms"] < best[key]["time_ms"]:
                best[key] = r
        out.append({"target": "prefill_fastest", "threshold": None, "how": "fastest correct windowed path, TFLOP/s",
                    "cells": len(best), "missed": 0, "met": None,
                    "worst": min(r["tflops"] for r in best.values()),
                    "misses": [], "by_case": {f"{t}/{w}": f"{r['label']} {r['tflops']:.0f}"
                                              for (t, w), r in sorted(best.items())}})
    return out


# -- recorded runs ----------------------------------------------------------------------------


def recorded_files(directory: Path = RECORDED_DIR) -> list[Path]:
    return sorted(directory.glob("*.json"))


def load_recorded(path: Path | str | None = None) -> dict[str, Any]:
    """A recorded run (the newest in ``data/bench`` by default), marked ``recorded: True``.

    The file is read bounded (:func:`swa_kit.files.read_json`) and every field the kit reads is checked
    (:func:`swa_kit.measure.bench.recorded.check_recorded`): a malformed file is one :class:`UsageError`
    naming the file and the field.
    """
    if path is None:
        runs = {p: _read(p) for p in recorded_files()}
        if not runs:
            raise FileNotFoundError(f"no recorded benchmark in {RECORDED_DIR}; run `swa-kit bench --json` on a GPU")
        path = max(runs, key=lambda p: runs[p]["date"])
        result = runs[path]
    else:
        result = _read(path)
    result["recorded"] = True
    result["recorded_file"] = str(path)
    # The verdicts derive from the rows, so they are evaluated again: an older run gains today's annotations
    # (the verify traffic, say); what the run itself wrote stays beside them.
    result["targets_as_recorded"] = result.get("targets")
    result["targets"] = evaluate_targets(result)
    return result


def _read(path: Path | str) -> dict[str, Any]:
    result = read_json(path, "benchmark result", MAX_RECORDED_BYTES)
    check_recorded(result, quote(str(path)))
    return result


def check_schema(result: dict[str, Any]) -> None:
    """Raise UsageError (a ValueError) naming the first field of a benchmark result the kit cannot read."""
    check_recorded(result, "in memory")


def save(result: dict[str, Any], path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def command_line(argv: Iterable[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# -- text summaries ---------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A short human summary: where it ran, how it was timed, copy bandwidth, the targets."""
    m, v = result["machine"], result["versions"]
    head = "RECORDED run" if result.get("recorded") else "this run"
    copy = result.get("copy") or {}
    lines = [f"{head}: {m.get('gpu')} ({m.get('sms')} SMs), {result['date']}",
             f"  torch {v.get('torch')}, triton {v.get('triton')}, command: {result['command']}",
             (f"  device-to-device copy: {result['copy_tbs']:.2f} TB/s (read + write), timed by "
              f"{copy.get('method', result.get('settings', {}).get('timer', '?'))}")]
    for t in result.get("targets") or evaluate_targets(result):
        verdict = {True: "MET", False: "NOT MET", None: "n/a"}[t["met"]]
        thr = "" if t["threshold"] is None else f" (target {t['threshold']:.3g})"
        lines.append(f"  {t['target']:<19} worst {_fmt(t['worst'], '.3f')}{thr}, {t['missed']} of {t['cells']} "
                     f"cells miss: {verdict}")
        if "copy_of_same_bytes_misses_too" in t:
            lines.append(f"    in {t['copy_of_same_bytes_misses_too']} of those {t['missed']}, a plain copy of the "
                         f"same bytes misses {t['threshold']:.0%} too (one call's fixed cost)")
        if "read_of_same_bytes_misses_too" in t:
            lines.append(f"    in {t['read_of_same_bytes_misses_too']} of those {t['missed']}, one read of the same "
                         f"bytes (a sum: a plain reader of them, in one call) misses {t['threshold']:.0%} too")
        if "verify_bytes_misses_too" in t:
            lines.append(f"    in {t['verify_bytes_misses_too']} of those {t['missed']}, the verify must move over "
                         f"{t['threshold']}x decode's bytes (its queries and outputs): its traffic alone misses")
        if "verify_tile_misses_too" in t:
            lines.append(f"    in {t['verify_tile_misses_too']} of those {t['missed']}, decode alone in the verify's "
                         f"query tile takes over {t['threshold']}x too (the taller tile's cost)")
        if "verify_keys_tile_misses_too" in t:
            lines.append(f"    in {t['verify_keys_tile_misses_too']} of those {t['missed']}, decode over the verify's "
                         f"keys in its query tile takes over {t['threshold']}x too (all a verify does but mask)")
    return lines


def headline_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the headline shape, one per (context, path), for printing."""
    rows = []
    for r in sorted(headline_rows(result), key=lambda r: (r["case"]["context"], r["time_ms"])):
        rows.append({"context": r["case"]["context"], "path": r["label"], "time_us": f"{r['time_ms'] * 1e3:.1f}",
                     "TB/s": f"{r['window_tbs']:.2f}", "of copy": f"{r['copy_fraction']:.0%}",
                     "correct": r["correct"], "method": r.get("method")})
    return rows


def grid_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`grid_rows` as printable strings (ratios: other / kit, above 1 the kit is faster)."""
    out = []
    for g in grid_rows(result):
        c = g["case"]
        out.append({"B": c["batch"], "heads": f"{c['hq']}/{c['hkv']}/{c['head_dim']}" + ("+s" if c["sinks"] else ""),
                    "W": c["window"], "ctx": f"{c['context'] // 1024}k", "p": g["page_size"],
                    "kit_us": _fmt(g["kit_us"], ".1f"), "copy": _fmt(g["copy_fraction"], ".0%"),
                    "copy_same": _fmt(g["same_bytes_copy_fraction"], ".0%"),
                    "read_same": _fmt(g["same_bytes_read_fraction"], ".0%"),
                    "xSDPA_w": _fmt(g["vs_sdpa_window"]), "xFlex": _fmt(g["vs_flex"]),
                    "xAiter": _fmt(g["vs_aiter"]), "xFastest": _fmt(g["vs_fastest"]),
                    "verify_us": _fmt(g["verify_us"], ".1f"), "ver/dec": _fmt(g["verify_over_decode"]),
                    "bytes v/d": _fmt(g["verify_bytes_over_decode"]),
                    "tile/dec": _fmt(g["verify_tile_over_decode"]),
                    "keys+tile/dec": _fmt(g["verify_keys_tile_over_decode"]),
                    "ok": bool(g["correct"]) and g["verify_correct"] is not False})
    return out


def math_floor_us(case: DecodeCase, copy_tbs: float) -> float:
    """The bandwidth floor of a decode case: window bytes over the copy bandwidth, in microseconds."""
    return case.window_bytes / (copy_tbs * 1e12) * 1e6 if copy_tbs else math.inf
