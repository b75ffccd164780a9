"""The mask explorer's callback over its whole range, and the widget wiring."""

from __future__ import annotations

import html
import io
import itertools

import numpy as np
import pytest

from swa_kit.masks import MODES, mask_for
from swa_kit.tables import plural
from swa_kit.widgets.masks import explore, mask_explorer

def _decodes_as_frame(image) -> bool:
    """The Image widget holds a whole image file in the format it declares (the panel's frame format)."""
    from PIL import Image

    from swa_kit.widgets._panel import FRAME_FORMAT

    data = bytes(image.value)
    return image.format == FRAME_FORMAT and Image.open(io.BytesIO(data)).format.lower() == FRAME_FORMAT


WINDOWS = [None, 1, 3, 64]
LENGTHS = [(1, 1), (1, 20), (5, 20), (20, 20), (30, 7)]


def _expected(mode, window, q_len, kv_len, chunk):
    """What the explorer promises to draw, or None when the combination is invalid."""
    if mode == "prefill":
        q_len = kv_len
    if mode == "decode":
        q_len = 1
    if mode == "chunked":
        window = None
    if q_len > kv_len:
        return None
    return mask_for(mode, q_len, kv_len, window, chunk=chunk if mode == "chunked" else None)


@pytest.mark.parametrize("mode", MODES)
def test_explore_over_its_range(mode):
    for window, (q_len, kv_len), chunk in itertools.product(WINDOWS, LENGTHS, [1, 4]):
        fig, text = explore(mode, window, q_len, kv_len, chunk)
        want = _expected(mode, window, q_len, kv_len, chunk)
        if want is None:
            assert fig is None and text.startswith("Cannot draw this combination") and f"q_len {q_len}" in text
            continue
        image = np.asarray(fig.axes[0].images[0].get_array())
        assert np.array_equal(image, want.int().numpy())
        queries = "1 query" if want.shape[0] == 1 else f"{want.shape[0]} queries"
        assert text.splitlines()[0].startswith(f"{mode}: {queries} x {plural(kv_len, 'key')}")
        per_query = want.sum(dim=1)
        assert f"attends {int(per_query.min())} to {int(per_query.max())} keys" in text
        if window is not None and mode != "chunked":
            assert f"sglang {window - 1}" in text and f"flash_attn ({window - 1}, 0)" in text
            assert f"aiter_v1 {window}" in text
        if mode == "chunked" and window is not None:
            assert "no sliding window" in text


@pytest.mark.parametrize("args, needle", [
    (("extend", 0, 3, 5), "invalid window value 0"),
    (("extend", -4, 3, 5), "-4"),
    (("verify", 2, 6, 5), "q_len 6 > kv_len 5"),
    (("tree", 2, 0, 5), "q_len must be >= 1, got 0"),
    (("chunked", None, 2, 5, 0), "chunk must be >= 1, got 0"),
    (("sideways", 2, 2, 5), "'sideways'"),
    (("extend", 2.5, 2, 5), "2.5"),
])
def test_bad_combinations_give_a_message_not_a_traceback(args, needle):
    fig, text = explore(*args)
    assert fig is None and needle in text and "Traceback" not in text


def test_prefill_and_decode_notes():
    assert "prefill: q_len = kv_len = 9" in explore("prefill", 3, 4, 9)[1]
    assert "decode: one query" in explore("decode", 3, 4, 9)[1]
    assert "q_len = kv_len" not in explore("prefill", 3, 9, 9)[1]


def test_widget_wires_controls_to_explore():
    pytest.importorskip("ipywidgets")
    box = mask_explorer(mode="extend", window=4, q_len=6, kv_len=16)
    summary, figure = box.children[3].children

    def shown() -> str:
        return html.unescape(summary.value)

    assert explore("extend", 4, 6, 16)[1] in shown()
    first = bytes(figure.value)
    assert _decodes_as_frame(figure) and figure.layout.display is None
    mode, no_window = box.children[0].children
    no_window.value = True
    assert explore("extend", None, 6, 16)[1] in shown()
    assert _decodes_as_frame(figure) and bytes(figure.value) != first
    q_len, _kv_len = box.children[2].children
    q_len.value = 40  # > kv_len: the friendly message, no exception out of the observer
    assert "Cannot draw this combination" in shown()
    assert figure.layout.display == "none"
    mode.value = "decode"
    assert shown().startswith("<pre>decode: 1 query x 16 keys")


def test_explore_redraws_into_the_widgets_plot():
    from swa_kit.viz.masks import MaskPlot

    plot = MaskPlot(layout=None)
    fig, _ = explore("extend", 4, 6, 16, plot=plot)
    before = np.asarray(plot.image.get_array()).copy()
    again, text = explore("extend", 5, 6, 16, plot=plot)
    assert again is fig and "attends 5 to 5 keys" in text
    after = np.asarray(plot.image.get_array())
    assert np.array_equal(after, mask_for("extend", 6, 16, 5).int().numpy()) and not np.array_equal(before, after)
    assert explore("extend", 5, 20, 16, plot=plot)[0] is None  # a bad combination leaves the figure alone
    assert np.array_equal(np.asarray(plot.image.get_array()), after)


def test_blitted_mask_frames_match_a_full_render():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    from swa_kit.viz.masks import MaskPlot
    from swa_kit.widgets._panel import BlitFigure

    plot = MaskPlot(layout=None, max_ticks=12)
    frames = BlitFigure(plot.fig, plot.changing_artists)
    shown = []
    for window, kv_len in ((4, 30), (9, 30), (9, 40)):  # a data-only change, then an axes change
        explore("extend", window, 12, kv_len, plot=plot)
        assert plot.axes_changed == (window == 4 or kv_len == 40)
        if plot.axes_changed:
            frames.invalidate()
        frame = np.asarray(Image.open(io.BytesIO(frames.frame())).convert("RGBA")).astype(int)
        for artist in plot.changing_artists():
            artist.set_animated(False)
        canvas = FigureCanvasAgg(plot.fig)
        canvas.draw()
        assert np.abs(frame - np.asarray(canvas.buffer_rgba()).astype(int)).max() <= 2, (window, kv_len)
        frames.canvas = FigureCanvasAgg(plot.fig)
        frames.invalidate()  # the ordinary draw above replaced the blitting canvas's background
        shown.append(frame)
    assert not np.array_equal(shown[0], shown[1])


@pytest.mark.parametrize("fmt", ["webp", "png"])
def test_frames_are_encoded_losslessly(monkeypatch, fmt):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    import swa_kit.widgets._panel as panel

    if fmt == "webp" and panel.FRAME_FORMAT != "webp":
        pytest.skip("this Pillow was built without WebP")
    monkeypatch.setattr(panel, "FRAME_FORMAT", fmt)
    fig, _ = explore("extend", 5, 12, 30)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    decoded = Image.open(io.BytesIO(panel.encode_frame(canvas)))
    assert decoded.format.lower() == fmt
    assert np.array_equal(np.asarray(decoded.convert("RGBA")), np.asarray(canvas.buffer_rgba()))
