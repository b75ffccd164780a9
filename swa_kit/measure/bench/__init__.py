"""Benchmarks: sliding-window decode, chain verify and prefill, every path side by side, and recorded runs.

The package splits along what needs a GPU:

* :mod:`~swa_kit.measure.bench.cases`: the cases, their byte/FLOP counts and the grids (host arithmetic);
* :mod:`~swa_kit.measure.bench.results`: rows, ratios, targets, recorded runs and summaries (CPU: the CLI,
  the pictures, the workshop and notebook 05 read recorded runs through it);
* :mod:`~swa_kit.measure.bench.timing`: CUDA-graph replay with L2 flushed, profiler kernel time, the ceilings;
* :mod:`~swa_kit.measure.bench.paths`: one case's inputs on the GPU, every path's callable, the float64 reference;
* :mod:`~swa_kit.measure.bench.run`: :func:`run_benchmark`, the loop over the grid;
* :mod:`~swa_kit.measure.bench.verify_paths`: every path's verify over its own decode, from a recorded stage (CPU).

Without a GPU nothing is timed: :func:`load_recorded` reads ``data/bench/*.json``.

Where new work goes:

* a new bench path: the callable that runs it on one case's inputs (a method of ``DecodeInputs`` in
  ``swa_kit/measure/bench/paths.py``, or an entry of ``prefill_paths`` there), its line in ``_decode_paths`` of
  ``swa_kit/measure/bench/run.py`` and its description in ``DECODE_PATHS`` / ``PREFILL_PATHS`` of
  ``swa_kit/measure/bench/results.py``; every timed output is checked against the float64 reference
* a recorded GPU run: ``benchmarks/gpu_run.py`` makes it, with the machine, versions, date and command inside;
  it goes in ``data/bench/`` only if the kit reads it (``swa-kit bench``, notebook 05, the README), otherwise in
  ``records/``
"""

from swa_kit.measure.bench.cases import (
    DRAFTS,
    HEAD_SHAPES,
    HEADLINE,
    DecodeCase,
    K,
    PrefillCase,
    decode_grid,
    prefill_grid,
    verify_twin,
)
from swa_kit.measure.bench.recorded import SCHEMA
from swa_kit.measure.bench.results import (
    DECODE_PATHS,
    PREFILL_PATHS,
    RECORDED_DIR,
    TARGETS,
    VERIFY_KEYS_TILE,
    VERIFY_TILE,
    add_ratios,
    check_schema,
    command_line,
    evaluate_targets,
    grid_rows,
    grid_table,
    headline_rows,
    headline_table,
    load_recorded,
    make_row,
    math_floor_us,
    recorded_files,
    row_label,
    save,
    summary_lines,
)
from swa_kit.measure.bench.run import run_benchmark
from swa_kit.measure.bench.timing import gpu_available

__all__ = [
    "DECODE_PATHS",
    "DRAFTS",
    "HEADLINE",
    "HEAD_SHAPES",
    "PREFILL_PATHS",
    "RECORDED_DIR",
    "SCHEMA",
    "TARGETS",
    "VERIFY_KEYS_TILE",
    "VERIFY_TILE",
    "DecodeCase",
    "K",
    "PrefillCase",
    "add_ratios",
    "check_schema",
    "command_line",
    "decode_grid",
    "evaluate_targets",
    "gpu_available",
    "grid_rows",
    "grid_table",
    "headline_rows",
    "headline_table",
    "load_recorded",
    "make_row",
    "math_floor_us",
    "prefill_grid",
    "recorded_files",
    "row_label",
    "run_benchmark",
    "save",
    "summary_lines",
    "verify_twin",
]
