"""``swa-kit mask --mode MODE --kv-len N --window W``: the attention mask of one forward pass."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.errors import MaskError
from swa_kit.masks import MODES, ForwardMask, forward_mask
from swa_kit.window import CONVENTIONS, Window, parse_value

NAME = "mask"
HELP = "print or draw the attention mask of a forward mode (prefill, extend, decode, verify, tree, chunked)"

MAX_JSON_CELLS = 4096  # 64 x 64: one JSON line per cell beyond that helps nobody
MAX_TEXT_COLS, MAX_TEXT_ROWS = 96, 64
MAX_PNG_CELLS = 512 * 512  # larger masks are drawn as a block view
_UNSET = object()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", required=True, choices=MODES, help="forward mode")
    parser.add_argument("--kv-len", type=int, required=True, help="keys in the request's KV, queries included")
    parser.add_argument("--q-len", type=int, help="queries (default: kv-len for prefill, 1 for decode, "
                        "the parents' count for tree)")
    parser.add_argument("--window", default=_UNSET, help="sliding window in keys, counting the query "
                        "(or in --convention's spelling); 'none' = no window. Not for chunked")
    parser.add_argument("--convention", choices=list(CONVENTIONS), metavar="NAME",
                        help="read --window as this API writes it: " + ", ".join(CONVENTIONS))
    parser.add_argument("--parents", help="tree: parent of each draft token, -1 = root on the prefix, e.g. "
                        "--parents=-1,0,0,1,1 (default: a complete binary tree of q-len tokens)")
    parser.add_argument("--chunk", type=int, help="chunked: chunk size (Llama-4 uses 8192)")
    parser.add_argument("--block", type=int, help="print the block view in BLOCK x BLOCK tiles instead of "
                        "the mask (any size: the dense mask is never built)")
    parser.add_argument("--json", action="store_true", help=f"print JSON (dense mask up to {MAX_JSON_CELLS} cells)")
    parser.add_argument("--png", metavar="FILE", help="save a picture (the block view for large masks)")


def _window(args: argparse.Namespace) -> Window:
    if args.window is _UNSET:
        if args.mode == "chunked":
            return Window(None)
        raise MaskError("give --window: keys a query attends counting itself (e.g. 1024), or --window none")
    value = parse_value(args.window)
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
    return forward_mask(args.mode, q_len, args.kv_len, _window(args), parents=parents, chunk=args.chunk)


def _save_png(mask: ForwardMask, args: argparse.Namespace) -> None:
    from swa_kit.viz.masks import block_view_figure, mask_figure

    if mask.q_len * mask.kv_len <= MAX_PNG_CELLS:
        fig = mask_figure(mask, block=args.block)
    else:
        fig = block_view_figure(mask.block_view(args.block or 128), title=mask.describe())
    fig.savefig(args.png, dpi=120)
    if not args.json:
        print(f"{mask.describe()}\nwrote {args.png}")


def run(args: argparse.Namespace) -> int:
    mask = build_mask(args)
    if args.png:
        _save_png(mask, args)
        if not (args.json or args.block):
            return 0
    if args.block:
        if args.json:
            print_json(mask.blocks_to_json(args.block))
        else:
            print(mask.blocks_to_text(args.block))
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
        print(mask.block_view(128).summary())
        print("too big to print: use --block 128 for the block view or --png FILE for a picture")
    else:
        print(mask.to_text())
    return 0
