"""How long one slider move takes in each of the kit's widgets: p50 / p95 per widget.

    /work/venv/bin/python benchmarks/widgets.py [--repeat 2] [--json]

Each widget is built as a notebook builds it, then each of its sliders is moved over its range by
setting the control's value, which fires the same observer a browser drag fires: the callback runs,
the figure is redrawn and rendered to the PNG the Image widget shows. A move's time is that whole
redraw (the browser's own paint is not included). Two clocks: wall time, and this process's CPU time,
which a busy shared machine inflates less (printed beside the load average, so a slow run can be read).
The target is a wall p50 of 100 ms or less per widget on a 2-core CPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")

TARGET_P50_MS = 100.0


def _moves_of_mask_explorer() -> tuple[Any, list[tuple[Any, Any]]]:
    from swa_kit.widgets.masks import mask_explorer

    box = mask_explorer(mode="extend", window=4, q_len=64, kv_len=96)  # the 64 x 96 mask
    (mode, _), (window, chunk), (q_len, kv_len) = (row.children for row in box.children[:3])
    moves = [(window, v) for v in range(1, 65, 3)]
    moves += [(kv_len, v) for v in range(96, 63, -4)] + [(q_len, v) for v in range(64, 31, -4)]
    moves += [(mode, m) for m in ("prefill", "decode", "verify", "tree", "chunked", "extend")]
    moves += [(chunk, v) for v in (2, 8, 16)]
    return box, moves


def _moves_of_decode_stepper() -> tuple[Any, list[tuple[Any, Any]]]:
    from swa_kit.widgets.pools import decode_stepper

    box = decode_stepper()
    slider = box.children[0]
    values = list(range(slider.min + 1, slider.max + 1)) + list(range(slider.max - 1, slider.min - 1, -1))
    return box, [(slider, v) for v in values]


WIDGETS: dict[str, Callable[[], tuple[Any, list[tuple[Any, Any]]]]] = {
    "mask_explorer (64 x 96 mask)": _moves_of_mask_explorer,
    "decode_stepper": _moves_of_decode_stepper,
}


def time_moves(moves: Iterable[tuple[Any, Any]], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of each move (``control.value = v``), ``repeat`` passes over the moves."""
    moves = list(moves)
    wall, cpu = [], []
    for _ in range(repeat):
        for control, value in moves:
            if control.value == value:
                continue
            w0, c0 = time.perf_counter(), time.process_time()
            control.value = value
            wall.append(1e3 * (time.perf_counter() - w0))
            cpu.append(1e3 * (time.process_time() - c0))
    return wall, cpu


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolated (statistics.quantiles' inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="passes over each widget's moves (default 2)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: give at least 1 pass")
    rows = []
    for name, build in WIDGETS.items():
        _, moves = build()
        wall, cpu = time_moves(moves, args.repeat)
        rows.append({"widget": name, "moves": len(wall),
                     "wall_p50_ms": round(percentile(wall, 50), 1), "wall_p95_ms": round(percentile(wall, 95), 1),
                     "cpu_p50_ms": round(percentile(cpu, 50), 1), "cpu_p95_ms": round(percentile(cpu, 95), 1)})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "load_1min": load, "target_p50_ms": TARGET_P50_MS,
                          "widgets": rows}, indent=2))
    else:
        print(f"{os.cpu_count()} CPUs, load average {load:.1f} (1 min); target: wall p50 <= {TARGET_P50_MS:.0f} ms"
              if load is not None else f"{os.cpu_count()} CPUs; target: wall p50 <= {TARGET_P50_MS:.0f} ms")
        for r in rows:
            verdict = "ok" if r["wall_p50_ms"] <= TARGET_P50_MS else "SLOW"
            print(f"  {r['widget']:30} {r['moves']:3d} moves  wall p50 {r['wall_p50_ms']:7.1f} ms  "
                  f"p95 {r['wall_p95_ms']:7.1f} ms   cpu p50 {r['cpu_p50_ms']:7.1f} ms  p95 {r['cpu_p95_ms']:7.1f} ms"
                  f"  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
