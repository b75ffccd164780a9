"""Pool pictures: their content matches the pools they draw."""

from __future__ import annotations

import random

import numpy as np
import pytest

from swa_kit.errors import ModelConfigError
from swa_kit.engine.resolver import slots_read
from swa_kit.viz.pools import OUT, RIGHT, WRONG, occupancy_images, plot_mapping, plot_pool_occupancy, plot_slots_read
from swa_kit.engine.workers import build_workers, request_ids_past_swa_buffer, run_decode


def test_occupancy_images_follow_the_window():
    prompt, steps = random.randint(4, 8), random.randint(3, 10)
    w = build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=prompt + steps)
    snaps = run_decode(w, prompt, steps)
    full, swa = occupancy_images(snaps)
    assert full.shape == (steps + 1, 41) and swa.shape == (steps + 1, 13)
    assert (full[:, 0] == 1).all() and (swa[:, 0] == 1).all()  # dummy slot 0
    for step in range(steps + 1):
        assert (full[step] == 2).sum() == prompt + step  # the full pool keeps every token
        assert (swa[step] == 2).sum() == min(prompt + step, 4)  # the SWA pool keeps the window
    fig = plot_pool_occupancy(snaps)
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(images) == 2 and np.array_equal(images[0], full) and np.array_equal(images[1], swa)
    lines = {line.get_label(): line.get_ydata() for line in fig.axes[2].lines}
    assert list(lines["swa live"]) == [min(prompt + s, 4) for s in range(steps + 1)]
    assert list(lines["swa freed"]) == [max(prompt + s - 4, 0) for s in range(steps + 1)]


def test_one_pool_occupancy_has_no_swa_panel():
    w = build_workers("windowed_one_pool")
    snaps = run_decode(w, 5, 3)
    fig = plot_pool_occupancy(snaps)
    assert sum(1 for ax in fig.axes if ax.images) == 1
    with pytest.raises(ModelConfigError, match="no SWA pool"):
        plot_mapping(snaps[-1])


def test_mapping_lines():
    n = random.randint(5, 15)
    w = build_workers("hybrid_swa", size=40, size_swa=16)  # the prefill holds all n SWA slots before eviction
    snap = run_decode(w, n, 0)[0]
    fig = plot_mapping(snap)
    lines = fig.axes[0].lines
    assert len(lines) == n
    live = [ln for ln in lines if ln.get_gid() == "live"]
    evicted = [ln for ln in lines if ln.get_gid() == "evicted"]
    assert len(live) == min(n, 4) and len(evicted) == n - min(n, 4)
    for ln, f, s in zip(lines, snap.full_ids[0].tolist(), snap.swa_ids[0].tolist()):
        assert list(ln.get_xdata()) == [f, s]
    assert all(ln.get_xdata()[1] == 0 for ln in evicted)


def _colors(collection):
    return [tuple(c) for c in collection.get_facecolors()]


def test_slots_read_marks_out_of_bounds_and_right_rows():
    from matplotlib.colors import to_rgba

    w, _ = request_ids_past_swa_buffer("FROZEN_KV_MTP")
    fig = plot_slots_read(w, "draft", 0, 1, 10)
    ax = fig.axes[0]
    by_gid = {c.get_gid(): c for c in ax.collections if c.get_gid() in ("legacy", "naive", "fixed")}
    assert len(by_gid) == 3
    for name, collection in by_gid.items():
        read = slots_read(w, "draft", name, 0, 1, 10)
        xs = collection.get_offsets()[:, 0]
        assert list(xs) == read.read_ids[read.attended].tolist()
        expected = [OUT if x >= read.buffer_rows else (RIGHT if x == r else WRONG)
                    for x, r in zip(xs, read.right_ids[read.attended].tolist())]
        assert _colors(collection) == [to_rgba(c) for c in expected]
    assert set(_colors(by_gid["legacy"])) == {to_rgba(OUT)}  # untranslated full ids 21..24 vs 17 rows
    assert set(_colors(by_gid["fixed"])) == {to_rgba(RIGHT)}
    assert [t.get_text() for t in ax.texts] == ["out of bounds", "ok", "ok"]  # legacy, naive, fixed


def test_slots_read_marks_wrong_rows_for_eagle_under_naive():
    fig = plot_slots_read(request_ids_past_swa_buffer("EAGLE")[0], "draft", 0, 1, 10)
    assert [t.get_text() for t in fig.axes[0].texts] == ["ok", "wrong slots", "ok"]  # legacy, naive, fixed


def test_occupancy_and_mapping_redraw_in_place():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from swa_kit.viz.pools import MappingPlot, OccupancyPlot

    prompt, steps = random.randint(4, 8), random.randint(4, 10)
    snaps = run_decode(build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=prompt + steps),
                       prompt, steps)
    plot = OccupancyPlot(snaps)
    canvas = FigureCanvasAgg(plot.fig)
    shown = []
    for step in (steps, 1):
        assert plot.show(step) is plot.fig
        for im, full in zip(plot.images, occupancy_images(snaps)):
            data = im.get_array()
            assert np.array_equal(np.ma.getmaskarray(data).all(axis=1), np.arange(steps + 1) > step)
            assert np.array_equal(data[: step + 1], full[: step + 1])
        live = {line.get_label(): list(line.get_ydata()) for line in plot.fig.axes[2].lines}
        assert live["swa live"] == [min(prompt + s, 4) for s in range(step + 1)]
        canvas.draw()
        shown.append(np.asarray(canvas.buffer_rgba()).copy())
    assert not np.array_equal(*shown)  # step 1 blanks the later rows

    mapping = MappingPlot(41)
    for snap in (snaps[-1], snaps[0]):
        ax = mapping.show(snap).axes[0]
        n = len(snap.full_ids[0])
        assert len(ax.lines) == n  # old links removed, not accumulated
        assert [list(ln.get_xdata()) for ln in ax.lines] == [[f, s] for f, s in
                                                             zip(snap.full_ids[0].tolist(), snap.swa_ids[0].tolist())]
        full, swa = (c for c in ax.collections)
        assert full.get_offsets()[:, 0].tolist() == snap.full_ids[0].tolist()
        assert swa.get_offsets()[:, 0].tolist() == snap.swa_ids[0].tolist()
        assert f"step {snap.step}:" in ax.get_title()
