"""``swa-kit bench [--json] [--quick]``: time every sliding-window path side by side on this GPU.

Without a GPU nothing can be timed: the command says so, prints the recorded run from
``data/bench/`` (labelled RECORDED, with its machine, date and command) and exits 0, so a
CPU-only tour still shows real numbers. ``--require-gpu`` makes that case exit 4 instead,
for scripts that must not mistake a recorded run for a fresh one; so does ``--out PATH``, which
writes only a fresh measurement (exit status 4: nothing could be measured here).
"""

from __future__ import annotations

import argparse
import sys

from swa_kit.commands._args import input_file, output_file
from swa_kit.commands._output import print_json
from swa_kit.errors import UsageError
from swa_kit.exit_codes import ExitCode
from swa_kit.tables import print_table

NAME = "bench"
HELP = "benchmark sliding-window decode/prefill paths on this GPU (or show the recorded run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="the headline shape only (about a minute)")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.add_argument("--out", metavar="PATH", type=output_file,
                        help=f"also write the fresh result JSON to PATH (exit {int(ExitCode.CANNOT_MEASURE)} without a "
                             "GPU: nothing measured, nothing written)")
    parser.add_argument("--require-gpu", action="store_true",
                        help=f"exit {int(ExitCode.CANNOT_MEASURE)} without a GPU instead of showing the recorded run")
    parser.add_argument("--recorded", metavar="PATH", type=input_file,
                        help="show this recorded JSON instead of the newest one")


def _show(result: dict, as_json: bool) -> None:
    from swa_kit.measure import bench  # torch and the kernels: import when run, never for --help
    if as_json:
        print_json(result)
        return
    print("\n".join(bench.summary_lines(result)))
    rows = bench.headline_table(result)
    if rows:
        print(f"\nheadline shape {bench.HEADLINE}:")
        print_table(rows)
    grid = bench.grid_table(result)
    if grid:
        print("\nthe grid (ratios: other path's time / kit time, above 1 the kit is faster; +s: attention sinks):")
        print_table(grid)


def run(args: argparse.Namespace) -> int:
    from swa_kit.measure import bench  # torch and the kernels: import when run, never for --help
    if args.out and args.recorded:
        raise UsageError("--out writes a fresh measurement; --recorded shows an old one: give one of them")
    ok, reason = bench.gpu_available()
    if args.recorded or not ok:
        if not ok and (args.require_gpu or args.out):
            flag = f"--out set, nothing written to {args.out}" if args.out else "--require-gpu set"
            print(f"swa-kit bench: no GPU ({reason}); nothing timed; {flag}", file=sys.stderr)
            return ExitCode.CANNOT_MEASURE
        result = bench.load_recorded(args.recorded)
        if not ok:
            print(f"swa-kit bench: no GPU here ({reason}); showing the RECORDED run {result['recorded_file']} "
                  f"(not measured on this machine)", file=sys.stderr)
        _show(result, args.json)
        return 0
    command = "swa-kit " + bench.command_line(sys.argv[1:]) if sys.argv[1:2] == [NAME] else None
    command = command or f"swa-kit bench{' --quick' if args.quick else ''}"
    result = bench.run_benchmark(quick=args.quick, command=command, progress=not args.json)
    if args.out:
        bench.save(result, args.out)
    _show(result, args.json)
    return 0
