"""Probe pictures: one panel pair per mode, disagreeing cells marked, device and tier named."""

from __future__ import annotations

import pytest

from swa_kit.measure.probe import probe_path, probe_sglang_sites
from swa_kit.viz.probe import draw_probe, draw_probe_table


def test_draw_probe_marks_disagreement_and_names_tier():
    row = probe_path("aiter_emulated_paged_ragged", 3)
    fig = draw_probe(row)
    assert len(fig.axes) == 2 * len(row.masks)
    assert "emulated" in fig._suptitle.get_text() and "cpu" in fig._suptitle.get_text()
    crosses = fig.axes[1].collections[0].get_offsets()
    assert len(crosses) == int(row.masks["decode"].disagree.sum()) > 0


def test_draw_probe_agreeing_row_has_no_crosses():
    fig = draw_probe(probe_path("torch_sdpa", 3))
    assert all(len(ax.collections[0].get_offsets()) == 0 for ax in fig.axes[1::2])


def test_draw_probe_of_a_full_context_row_says_every_key():
    title = draw_probe(probe_path("torch_sdpa", None))._suptitle.get_text()  # once "meant None keys"
    assert "meant every key, attends" in title and "None keys" not in title


def test_draw_probe_table_and_errors():
    rows = probe_sglang_sites(3)
    fig = draw_probe_table(rows, "decode")
    assert len(fig.axes[0].get_yticklabels()) == 2  # decode.unified and decode.paged
    with pytest.raises(ValueError):
        draw_probe_table(rows, "nothing")
    empty = probe_path("aiter_emulated_paged_ragged", 3, modes=("prefill",))
    with pytest.raises(ValueError):
        draw_probe(empty)
