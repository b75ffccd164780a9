"""The decode-stepping widget's callback over its whole range."""

from __future__ import annotations

import html
import io

import pytest

from swa_kit.errors import ModelConfigError
from swa_kit.widgets.pools import decode_step_state, decode_stepper


def _decodes_as_frame(image) -> bool:
    """The Image widget holds a whole image file in the format it declares (the panel's frame format)."""
    from PIL import Image

    from swa_kit.widgets._panel import FRAME_FORMAT

    data = bytes(image.value)
    return image.format == FRAME_FORMAT and Image.open(io.BytesIO(data)).format.lower() == FRAME_FORMAT


@pytest.mark.parametrize("model", ["hybrid_swa", "windowed_one_pool", "no_window"])
def test_every_step(model):
    prompt, steps = 6, 12
    previous = None
    for step in range(steps + 1):
        state = decode_step_state(step, prompt, steps, model)
        assert state["seq_len"] == prompt + step and len(state["history"]) == step + 1
        counts = state["counts"]
        assert counts["full_live"] == prompt + step
        if model == "hybrid_swa":
            assert counts["swa_live"] == min(prompt + step, 4)
            assert counts["swa_freed"] == max(prompt + step - 4, 0)
            assert "window 4 keys" in state["text"]
        else:
            assert counts["swa_live"] == counts["swa_freed"] == 0 and "one pool" in state["text"]
        if previous is not None:  # a step only appends one token: earlier full slots never move
            old = previous["snapshot"].full_ids[0]
            assert state["snapshot"].full_ids[0][: len(old)].tolist() == old.tolist()
        previous = state


@pytest.mark.parametrize("step", [-1, 13, 2.0, True, None])
def test_out_of_range(step):
    with pytest.raises(ModelConfigError, match="outside 0..12"):
        decode_step_state(step, 6, 12)


def test_widget_builds_and_redraws():
    box = decode_stepper(4, 3)
    slider, panel = box.children
    text, occupancy, mapping = panel.children
    assert (slider.min, slider.max, slider.value) == (0, 3, 0)
    assert html.unescape(text.value) == f"<pre>{decode_step_state(0, 4, 3)['text']}</pre>"
    first = bytes(occupancy.value)
    assert _decodes_as_frame(occupancy) and _decodes_as_frame(mapping)
    slider.value = 3  # fires the callback
    assert html.unescape(text.value) == f"<pre>{decode_step_state(3, 4, 3)['text']}</pre>"
    assert _decodes_as_frame(occupancy) and bytes(occupancy.value) != first


def test_blit_frames_match_a_full_render():
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    from swa_kit.viz.pools import OccupancyPlot
    from swa_kit.widgets._panel import BlitFigure, freeze_layout

    run = decode_step_state(12)
    plot = OccupancyPlot(run["history"])
    frames = BlitFigure(freeze_layout(plot.fig), plot.changing_artists)

    def pixels(frame: bytes) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(frame)).convert("RGBA")).astype(int)

    shown = {}
    for step in (12, 3, 7):
        plot.show(step)
        shown[step] = pixels(frames.frame())
        for artist in plot.changing_artists():
            artist.set_animated(False)
        canvas = FigureCanvasAgg(plot.fig)  # the same state drawn the ordinary way, every artist at once
        canvas.draw()
        full = np.asarray(canvas.buffer_rgba()).astype(int)
        assert shown[step].shape == full.shape and np.abs(shown[step] - full).max() <= 2, step
        frames.canvas = FigureCanvasAgg(plot.fig)  # back to the blitting canvas and its background
        frames.canvas.restore_region(frames._background)
    assert not np.array_equal(shown[3], shown[7])


def test_a_step_shown_again_shows_the_pictures_it_showed_first():
    box = decode_stepper(4, 6)
    slider, panel = box.children
    text, occupancy, mapping = panel.children
    first = {}
    for step in (5, 2, 6, 5, 0, 2):
        slider.value = step
        shown = (html.unescape(text.value), bytes(occupancy.value), bytes(mapping.value))
        assert shown[0] == f"<pre>{decode_step_state(step, 4, 6)['text']}</pre>"
        assert first.setdefault(step, shown) == shown, step
    fresh = decode_stepper(4, 6)  # never showed step 2 before: draws it from scratch
    fresh.children[0].value = 2
    assert (bytes(fresh.children[1].children[1].value), bytes(fresh.children[1].children[2].value)) == first[2][1:]
    assert len({pictures[1] for pictures in first.values()}) == len(first)  # each step its own picture
