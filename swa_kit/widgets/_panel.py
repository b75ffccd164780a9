"""What every explorer shows: a text block and figures, as plain Image and HTML widgets.

Why not an ``Output`` widget with ``display(fig)`` inside: executed headless (the tour, the
notebook tests), a cell that fills an ``Output`` widget stalled until the cell timeout in about
one run in ten when several kernels shared two busy cores (nbclient's open issue #312). Image
and HTML widgets carry their content as widget state, so there is nothing to capture or stall.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable

from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from swa_kit.errors import UsageError


def figure_png(fig: Figure) -> bytes:
    """The figure rendered to PNG bytes (what an Image widget shows), as drawn: one render pass.

    No ``bbox_inches="tight"`` (it renders twice to find the box) and light compression: a slider move
    pays for this on every redraw, and the figures already fit their canvas (constrained layout or fixed
    margins).
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


def freeze_layout(fig: Figure) -> Figure:
    """Lay ``fig`` out once, then keep those positions: a figure redrawn in place per slider move need not
    run the layout solver again on every render."""
    fig.draw_without_rendering()
    fig.set_layout_engine(None)  # "none" leaves a placeholder engine, and savefig draws twice for any engine
    return fig


class BlitFigure:
    """PNG frames of a figure in which only ``dynamic()``'s artists change between frames.

    Everything else (axes, ticks, labels, legends: most of a render's cost is laying out and drawing
    text) is drawn once into a background; each frame restores it and draws only the changing artists
    on top. ``dynamic`` is called per frame, so artists created since the last frame are included.
    """

    def __init__(self, fig: Figure, dynamic: Callable[[], list[Artist]]) -> None:
        self.fig, self.dynamic = fig, dynamic
        self.canvas = FigureCanvasAgg(fig)
        self._background = None

    def invalidate(self) -> None:
        """Redraw the background at the next frame (call it when anything outside ``dynamic()`` changed)."""
        self._background = None

    def png(self) -> bytes:
        """The figure as it is now, rendered to PNG bytes."""
        artists = self.dynamic()
        for artist in artists:
            artist.set_animated(True)  # kept out of the background
        if self._background is None:
            self.canvas.draw()
            self._background = self.canvas.copy_from_bbox(self.fig.bbox)
        else:
            self.canvas.restore_region(self._background)
        for artist in sorted(artists, key=lambda a: a.get_zorder()):  # stable: as an Axes orders its children
            self.fig.draw_artist(artist)
        width, height = self.canvas.get_width_height()
        buffer = io.BytesIO()
        Image.frombuffer("RGBA", (width, height), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
            buffer, format="png", compress_level=1)
        return buffer.getvalue()


class FigurePanel:
    """A ``<pre>`` text block above ``n_figures`` image slots; :meth:`show` replaces all of them."""

    def __init__(self, n_figures: int = 1) -> None:
        import ipywidgets as widgets

        self.text = widgets.HTML()
        self.images = [widgets.Image(format="png") for _ in range(n_figures)]
        self.box = widgets.VBox([self.text, *self.images])

    def show(self, text: str, *figures: Figure | bytes | None) -> None:
        """Show ``text`` and up to ``n_figures`` figures (or PNG bytes, e.g. from :class:`BlitFigure`); a slot
        given None (or nothing) is hidden."""
        if len(figures) > len(self.images):
            raise UsageError(f"{len(figures)} figures for a panel with {len(self.images)} slots")
        self.text.value = "<pre>" + html.escape(text) + "</pre>"
        for slot, fig in zip(self.images, list(figures) + [None] * (len(self.images) - len(figures))):
            slot.layout.display = None if fig is not None else "none"
            slot.value = b"" if fig is None else fig if isinstance(fig, bytes) else figure_png(fig)

