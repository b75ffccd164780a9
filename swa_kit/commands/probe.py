"""``swa-kit probe``: measure which keys an attention path really attends."""

from __future__ import annotations

import argparse

from swa_kit.attention.paths import PROBE_MODES, all_paths
from swa_kit.commands._args import add_budget_arguments, bounded_int, device, output_file
from swa_kit.commands._extras import PICTURE_MODULES, require
from swa_kit.commands._output import print_json
from swa_kit.exit_codes import ExitCode
from swa_kit.tables import print_table
from swa_kit.window import MAX_KEYS

NAME = "probe"
HELP = "measure which keys a path (or each SGLang aiter call site) really attends for a W-key window"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        f"{HELP}. --path runs one registered path with the window argument the kit's converter gives for W "
        "keys; --sglang-sites runs each aiter call site with the argument SGLang passes for a layer whose "
        "sliding_window_size is W - 1. --json: a list, one object per row: path, tier, device, site, window_arg, "
        "intended_keys, attended_keys, ok, per-mode results, skipped modes. Exit 0 when every measured row agrees, "
        "1 when a measured mask differs from the intended one, 4 when nothing could be measured here."
    )
    which = parser.add_mutually_exclusive_group(required=True)
    names = [path.name for path in all_paths()]
    which.add_argument("--path", choices=names, metavar="PATH", help="registered path: " + ", ".join(names))
    which.add_argument("--sglang-sites", action="store_true", help="every aiter call site of SGLang's backend")
    parser.add_argument("--keys", type=bounded_int(1, MAX_KEYS), required=True, metavar="W",
                        help="window in keys attended per query, counting itself")
    parser.add_argument("--mode", choices=PROBE_MODES, action="append", dest="modes",
                        help="measure only these modes (repeatable; default all)")
    parser.add_argument("--device", type=device, default="cpu",
                        help="torch device (default cpu; aiter Triton runs interpreted)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--png", metavar="FILE", type=output_file, help="draw measured vs intended masks into FILE")
    add_budget_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.png and (stopped := require(NAME, PICTURE_MODULES)) is not None:
        return stopped  # before any work: the picture is what was asked for
    from swa_kit.measure.probe import probe_path, probe_sglang_sites  # torch: not for --help

    modes = tuple(args.modes or PROBE_MODES)
    if args.sglang_sites:
        rows = [r for r in probe_sglang_sites(args.keys, device=args.device) if not args.modes or
                set(r.masks) & set(modes) or set(r.skipped) & set(modes)]
    else:
        rows = [probe_path(args.path, args.keys, modes=modes, device=args.device)]
    if args.json:
        print_json([r.to_json() for r in rows])
    else:
        print_table([{k: v for k, v in r.to_json().items() if k not in ("modes", "skipped")} for r in rows])
        for r in rows:
            for mode, why in r.skipped.items():
                print(f"  {r.site or r.path}: {mode} not measured: {why}")
    if not any(r.masks for r in rows):
        return ExitCode.CANNOT_MEASURE
    if args.png:
        from swa_kit.viz.probe import draw_probe, draw_probe_table

        fig = draw_probe(rows[0]) if len(rows) == 1 else draw_probe_table(rows, next(
            m for m in ("decode", *modes) if any(m in r.masks for r in rows)))
        fig.savefig(args.png, dpi=120)
    measured = [r for r in rows if r.masks]
    return ExitCode.OK if all(r.ok for r in measured) else ExitCode.DISAGREES
