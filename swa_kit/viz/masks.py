"""Pictures of attention masks: a labelled heatmap, the off-by-one trap across APIs, the block view.

Colours: attended cells blue, the rest white. Every figure is a :class:`matplotlib.figure.Figure`
whose first image holds the mask (or tile states) exactly, so tests can read the picture's data.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from swa_kit.masks import BlockView, ForwardMask, forward_mask
from swa_kit.window import Window, from_keys, naive_reads

MASK_CMAP = ListedColormap(["#ffffff", "#2b8cbe"])
TILE_CMAP = ListedColormap(["#ffffff", "#fdae61", "#2b8cbe"])  # skipped, partial, full
TILE_NAMES = ["not read", "partial (masked)", "full"]
EDGE, MORE, LESS, GRID = "#d7301f", "#d7301f", "#7b3294", "#969696"


def _ticks(ax, positions: np.ndarray, axis: str, max_ticks: int = 24) -> None:
    step = max(1, -(-len(positions) // max_ticks))
    idx = np.arange(0, len(positions), step)
    labels = [str(int(p)) for p in positions[idx]]
    if axis == "x":
        ax.set_xticks(idx, labels, rotation=90 if len(positions) > 12 else 0, fontsize=7)
    else:
        ax.set_yticks(idx, labels, fontsize=7)


def _draw_mask(ax, image: np.ndarray, q_pos: np.ndarray, k_pos: np.ndarray) -> None:
    ax.imshow(image.astype(np.int64), cmap=MASK_CMAP, vmin=0, vmax=1, interpolation="nearest", aspect="auto")
    _label_mask_axes(ax, q_pos, k_pos)


def _label_mask_axes(ax, q_pos: np.ndarray, k_pos: np.ndarray, max_ticks: int = 24) -> None:
    _ticks(ax, k_pos, "x", max_ticks)
    _ticks(ax, q_pos, "y", max_ticks)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")


class MaskPlot:
    """One mask heatmap that redraws in place: :meth:`draw` swaps the image's data and the decorations.

    The explorer keeps one of these and redraws it per slider move: building a new figure (and laying it
    out) took most of the ~250 ms a move cost; updating the image and a few lines does not.
    ``layout=None`` keeps fixed margins, so a redraw never runs a layout solver; tick labels are most of
    what a render costs, so ``max_ticks`` bounds them per axis.
    """

    def __init__(self, figsize: tuple[float, float] = (8.0, 5.5),
                 layout: Literal["constrained", "compressed", "tight"] | None = "constrained",
                 max_ticks: int = 24) -> None:
        self.max_ticks = max_ticks
        self.fig = Figure(figsize=figsize, layout=layout)
        if layout is None:
            self.fig.subplots_adjust(left=0.08, right=0.98, bottom=0.11, top=0.93)
        self.ax = self.fig.add_subplot()
        self.image = self.ax.imshow(np.zeros((1, 1), dtype=np.int64), cmap=MASK_CMAP, vmin=0, vmax=1,
                                    interpolation="nearest", aspect="auto")
        self._decorations: list = []  # window edge, chunk / block / prefix lines, legend: redrawn each time
        self._axes_key: tuple | None = None
        self.axes_changed = True  # whether the last draw changed limits or tick labels (not only the data)

    def changing_artists(self) -> list:
        """What a draw with unchanged axes changes, in drawing order (the frame goes back on top)."""
        return [self.image, *self.ax.spines.values(), *self._decorations, self.ax.title]

    def draw(self, spec: ForwardMask, block: int | None = None, title: str | None = None) -> Figure:
        """Show ``spec``'s mask labelled with positions, its window edge (or chunk edges) and blocks."""
        ax = self.ax
        for artist in self._decorations:
            artist.remove()
        self._decorations = []
        self.image.set_data(spec.dense().numpy().astype(np.int64))
        self.image.set_extent((-0.5, spec.kv_len - 0.5, spec.q_len - 0.5, -0.5))
        ax.set_xlim(-0.5, spec.kv_len - 0.5)
        ax.set_ylim(spec.q_len - 0.5, -0.5)
        q_pos, k_pos = spec.q_positions().numpy(), spec.k_positions().numpy()
        key = (tuple(q_pos.tolist()), tuple(k_pos.tolist()))
        self.axes_changed, self._axes_key = key != self._axes_key, key
        _label_mask_axes(ax, q_pos, k_pos, self.max_ticks)
        if spec.window.keys is not None:
            # the oldest key in the window is at position first_key(q); committed keys sit at their
            # position, draft columns of a tree do not, so there the edge stops at the prefix's end
            cols = np.array([spec.window.first_key(int(q)) for q in q_pos])
            if spec.mode == "tree":
                cols = np.minimum(cols, spec.prefix_len)
            rows = np.arange(len(q_pos))
            xs = np.repeat(cols - 0.5, 2)
            ys = np.column_stack([rows - 0.5, rows + 0.5]).ravel()
            self._decorations += ax.plot(xs, ys, color=EDGE, lw=2, label=f"window edge ({spec.window.keys} keys)",
                                         gid="window-edge")
        if spec.chunk is not None:  # mode "chunked", the only one with a chunk
            self._decorations += [ax.axvline(edge - 0.5, color=EDGE, lw=1.5, gid="chunk-edge")
                                  for edge in range(spec.chunk, spec.kv_len, spec.chunk)]
        if block:
            self._decorations += [ax.axvline(x - 0.5, color=GRID, lw=0.8, ls="--", gid="block")
                                  for x in range(block, spec.kv_len, block)]
            self._decorations += [ax.axhline(y - 0.5, color=GRID, lw=0.8, ls="--", gid="block")
                                  for y in range(block, spec.q_len, block)]
        if spec.mode == "tree":
            self._decorations.append(ax.axvline(spec.prefix_len - 0.5, color="black", lw=1, gid="prefix-end"))
        ax.set_title(title or spec.describe(), fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            self._decorations.append(ax.legend(loc="lower left", fontsize=7, framealpha=0.9))
        return self.fig


def mask_figure(mask: ForwardMask, block: int | None = None, title: str | None = None) -> Figure:
    """Heatmap of ``mask``'s mask labelled with positions, its window edge (or chunk edges) and blocks.

    The window edge is a red step along each row's oldest attended key; ``block`` draws tile
    boundaries every ``block`` rows and columns (FlexAttention tiles). A figure sized to the mask;
    :class:`MaskPlot` draws the same into one figure again and again.
    """
    size = (min(12, 2 + 0.25 * mask.kv_len), min(9, 1.8 + 0.25 * mask.q_len))
    return MaskPlot(size).draw(mask, block, title)


def _shown_columns(kv_len: int, windows: list[Window], q_pos: np.ndarray, pad: int, max_cols: int) -> np.ndarray:
    """All columns when few; else those around each window edge and the diagonal (gaps marked)."""
    if kv_len <= max_cols:
        return np.arange(kv_len)
    keep: set[int] = set(range(int(q_pos[0]) - pad, kv_len))
    for w in windows:
        for q in (int(q_pos[0]), int(q_pos[-1])):
            edge = w.first_key(q)
            keep |= set(range(edge - pad, edge + pad + 1))
    return np.array(sorted(c for c in keep if 0 <= c < kv_len))


def conventions_figure(keys: int, held_in: str = "hf", q_len: int = 4, pad: int = 3) -> Figure:
    """The same window under each API's convention, side by side, marking the naive read's error.

    Each panel shows the mask meant (``keys`` keys, the last ``q_len`` queries of a context a little
    longer than the window) and marks with ``+`` the keys the API would attend *in addition* when
    given the number held in ``held_in`` unconverted, with ``x`` the keys it would *miss*. Wide
    windows show only the columns near the window edge and the diagonal; dashed lines mark the gaps.
    """
    reads = naive_reads(keys, held_in)
    meant = Window(keys)
    mask = forward_mask("extend", q_len, keys + q_len + pad, meant)
    q_pos, k_pos = mask.q_positions().numpy(), mask.k_positions().numpy()
    naive_windows = [Window(r.keys) for r in reads if r.error is None]
    cols = _shown_columns(mask.kv_len, [meant, *naive_windows], q_pos, pad, max_cols=48)
    want = mask.dense().numpy()[:, cols]
    rows = -(-len(reads) // 4)  # four panels a row, as many rows as the conventions need
    fig = Figure(figsize=(18, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, 4).ravel()
    for ax in axes[len(reads):]:
        fig.delaxes(ax)
    for ax, read in zip(axes, reads):
        _draw_mask(ax, want, q_pos, k_pos[cols])
        for gap in np.flatnonzero(np.diff(cols) > 1):
            ax.axvline(gap + 0.5, color="black", lw=1, ls=":", gid="gap")
        if read.error is None:
            got = Window(read.keys).attends(q_pos[:, None], k_pos[cols][None, :])
            for cells, marker, color, label, gid in (
                (got & ~want, "P", MORE, "attended in addition", "more"),
                (want & ~got, "X", LESS, "missed", "less"),
            ):
                ys, xs = np.nonzero(cells)
                if len(xs):
                    ax.scatter(xs, ys, marker=marker, color=color, s=40, label=label, gid=gid, zorder=3)
            if read.keys is None:
                verdict = "window OFF: attends everything"
            elif read.keys == keys:
                verdict = f"{keys} keys: right"
            else:
                verdict = f"{read.keys} keys: {read.keys - keys:+d}"
        else:
            verdict = "rejected: invalid value"
        ax.set_title(f"{read.convention}: wants {read.wanted!r}\ngiven {read.passed!r} -> {verdict}", fontsize=9,
                     color="black" if read.keys == keys else EDGE)
        ax.set_xlabel("key position (columns near the window edge)" if len(cols) < mask.kv_len else "key position",
                      fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower left", fontsize=7, framealpha=0.9)
    held = from_keys(held_in, keys)
    fig.suptitle(f"W = {keys} keys meant; you hold {held!r} ({held_in}) and pass it to every API unconverted")
    return fig


def block_view_figure(view: BlockView, title: str | None = None, zoom: int = 24) -> Figure:
    """Tile map of a :class:`BlockView` (not read / partial / full), its top-left ``zoom`` x ``zoom``
    tiles enlarged (a thin band is invisible at 1024 x 1024), and attended pairs per query block."""
    state = np.where(view.full, 2, np.where(view.needed, 1, 0))
    fig = Figure(figsize=(15, 5), layout="constrained")
    overview, close, keys = fig.subplots(1, 3)
    for ax, image, name in ((overview, state, "all tiles"), (close, state[:zoom, :zoom], f"first {zoom} x {zoom}")):
        ax.imshow(image, cmap=TILE_CMAP, vmin=0, vmax=2, interpolation="nearest", aspect="auto")
        ax.set_xlabel(f"KV block ({view.block_kv} keys)")
        ax.set_ylabel(f"query block ({view.block_q} queries)")
        ax.set_title(name, fontsize=9)
    close.legend(handles=[Patch(color=TILE_CMAP(i), label=n, ec="grey") for i, n in enumerate(TILE_NAMES)],
                 loc="upper right", fontsize=7)
    keys.plot(np.arange(len(view.keys_per_q_block)), view.keys_per_q_block, color="#2b8cbe")
    keys.set_xlabel("query block")
    keys.set_ylabel("attended (query, key) pairs")
    keys.set_title(f"{int(view.needed.sum()):,} of {view.counts.size:,} tiles read; {view.total_pairs:,} pairs",
                   fontsize=9)
    fig.suptitle(title or f"{view.q_len} x {view.kv_len} mask in {view.block_q} x {view.block_kv} tiles")
    return fig
