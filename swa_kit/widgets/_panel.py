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
from PIL import Image, features

from swa_kit.errors import UsageError


# Lossless WebP, because every redraw pays the encoding: the widgets' frames took 4-8 ms against 6-12 ms for PNG
# at level 1 (measured on 2 busy cores), the same pixels. PNG where Pillow was built without WebP.
FRAME_FORMAT = "webp" if features.check("webp") else "png"


def encode_frame(canvas: FigureCanvasAgg) -> bytes:
    """The canvas's pixels as an image file in :data:`FRAME_FORMAT` (what an Image widget shows), losslessly."""
    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    if FRAME_FORMAT == "webp":
        image.save(buffer, format="webp", lossless=True, quality=0, method=0)  # quality 0: least effort, exact
    else:
        image.save(buffer, format="png", compress_level=1)
    return buffer.getvalue()


def freeze_layout(fig: Figure) -> Figure:
    """Lay ``fig`` out once, then keep those positions: a figure redrawn in place per slider move need not
    run the layout solver again on every render."""
    fig.draw_without_rendering()
    fig.set_layout_engine(None)  # "none" leaves a placeholder engine, and savefig draws twice for any engine
    return fig


class BlitFigure:
    """Frames (encoded images) of a figure in which only ``dynamic()``'s artists change between frames.

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

    def frame(self) -> bytes:
        """The figure as it is now, rendered and encoded by :func:`encode_frame`."""
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
        return encode_frame(self.canvas)


class FigurePanel:
    """A ``<pre>`` text block above ``n_figures`` image slots; :meth:`show` replaces all of them."""

    def __init__(self, n_figures: int = 1) -> None:
        import ipywidgets as widgets

        self.text = widgets.HTML()
        self.images = [widgets.Image(format=FRAME_FORMAT) for _ in range(n_figures)]
        self.box = widgets.VBox([self.text, *self.images])

    def show(self, text: str, *frames: bytes | None) -> None:
        """Show ``text`` and up to ``n_figures`` frames (from :meth:`BlitFigure.frame`); a slot given None (or
        nothing) is hidden."""
        if len(frames) > len(self.images):
            raise UsageError(f"{len(frames)} figures for a panel with {len(self.images)} slots")
        self.text.value = "<pre>" + html.escape(text) + "</pre>"
        for slot, frame in zip(self.images, list(frames) + [None] * (len(self.images) - len(frames))):
            slot.layout.display = None if frame is not None else "none"
            slot.value = b"" if frame is None else frame

    def show_error(self, error: Exception) -> None:
        """Say that a redraw failed, and with what, instead of a picture (the controls keep working)."""
        self.show(f"Could not redraw: {type(error).__name__}: {error}\nMove a control to draw again.")

