"""``swa-kit mask --mode MODE --kv-len N --window W``: the attention mask of one forward pass."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.errors import MaskError
from swa_kit.masks import MODES, MaskSpec, mask_spec
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


def build_spec(args: argparse.Namespace) -> MaskSpec:
    """The :class:`MaskSpec` the command line describes."""
    parents = _parents(args.parents)
    q_len = args.q_len
    if q_len is None:
        defaults = {"prefill": args.kv_len, "decode": 1, "tree": len(parents) if parents else None}
        q_len = defaults.get(args.mode)
        if q_len is None:
            raise MaskError(f"mode {args.mode} needs --q-len (queries at the end of the {args.kv_len}-key KV)")
    return mask_spec(args.mode, q_len, args.kv_len, _window(args), parents=parents, chunk=args.chunk)


def _print_blocks(spec: MaskSpec, block: int, as_json: bool) -> None:
    view = spec.block_view(block)
    rows = [{"q_block": qb, "kv_blocks": view.kv_blocks(qb).tolist(), "pairs": int(view.keys_per_q_block[qb])}
            for qb in range(view.counts.shape[0])]
    if as_json:
        print_json({"describe": spec.describe(), "block": block, "summary": view.summary(), "q_blocks": rows})
        return
    print(spec.describe())
    print(view.summary())
    for row in rows:
        kv = row["kv_blocks"]
        span = f"{kv[0]}..{kv[-1]}" if kv == list(range(kv[0], kv[-1] + 1)) else ",".join(map(str, kv))
        print(f"  q block {row['q_block']}: kv blocks {span} ({len(kv)} blocks, {row['pairs']} pairs)")


def run(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    if args.png:
        from swa_kit.viz.masks import block_view_figure, mask_figure

        if spec.q_len * spec.kv_len <= MAX_PNG_CELLS:
            fig = mask_figure(spec, block=args.block)
        else:
            fig = block_view_figure(spec.block_view(args.block or 128), title=spec.describe())
        fig.savefig(args.png, dpi=120)
        if not args.json:
            print(f"{spec.describe()}\nwrote {args.png}")
        if not (args.json or args.block):
            return 0
    if args.block:
        _print_blocks(spec, args.block, args.json)
        return 0
    cells = spec.q_len * spec.kv_len
    if args.json:
        if cells > MAX_JSON_CELLS:
            raise MaskError(
                f"a {spec.q_len} x {spec.kv_len} mask ({cells} cells) is too big for --json (limit {MAX_JSON_CELLS}); "
                "use --block 128 for the block view or --png FILE for a picture"
            )
        print_json({"mode": spec.mode, "q_len": spec.q_len, "kv_len": spec.kv_len, "window_keys": spec.window.keys,
                    "parents": spec.parents, "chunk": spec.chunk, "q_positions": spec.q_positions().tolist(),
                    "k_positions": spec.k_positions().tolist(), "mask": spec.dense().int().tolist()})
        return 0
    print(spec.describe())
    if spec.kv_len > MAX_TEXT_COLS or spec.q_len > MAX_TEXT_ROWS:
        print(spec.block_view(128).summary())
        print("too big to print: use --block 128 for the block view or --png FILE for a picture")
        return 0
    width = len(str(int(spec.q_positions().max())))
    for pos, row in zip(spec.q_positions().tolist(), spec.dense().tolist()):
        print(f"q {pos:>{width}} " + "".join("#" if cell else "." for cell in row))
    return 0
