"""Mask pictures: the data drawn is the mask, the marks sit where a naive read goes wrong."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from swa_kit.masks import forward_mask
from swa_kit.viz.masks import block_view_figure, conventions_figure, mask_figure
from swa_kit.window import CONVENTIONS, naive_reads


def _render(fig: Figure) -> None:
    fig.canvas.draw()  # Agg: layout and text must survive a real draw


def _by_gid(ax, gid):
    return [a for a in ax.get_children() if getattr(a, "get_gid", lambda: None)() == gid]


@pytest.mark.parametrize("kwargs", [
    {"mode": "prefill", "q_len": 12, "kv_len": 12, "window": 3},
    {"mode": "extend", "q_len": 5, "kv_len": 17, "window": 6},
    {"mode": "decode", "q_len": 1, "kv_len": 9, "window": None},
    {"mode": "tree", "q_len": 7, "kv_len": 15, "window": 4},
    {"mode": "chunked", "q_len": 9, "kv_len": 20, "window": None, "chunk": 4},
])
def test_mask_figure_image_is_the_mask(kwargs):
    spec = forward_mask(**kwargs)
    fig = mask_figure(spec, block=4)
    _render(fig)
    ax = fig.axes[0]
    assert np.array_equal(np.asarray(ax.images[0].get_array()), spec.dense().numpy().astype(int))
    assert ax.get_title() == spec.describe()
    # labels are positions, not indices (they differ after a prefix and in a tree)
    labels = [int(t.get_text()) for t in ax.get_yticklabels()]
    assert labels == spec.q_positions().numpy()[[int(t) for t in ax.get_yticks()]].tolist()
    blocks = _by_gid(ax, "block")
    assert len(blocks) == len(range(4, spec.kv_len, 4)) + len(range(4, spec.q_len, 4))


def test_window_edge_steps_along_the_oldest_key():
    spec = forward_mask("extend", 4, 10, 3)  # queries 6..9 see keys 4..6, 5..7, 6..8, 7..9
    (edge,) = _by_gid(mask_figure(spec).axes[0], "window-edge")
    xs = edge.get_xdata()
    assert list(xs[::2]) == [3.5, 4.5, 5.5, 6.5]
    assert "3 keys" in edge.get_label()


def test_no_window_draws_no_edge_and_chunked_draws_chunk_edges():
    assert not _by_gid(mask_figure(forward_mask("prefill", 6, 6, None)).axes[0], "window-edge")
    ax = mask_figure(forward_mask("chunked", 10, 10, None, chunk=4)).axes[0]
    assert [line.get_xdata()[0] for line in _by_gid(ax, "chunk-edge")] == [3.5, 7.5]


@pytest.mark.parametrize("keys, held_in", [(1024, "hf"), (6, "hf"), (6, "sglang"), (1, "sglang"), (128, "flash_attn")])
def test_conventions_figure_marks_the_off_by_one_cells(keys, held_in):
    fig = conventions_figure(keys, held_in, q_len=4)
    _render(fig)
    reads = naive_reads(keys, held_in)
    assert len(fig.axes) == len(CONVENTIONS)
    for ax, read in zip(fig.axes, reads):
        title = ax.get_title()
        assert title.startswith(f"{read.convention}: wants {read.wanted!r}")
        image = np.asarray(ax.images[0].get_array())
        if not _by_gid(ax, "gap"):  # every column shown: each row attends exactly `keys` keys
            assert image.sum(axis=1).tolist() == [keys] * 4
        for row in image:  # attended keys form one run ending at the query itself
            ones = np.flatnonzero(row)
            assert ones[-1] - ones[0] + 1 == len(ones)
        more, less = _by_gid(ax, "more"), _by_gid(ax, "less")
        if read.error:
            assert "rejected" in title and not more and not less
        elif read.keys is None:
            assert "OFF" in title and more
        elif read.delta == 0:
            assert "right" in title and not more and not less
        elif read.delta == 1:
            assert "+1" in title and not less
            # one extra key per query, just outside the window edge
            cells = more[0].get_offsets()
            assert len(cells) == 4
            for x, y in cells:
                assert image[int(y), int(x)] == 0 and image[int(y), int(x) + 1] == 1
        else:
            assert read.delta == -1 and "-1" in title and not more
            cells = less[0].get_offsets()
            assert len(cells) == 4
            for x, y in cells:
                assert image[int(y), int(x)] == 1 and (int(x) == 0 or image[int(y), int(x) - 1] == 0)


def test_wide_windows_show_gaps_with_real_positions():
    fig = conventions_figure(1024, "hf")
    ax = fig.axes[0]
    assert _by_gid(ax, "gap")
    labels = [int(t.get_text()) for t in ax.get_xticklabels()]
    assert labels == sorted(labels) and labels[-1] >= 1024


def test_block_view_figure_shows_tile_states():
    view = forward_mask("prefill", 4096, 4096, 300).block_view(128)
    fig = block_view_figure(view)
    _render(fig)
    image = np.asarray(fig.axes[0].images[0].get_array())
    assert np.array_equal(image == 2, view.full)
    assert np.array_equal(image == 1, view.partial)
    assert np.array_equal(image == 0, ~view.needed)
    zoomed = np.asarray(fig.axes[1].images[0].get_array())
    assert np.array_equal(zoomed, image[:24, :24])
    (line,) = fig.axes[2].get_lines()
    assert np.array_equal(line.get_ydata(), view.keys_per_q_block)
    assert f"{int(view.needed.sum()):,} of" in fig.axes[2].get_title()


def test_mask_plot_redraws_in_place():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from swa_kit.viz.masks import MaskPlot

    plot = MaskPlot(layout=None, max_ticks=12)
    first = forward_mask("extend", 6, 20, 3)
    fig = plot.draw(first, block=4)
    canvas, image = FigureCanvasAgg(fig), plot.image
    canvas.draw()
    pixels_first = np.asarray(canvas.buffer_rgba()).copy()
    second = forward_mask("chunked", 9, 30, None, chunk=5)
    assert plot.draw(second, block=4) is fig and plot.image is image  # same figure, same image artist
    canvas.draw()
    pixels_second = np.asarray(canvas.buffer_rgba())
    assert np.array_equal(np.asarray(image.get_array()), second.dense().numpy().astype(int))
    ax = fig.axes[0]
    assert not _by_gid(ax, "window-edge")  # the old edge went away with the old mask
    assert [line.get_xdata()[0] for line in _by_gid(ax, "chunk-edge")] == [4.5, 9.5, 14.5, 19.5, 24.5]
    assert len(_by_gid(ax, "block")) == len(range(4, 30, 4)) + len(range(4, 9, 4))  # not accumulated
    assert ax.get_xlim() == (-0.5, 29.5) and ax.get_ylim() == (8.5, -0.5)
    assert ax.get_title() == second.describe()
    assert not np.array_equal(pixels_first, pixels_second)
    plot.draw(first)
    (edge,) = _by_gid(ax, "window-edge")
    assert list(edge.get_xdata()[::2]) == [first.window.first_key(int(q)) - 0.5 for q in first.q_positions()]
