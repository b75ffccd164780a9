"""The benchmark run on a GPU: ceilings, then every case of the grid, each path timed and checked.

Each timed output is also checked: after timing, the path's output is poisoned with NaN,
the path runs once more, and the result is compared with the float64 reference of that
very case (the same keys, each query's own window, the sinks); ``correct`` says whether
it is finite and within :data:`TOLERANCE` (relative L2). Decode KV lives in an SWA-pool
layout whose dummy page holds NaN (see :mod:`swa_kit.measure.bench.paths`), so a path that reads
outside the window fails that check.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import torch

from swa_kit.measure.bench import timing
from swa_kit.measure.bench.cases import (
    DecodeCase,
    PrefillCase,
    decode_grid,
    is_headline_family,
    prefill_grid,
    verify_twin,
)
from swa_kit.measure.bench.paths import FULL_CONTEXT_LIMIT, DecodeInputs, Made, as_tokens, prefill_inputs, prefill_paths
from swa_kit.measure.bench.recorded import SCHEMA
from swa_kit.measure.bench.results import (
    DECODE_PATHS,
    KIT,
    PREFILL_PATHS,
    RECORDED_DIR,
    VERIFY_KEYS_TILE,
    VERIFY_TILE,
    add_ratios,
    evaluate_targets,
    make_row,
    row_label,
    save,
)
from swa_kit.errors import PathUnavailableError

TOLERANCE = 2e-2  # relative L2 error of a bf16 path against the float64 reference


def error_note(exc: Exception, limit: int = 600) -> str:
    """An exception as one bounded string: its type, its first line and its last lines (where the cause is)."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) <= limit:
        return text
    return text[: limit // 3] + " ... " + text[-(2 * limit) // 3:]


def kernel_settings() -> dict[str, Any]:
    """The kit kernel's launch defaults, recorded with every run (each kit row adds what its shape chose)."""
    from swa_kit.attention.kit import policy as kt

    return {"tile_bytes": kt.TILE_BYTES, "tile_bytes_many_rows": kt.TILE_BYTES_MANY_ROWS, "num_warps": kt.NUM_WARPS,
            "num_stages": kt.NUM_STAGES, "num_stages_narrow": kt.NUM_STAGES_NARROW,
            "max_registers": kt.MAX_REGISTERS, "programs_per_sm": kt.PROGRAMS_PER_SM,
            "deep_stages": kt.DEEP_STAGES, "deep_programs_per_sm": kt.DEEP_PROGRAMS_PER_SM, "min_chunk": kt.MIN_CHUNK,
            "latency_bound_sms_per_pair": kt.LATENCY_BOUND_SMS_PER_PAIR,
            "edge_prefetch_max_head_dim": kt.EDGE_PREFETCH_MAX_HEAD_DIM, "max_queries": kt.MAX_QUERIES}


def new_result(quick: bool, command: str, seed: int, reps: int, device: torch.device) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "recorded": False,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "machine": timing.machine(device), "versions": timing.versions(),
        "settings": {"quick": quick, "reps": reps, "seed": seed, "timer": timing.GRAPH,
                     "fallback_timer": timing.PROFILER, "flush_bytes": timing.FLUSH_BYTES,
                     "tolerance": TOLERANCE, "kit_kernel": kernel_settings()},
        "paths": {"decode": DECODE_PATHS, "prefill": PREFILL_PATHS},
        "decode": [], "prefill": [], "skipped": [], "checks": [], VERIFY_TILE: [], VERIFY_KEYS_TILE: [],
    }


