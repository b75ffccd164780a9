"""The decode-stepping widget's callback over its whole range."""

from __future__ import annotations

import html

import pytest

from swa_kit.errors import ModelConfigError
from swa_kit.widgets.pools import decode_step_state, decode_stepper


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
    assert first.startswith(b"\x89PNG") and bytes(mapping.value).startswith(b"\x89PNG")
    slider.value = 3  # fires the callback
    assert html.unescape(text.value) == f"<pre>{decode_step_state(3, 4, 3)['text']}</pre>"
    assert bytes(occupancy.value).startswith(b"\x89PNG") and bytes(occupancy.value) != first


def test_blit_frames_match_a_full_render():
    import io

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    from swa_kit.viz.pools import OccupancyPlot
    from swa_kit.widgets._panel import BlitFigure, freeze_layout

    run = decode_step_state(12)
    plot = OccupancyPlot(run["history"])
    frames = BlitFigure(freeze_layout(plot.fig), plot.changing_artists)

    def pixels(png: bytes) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).astype(int)

    shown = {}
    for step in (12, 3, 7):
        plot.show(step)
        shown[step] = pixels(frames.png())
        for artist in plot.changing_artists():
            artist.set_animated(False)
        canvas = FigureCanvasAgg(plot.fig)  # the same state drawn the ordinary way, every artist at once
        canvas.draw()
        full = np.asarray(canvas.buffer_rgba()).astype(int)
        assert shown[step].shape == full.shape and np.abs(shown[step] - full).max() <= 2, step
        frames.canvas = FigureCanvasAgg(plot.fig)  # back to the blitting canvas and its background
        frames.canvas.restore_region(frames._background)
    assert not np.array_equal(shown[3], shown[7])
