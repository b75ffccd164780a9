"""Mask explorer: pick a mode, window and lengths, see the mask and what it means.

:func:`explore` is the whole behaviour (inputs -> figure + summary, never a traceback for a bad
combination); :func:`mask_explorer` only wires ipywidgets controls to it.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from swa_kit.errors import SwaKitError
from swa_kit.masks import MODES, forward_mask
from swa_kit.tables import plural
from swa_kit.viz.masks import MaskPlot, mask_figure
from swa_kit.widgets._coalesce import Coalescer
from swa_kit.widgets._panel import BlitFigure, FigurePanel

SUMMARY_CONVENTIONS = ("sglang", "flash_attn", "aiter_unified", "aiter_v1", "flash_attn_4")


def explore(mode: str, window: int | None, q_len: int, kv_len: int, chunk: int = 4,
            block: int | None = None, plot: MaskPlot | None = None) -> tuple[Figure | None, str]:
    """The explorer's callback: ``(figure, summary)``, or ``(None, message)`` for a bad combination.

    Given ``plot``, the mask is redrawn into it in place (the widget's way: fast); without, a new figure.

    Convenience over strictness, as sliders cannot express "not applicable": prefill uses
    ``kv_len`` queries, decode one query, chunked ignores ``window`` and tree verifies a complete
    binary tree of ``q_len`` draft tokens; each such choice is said in the summary.
    """
    notes: list[str] = []
    if mode == "prefill" and q_len != kv_len:
        q_len, notes = kv_len, notes + [f"prefill: q_len = kv_len = {kv_len}"]
    if mode == "decode" and q_len != 1:
        q_len, notes = 1, notes + ["decode: one query"]
    if mode == "chunked":
        if window is not None:
            notes.append(f"chunked local attention has no sliding window (window {window} ignored)")
        window = None
    try:
        mask = forward_mask(mode, q_len, kv_len, window, chunk=chunk if mode == "chunked" else None)
        fig = plot.draw(mask, block=block) if plot is not None else mask_figure(mask, block=block)
    except (SwaKitError, ValueError) as error:
        return None, f"Cannot draw this combination: {error}"
    dense = mask.dense()
    per_query = dense.sum(dim=1)
    lines = [mask.describe()]
    lines += notes
    lines.append(f"each query attends {int(per_query.min())} to {int(per_query.max())} keys; "
                 f"{int(dense.sum())} of {dense.numel()} (query, key) pairs")
    if mask.window.keys is not None:
        written = ", ".join(f"{name} {mask.window.to(name)!r}" for name in SUMMARY_CONVENTIONS)
        lines.append(f"window {plural(mask.window.keys, 'key')} = {written}")
    return fig, "\n".join(lines)


def mask_explorer(mode: str = "extend", window: int | None = 4, q_len: int = 6, kv_len: int = 16,
                  chunk: int = 4) -> Any:
    """An ipywidgets box: mode, window (or none), lengths and chunk, wired to :func:`explore`."""
    import ipywidgets as widgets

    wide = {"style": {"description_width": "initial"}}  # keep "window (keys)" unclipped
    controls = {
        "mode": widgets.Dropdown(options=list(MODES), value=mode, description="mode"),
        "window": widgets.IntSlider(value=window or 4, min=1, max=64, description="window (keys)", **wide),
        "no_window": widgets.Checkbox(value=window is None, description="no window"),
        "q_len": widgets.IntSlider(value=q_len, min=1, max=64, description="q_len"),
        "kv_len": widgets.IntSlider(value=kv_len, min=1, max=96, description="kv_len"),
        "chunk": widgets.IntSlider(value=chunk, min=1, max=32, description="chunk"),
    }
    panel = FigurePanel()
    plot = MaskPlot(figsize=(7.0, 4.8), layout=None, max_ticks=12)  # one figure, redrawn in place on every move
    # The title repeats the summary's first line, just above the figure, and a long line of text costs a redraw
    # ~5 ms: hidden. At a fixed height, so that no full draw measures the tick labels to place it.
    plot.ax.set_title("", y=1.0).set_visible(False)
    plot.fig.subplots_adjust(top=0.97)  # and the axes take the title's room
    frames = BlitFigure(plot.fig, plot.changing_artists)  # the axes are redrawn only when their labels change

    def redraw(c: dict[str, Any]) -> None:
        fig, text = explore(c["mode"], None if c["no_window"] else c["window"], c["q_len"], c["kv_len"], c["chunk"],
                            plot=plot)
        if fig is not None and plot.axes_changed:
            frames.invalidate()
        panel.show(text, frames.frame() if fig is not None else None)

    def values() -> dict[str, Any]:
        return {name: w.value for name, w in controls.items()}

    latest = Coalescer(redraw, panel.show_error)  # a drag redraws its newest values only
    for w in controls.values():
        w.observe(lambda _: latest.submit(values()), names="value")
    redraw(values())  # the first picture at once, in the cell that builds the explorer
    return widgets.VBox([widgets.HBox([controls["mode"], controls["no_window"]]),
                         widgets.HBox([controls["window"], controls["chunk"]]),
                         widgets.HBox([controls["q_len"], controls["kv_len"]]), panel.box])
