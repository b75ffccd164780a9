"""``swa-kit mask --mode MODE --kv-len N --window W``: the attention mask of one forward pass."""

from __future__ import annotations

import argparse
import sys
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from tqdm import tqdm

from swa_kit import budget
from swa_kit.commands._args import add_budget_arguments, bounded_int, output_file
from swa_kit.commands._extras import PICTURE_MODULES, require
from swa_kit.commands._output import print_json
from swa_kit.errors import MaskError
from swa_kit.mask_modes import MODES
from swa_kit.window import CONVENTIONS, MAX_KEYS, Window, parse_value

if TYPE_CHECKING:  # masks are torch tensors: imported where one is built, so --help answers without torch
    from swa_kit.masks import BlockTally, ForwardMask, Progress

NAME = "mask"
HELP = "print or draw the attention mask of a forward mode (prefill, extend, decode, verify, tree, chunked)"

MAX_JSON_CELLS = 4096  # 64 x 64: one JSON line per cell beyond that helps nobody
MAX_TEXT_COLS, MAX_TEXT_ROWS = 96, 64
MAX_PNG_CELLS = 512 * 512  # larger masks are drawn as a block view
_UNSET = object()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", required=True, choices=MODES, help="forward mode")
    positions = bounded_int(1, MAX_KEYS)
    parser.add_argument("--kv-len", type=positions, required=True, help="keys in the request's KV, queries included")
    parser.add_argument("--q-len", type=positions, help="queries (default: kv-len for prefill, 1 for decode, "
                        "the parents' count for tree)")
    parser.add_argument("--window", default=_UNSET, help="sliding window in keys, counting the query "
                        "(or in --convention's spelling); 'none' = no window. Not for chunked")
    parser.add_argument("--convention", choices=list(CONVENTIONS), metavar="NAME",
                        help="read --window as this API writes it: " + ", ".join(CONVENTIONS))
    parser.add_argument("--parents", help="tree: parent of each draft token, -1 = root on the prefix, e.g. "
                        "--parents=-1,0,0,1,1 (default: a complete binary tree of q-len tokens)")
    parser.add_argument("--chunk", type=positions, help="chunked: chunk size (Llama-4 uses 8192)")
    parser.add_argument("--block", type=positions, help="print the block view in BLOCK x BLOCK "
                        "tiles instead of the mask (any size: the dense mask is never built)")
    parser.add_argument("--json", action="store_true", help=f"print JSON (dense mask up to {MAX_JSON_CELLS} cells)")
    parser.add_argument("--png", metavar="FILE", type=output_file,
                        help="save a picture (the block view for large masks)")
    add_budget_arguments(parser)


def _window(args: argparse.Namespace) -> Window:
    if args.window is _UNSET:
        if args.mode == "chunked":
            return Window(None)
        raise MaskError("give --window: keys a query attends counting itself (e.g. 1024), or --window none")
    value = parse_value(args.window, args.convention)
    return Window.from_convention(args.convention, value) if args.convention else Window(value)