def measure_ceilings(result: dict[str, Any], device: torch.device, flush: timing.L2Flush,
                     cases: list[DecodeCase]) -> None:
    """The copy bandwidth, the one-kernel launch floor, and a copy and a read of each case's window bytes, timed
    the way every path is: they say how close to the ceiling one call moving those bytes can get."""
    result["copy"] = timing.copy_bandwidth(device, flush)
    result["copy_tbs"] = result["copy"]["tbs"]
    result["launch_floor"] = timing.launch_floor(device, flush)
    result["copy_same_bytes"], result["read_same_bytes"] = [], []
    for nbytes in sorted({case.window_bytes for case in cases}):
        copy = timing.copy_bandwidth(device, flush, nbytes)
        result["copy_same_bytes"].append({"bytes": nbytes, "us": copy["us"], "tbs": copy["tbs"], "by": copy["by"],
                                          "method": copy["method"]})
        read = timing.read_bandwidth(device, flush, nbytes)
        result["read_same_bytes"].append({k: read[k] for k in ("bytes", "us", "tbs", "method")})
        torch.cuda.empty_cache()


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error of ``out`` against the float64 ``ref``; NaN where ``out`` holds anything not finite."""
    out = out.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm())


def time_and_check(make: Callable[[], Made], ref: torch.Tensor | None, flush: timing.L2Flush, reps: int,
                   cross_check: bool = False) -> tuple[dict[str, Any] | None, bool | None, str]:
    """Build a path, time it (and by the profiler too with ``cross_check``), then check one fresh run of it
    against ``ref`` (None: not checked); errors become a note."""
    try:
        fn, out, facts = make()
        measured = {**timing.measure(fn, flush, reps), **facts}
        if cross_check:
            try:
                measured["profiler_us"] = timing.profiler_kernel_us(fn, flush)["us"]
            except Exception as exc:  # the cross-check is extra: its failure is noted, the row stays
                measured["profiler_error"] = error_note(exc, 200)
        if out is not None:
            out.fill_(float("nan"))
        produced = fn()
        produced = out if out is not None else as_tokens(produced, facts.get("q_len", 1))
        error = relative_error(produced, ref) if ref is not None else None
        measured["rel_error"] = error
        return measured, (None if error is None else error < TOLERANCE), ""
    except Exception as exc:  # a path that cannot run here is reported, not fatal
        torch.cuda.synchronize()
        return None, False, error_note(exc)


def _decode_paths(data: DecodeInputs, quick: bool) -> list[tuple[str, int | None, Callable[[], Made]]]:
    """(path, page size, builder) of one decode case; each builder binds its values explicitly."""
    case = data.case
    paths: list[tuple[str, int | None, Callable[[], Made]]] = [
        (KIT, 1, partial(data.kit, 1)), (KIT, 16, partial(data.kit, 16)),
        ("aiter_triton_unified", 16, data.aiter), ("sdpa_window", None, data.sdpa_window)]
    if case.context <= FULL_CONTEXT_LIMIT:
        paths.append(("flex_attention", None, data.flex))
        if quick or is_headline_family(case):
            paths += [("sdpa_dense_mask", None, data.sdpa_dense_mask), ("sdpa_full", None, data.sdpa_full)]
    return paths


def time_decode_case(result: dict[str, Any], case: DecodeCase, device: torch.device, gen: torch.Generator,
                     flush: timing.L2Flush, reps: int, quick: bool) -> None:
    """Every path of one decode case, then the kit on its verify twin (the same KV, 2..8 drafts)."""
    data = DecodeInputs(case, device, gen)
    refs = {ps: data.reference(ps) for ps in (1, 16)}
    plain = data.reference(16, with_sinks=False) if case.sinks else refs[16]
    cross = cross_checked(case)
    for path, ps, make in _decode_paths(data, quick):
        torch_path = ps is None
        ref = None if path == "sdpa_full" else plain if ps is None else refs[ps]  # sdpa_full: not the window's
        measured, correct, note = time_and_check(make, ref, flush, reps, cross)
        if torch_path and case.sinks:
            note = "; ".join(filter(None, ["without sinks (this torch path takes none); same bytes read", note]))
        result["decode"].append(make_row("decode", case, path, ps, _ms(measured), result["copy_tbs"], correct, note,
                                         measured))
    twin = data.with_queries(verify_twin(case))
    verify_refs = {ps: twin.reference(ps) for ps in (1, 16)}
    for ps in (1, 16):
        measured, correct, note = time_and_check(partial(twin.kit, ps), verify_refs[ps], flush, reps, cross)
        result["decode"].append(make_row("verify", twin.case, KIT, ps, _ms(measured), result["copy_tbs"], correct,
                                         note, measured))
        if measured:  # the decode again in the verify's query tile (rows, tile, stages): the taller tile's cost;
            # and over as many keys as its longest chain reads (window + drafts - 1): all a verify does but mask
            tile = {k: measured[k] for k in ("rows", "block_n", "num_stages", "max_registers")}
            for name, keys in ((VERIFY_TILE, None), (VERIFY_KEYS_TILE, data.span)):
                timed, correct, note = time_and_check(partial(data.kit, ps, keys, **tile),
                                                      data.reference(ps, keys=keys) if keys else refs[ps], flush, reps)
                result[name].append(make_row("decode", case, KIT, ps, _ms(timed), result["copy_tbs"], correct, note,
                                             timed, keys))
    if case.context > FULL_CONTEXT_LIMIT:
        result["skipped"].append({"case": asdict(case), "paths": ["flex_attention", "sdpa_dense_mask", "sdpa_full"],
                                  "why": f"whole-context contiguous copies are built up to {FULL_CONTEXT_LIMIT} keys"})


def cross_checked(case: DecodeCase) -> bool:
    """Cases whose rows are also timed by the profiler (kernel time alone): B 32 at the shortest context."""
    return case.batch == 32 and case.context <= FULL_CONTEXT_LIMIT


def _ms(measured: dict[str, Any] | None) -> float | None:
    return None if measured is None else measured["us"] * 1e-3


def check_prefill_paths(device: torch.device) -> list[dict[str, Any]]:
    """Prefill paths against the float64 reference on 1024 tokens, window 256."""
    from swa_kit.attention.batch import AttentionBatch
    from swa_kit.attention.reference import reference_attention

    case = PrefillCase(tokens=1024, hq=8, hkv=2, head_dim=128, window=256)
    data = prefill_inputs(case, device)
    t = case.tokens

    def tokens(x: torch.Tensor) -> torch.Tensor:  # [1, H, T, D] -> [T, H, D]
        return x[0].transpose(0, 1)

    batch = AttentionBatch(tokens(data["q"]).contiguous(), tokens(data["k"]).contiguous(),
                           tokens(data["v"]).contiguous(), torch.tensor([0, t], device=device),
                           torch.tensor([0, t], device=device), torch.arange(t, device=device), case.head_dim**-0.5)
    ref, full = reference_attention(batch, case.window).out, reference_attention(batch, None).out
    rows = []
    for path, fn in prefill_paths(case, data, device).items():
        row: dict[str, Any] = {"mode": "prefill", "path": path, "page_size": None, "label": row_label(path, None)}
        try:
            out = fn()
            error = relative_error(out if path == "aiter_triton_unified" else tokens(out),
                                   full if path == "sdpa_full" else ref)
            row.update(rel_error=error, correct=bool(error < TOLERANCE))
        except Exception as exc:
            row.update(rel_error=None, correct=False, error=error_note(exc))
        rows.append(row)
    return rows


def time_prefill_case(result: dict[str, Any], case: PrefillCase, device: torch.device, flush: timing.L2Flush,
                      reps: int) -> None:
    correct = {c["path"]: c["correct"] for c in result["checks"]}
    data = prefill_inputs(case, device)
    for path, fn in prefill_paths(case, data, device).items():
        note, measured = "", None
        try:
            measured = timing.measure(fn, flush, max(10, reps // 5))
        except Exception as exc:
            torch.cuda.synchronize()
            note = error_note(exc)
        result["prefill"].append(make_row("prefill", case, path, None, _ms(measured), None, correct.get(path), note,
                                          measured))


def run_benchmark(quick: bool = False, command: str | None = None, progress: bool = True, seed: int = 0,
                  reps: int = 50, checkpoint: Path | str | None = None) -> dict[str, Any]:
    """Measure the ceilings, then time and check the decode/verify and prefill grids on this GPU.

    With ``checkpoint``, the partial result is saved there after each case, so a run
    stopped by a time limit still leaves its numbers.
    """
    from tqdm.auto import tqdm

    ok, reason = timing.gpu_available()
    if not ok:
        raise PathUnavailableError(f"swa-kit bench needs a GPU: {reason}; see the recorded runs in {RECORDED_DIR}")
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(seed)
    flush = timing.L2Flush(device)
    result = new_result(quick, command or "python -c 'swa_kit.measure.bench.run_benchmark(...)'", seed, reps, device)
    result["settings"]["flush_by"] = flush.by  # runs before v8 zeroed the buffer (no key)
    cases, pcases = decode_grid(quick), prefill_grid(quick)
    measure_ceilings(result, device, flush, cases)
    result["checks"] = check_prefill_paths(device)
    with tqdm(total=len(cases) + len(pcases), desc="swa-kit bench", disable=not progress, file=sys.stderr) as bar:
        for case in cases:
            time_decode_case(result, case, device, gen, flush, reps, quick)
            torch.cuda.empty_cache()
            if checkpoint:
                save(result, checkpoint)
            bar.update()
        for pcase in pcases:
            time_prefill_case(result, pcase, device, flush, reps)
            torch.cuda.empty_cache()
            bar.update()
    add_ratios(result["decode"])
    add_ratios(result["prefill"])
    result["targets"] = evaluate_targets(result)
    return result
