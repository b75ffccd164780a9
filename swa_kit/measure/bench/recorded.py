"""What a recorded benchmark run must hold, field by field, before anything reads it.

A recorded run is a user's file (``swa-kit bench --recorded FILE``): every field the summaries, tables and
targets read is checked here for its type and range, so a string where a number is, a list where an object
is, a missing key or a negative time is refused in one line naming the file and the field
(``decode[3].case.window``), never a traceback further on. Fields nothing reads are left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.files import quote

SCHEMA = 2
MAX_COUNT = 1 << 53  # shapes, bytes and FLOPs: every whole number a float holds exactly
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")
ROW_LISTS = ("decode", "prefill", "decode_in_verify_tile", "decode_over_verify_keys_in_verify_tile")

Check = Callable[[Any], str | None]  # None: the value is fine; else what it should be


def _whole(low: int, high: int = MAX_COUNT) -> Check:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return None if ok else f"a whole number in {low:,}..{high:,}"
    return check


def _number(low: float = 0.0, above: bool = False) -> Check:
    def check(value: Any) -> str | None:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and (value > low if above else value >= low))
        return None if ok else f"a finite number {'>' if above else '>='} {low:g}"
    return check


_KIND_NAMES = {str: "a string", bool: "true/false", int: "a whole number", dict: "an object", list: "a list",
               type(None): "null"}


def _kind(*kinds: type) -> Check:
    names = " or ".join(_KIND_NAMES[k] for k in kinds)
    return lambda value: None if isinstance(value, kinds) else names


def _one_of(*choices: str) -> Check:
    return lambda value: None if value in choices else f"one of {', '.join(choices)}"


def _or_null(check: Check) -> Check:
    return lambda value: None if value is None else (None if check(value) is None else f"{check(value)} or null")


def _valid_drafts(value: Any) -> str | None:
    return _whole(0)(value) or ("0 (decode) or 2 and more" if value == 1 else None)


def _dict_of_numbers(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "an object of labels to numbers"
    return next((f"an object of labels to numbers ({quote(k)} is not)" for k, v in value.items()
                 if _number()(v) is not None), None)


DECODE_CASE: dict[str, Check] = {name: _whole(1) for name in ("batch", "hq", "hkv", "head_dim", "context", "window")}
DECODE_CASE |= {"dtype": _one_of(*DTYPES), "sinks": _kind(bool)}
DECODE_CASE_OPTIONAL: dict[str, Check] = {"drafts": _valid_drafts, "ragged": _kind(bool)}
PREFILL_CASE: dict[str, Check] = {name: _whole(1) for name in ("tokens", "hq", "hkv", "head_dim", "window")}
PREFILL_CASE |= {"dtype": _one_of(*DTYPES)}
ROW: dict[str, Check] = {"mode": _one_of("decode", "verify", "prefill"), "case": _kind(dict), "path": _kind(str),
                         "page_size": _or_null(_whole(1)), "label": _kind(str), "time_ms": _or_null(_number()),
                         "correct": _kind(bool, type(None)), "method": _kind(str, type(None))}
ROW_OPTIONAL: dict[str, Check] = {"keys": _whole(1), "ratios": _dict_of_numbers, "note": _kind(str)}
TIMED_DECODE: dict[str, Check] = {"window_bytes": _whole(0), "window_tbs": _number(), "copy_fraction": _number()}
TIMED_PREFILL: dict[str, Check] = {"flops": _whole(0), "window_flops": _whole(0), "tflops": _number(),
                                   "window_tflops": _number()}
SAME_BYTES: dict[str, Check] = {"bytes": _whole(1), "tbs": _number()}
TOP: dict[str, Check] = {"schema": _kind(int), "date": _kind(str), "command": _kind(str), "machine": _kind(dict),
                         "versions": _kind(dict), "copy_tbs": _number(above=True), "decode": _kind(list),
                         "prefill": _kind(list), "checks": _kind(list)}
TOP_OPTIONAL: dict[str, Check] = {"settings": _kind(dict), "copy": _kind(dict),
                                  "decode_in_verify_tile": _kind(list), "decode_over_verify_keys_in_verify_tile":
                                  _kind(list), "copy_same_bytes": _kind(list), "read_same_bytes": _kind(list)}


def _fields(holder: Any, where: str, required: dict[str, Check], optional: dict[str, Check] | None = None,
            closed: bool = False) -> None:
    """Check ``holder``'s fields; ``closed``: no others (a case becomes a dataclass's arguments)."""
    if not isinstance(holder, dict):
        raise UsageError(f"{where} is {quote(holder, 60)}, not an object")
    known = {**required, **(optional or {})}
    missing = next((name for name in required if name not in holder), None)
    if missing is not None:
        raise UsageError(f"{where} lacks {missing!r}")
    unknown = next((name for name in holder if name not in known), None) if closed else None
    if unknown is not None:
        raise UsageError(f"{where} has {quote(unknown, 60)}, which is none of {', '.join(known)}")
    for name, check in known.items():
        if name in holder and (want := check(holder[name])) is not None:
            raise UsageError(f"{where}.{name} is {quote(holder[name], 60)}, not {want}")


def check_recorded(result: Any, name: str) -> None:
    """Raise :class:`UsageError` naming ``name`` and the first field of ``result`` the kit cannot read."""
    where = f"benchmark result {name}"
    if not isinstance(result, dict):
        raise UsageError(f"{where} holds a JSON {type(result).__name__}, not a benchmark result object; give a file "
                         "swa-kit bench wrote")
    try:
        _fields(result, "the result", TOP, TOP_OPTIONAL)
        if result["schema"] != SCHEMA:
            raise UsageError(f"schema {quote(result['schema'])} != {SCHEMA}; re-record with this swa_kit")
        for rows in ROW_LISTS:
            modes = ("prefill",) if rows == "prefill" else ("decode", "verify")
            for i, row in enumerate(result.get(rows, [])):
                _row(row, f"{rows}[{i}]", modes)
        for i, check in enumerate(result["checks"]):
            _fields(check, f"checks[{i}]", {})
        for rows in ("copy_same_bytes", "read_same_bytes"):
            for i, row in enumerate(result.get(rows, [])):
                _fields(row, f"{rows}[{i}]", SAME_BYTES)
    except UsageError as error:
        raise UsageError(f"{where}: {error}; give a file swa-kit bench wrote (schema {SCHEMA})") from None


def _row(row: Any, where: str, modes: tuple[str, ...]) -> None:
    _fields(row, where, {**ROW, "mode": _one_of(*modes)}, ROW_OPTIONAL)
    if row["mode"] == "prefill":
        _fields(row["case"], f"{where}.case", PREFILL_CASE, closed=True)
    else:
        _fields(row["case"], f"{where}.case", DECODE_CASE, DECODE_CASE_OPTIONAL, closed=True)
    if row["time_ms"]:
        _fields(row, where, TIMED_PREFILL if row["mode"] == "prefill" else TIMED_DECODE)