def _parents(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise MaskError(f"cannot read --parents {text!r}: give comma-separated ints, e.g. --parents=-1,0,0,1,1") \
            from None


def build_mask(args: argparse.Namespace) -> ForwardMask:
    """The :class:`ForwardMask` the command line describes."""
    parents = _parents(args.parents)
    q_len = args.q_len
    if q_len is None:
        defaults = {"prefill": args.kv_len, "decode": 1, "tree": len(parents) if parents else None}
        q_len = defaults.get(args.mode)
        if q_len is None:
            raise MaskError(f"mode {args.mode} needs --q-len (queries at the end of the {args.kv_len}-key KV)")
    from swa_kit.masks import forward_mask

    return forward_mask(args.mode, q_len, args.kv_len, _window(args), parents=parents, chunk=args.chunk)


# Upper-bound rates on a busy 2-core machine (BlockTally over 1M and 20M prefill masks, with margin).
SUMMARY_ROW_SECONDS, LISTING_ROW_SECONDS, TILE_SECONDS = 150e-6, 600e-6, 300e-9
JSON_TILE_BYTES, GRID_BYTES = 80, 100  # a listed KV block in a JSON list; one cell of a slice's work arrays
WAY_OUT = "use a larger --block, a shorter --kv-len or a window (--window W)"


def tally_estimate(tally: BlockTally, listing: str | None) -> budget.Estimate:
    """The streamed block view's bound: per tile row and per tile; a JSON listing holds every listed tile."""
    tiles = tally.n_q_blocks * tally.span_bound()
    held = tiles * JSON_TILE_BYTES if listing == "json" else tally.GROUP_CELLS * GRID_BYTES
    per_row = LISTING_ROW_SECONDS if listing else SUMMARY_ROW_SECONDS
    seconds = tally.n_q_blocks * per_row + tiles * TILE_SECONDS
    return budget.Estimate(f"block view of {tally.n_q_blocks:,} x {tally.n_kv_blocks:,} tiles", held, seconds)


def _tally(mask: ForwardMask, block: int, listing: str | None) -> BlockTally:
    from swa_kit.masks import BlockTally

    tally = BlockTally(mask, block)
    estimate = budget.check(tally_estimate(tally, listing), WAY_OUT)
    if budget.announce(estimate):
        print(f"swa-kit mask: {estimate.describe()} (bound)", file=sys.stderr)
    return tally


def _progress(tally: BlockTally) -> Progress:
    """A tqdm bar on stderr over the tile rows, shown when the work is long."""
    shown = budget.announce(tally_estimate(tally, None))
    return partial(tqdm, total=tally.n_q_blocks, desc="tile rows", unit="row", file=sys.stderr, disable=not shown,
                   leave=False)


def _save_png(mask: ForwardMask, args: argparse.Namespace) -> None:
    from swa_kit.masks import BlockTally
    from swa_kit.viz.masks import block_view_figure, mask_figure

    if mask.q_len * mask.kv_len <= MAX_PNG_CELLS:
        fig = mask_figure(mask, block=args.block)
    else:
        tally = BlockTally(mask, args.block or 128)
        grid = tally.n_q_blocks * tally.n_kv_blocks
        budget.check(budget.Estimate(f"picture of {grid:,} tiles", grid * GRID_BYTES, grid * TILE_SECONDS),
                     WAY_OUT)
        fig = block_view_figure(mask.block_view(tally.bq), title=mask.describe())
    fig.savefig(args.png, dpi=120)
    if not args.json:
        print(f"{mask.describe()}\nwrote {args.png}")


def run(args: argparse.Namespace) -> int:
    if args.png and (stopped := require(NAME, PICTURE_MODULES)) is not None:
        return stopped  # before any work: the picture is what was asked for
    mask = build_mask(args)
    if args.png:
        _save_png(mask, args)
        if not (args.json or args.block):
            return 0
    if args.block:
        tally = _tally(mask, args.block, "json" if args.json else "text")
        if args.json:
            print_json(mask.blocks_to_json(args.block, _progress(tally)))
        else:
            for line in mask.blocks_to_lines(args.block, _progress(tally)):
                print(line)
        return 0
    cells = mask.q_len * mask.kv_len
    if args.json:
        if cells > MAX_JSON_CELLS:
            raise MaskError(
                f"a {mask.q_len} x {mask.kv_len} mask ({cells} cells) is too big for --json (limit {MAX_JSON_CELLS}); "
                "use --block 128 for the block view or --png FILE for a picture"
            )
        print_json(mask.to_json())
    elif mask.kv_len > MAX_TEXT_COLS or mask.q_len > MAX_TEXT_ROWS:
        print(mask.describe())
        tally = _tally(mask, 128, None)
        deque(tally.rows(_progress(tally)), maxlen=0)  # stream the tile rows (the bar moves); the summary tallies them
        print(tally.summary())
        print("too big to print: use --block 128 for the block view or --png FILE for a picture")
    else:
        print(mask.to_text())
    return 0
