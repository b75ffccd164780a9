"""Measured attention masks beside the intended ones, disagreeing cells marked.

Each panel is one forward step of a :class:`~swa_kit.measure.probe.ProbeRow`: the left image is
the mask the layer meant, the right one the weights the kernel really applied (white = not
attended), and every cell where they disagree is crossed out in red. The title names the
path, its tier and the device, so an emulation or the CPU interpreter is never mistaken for
the GPU kernel.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from swa_kit.errors import UsageError
from swa_kit.measure.probe import ProbeRow
from swa_kit.tables import plural


def draw_probe(row: ProbeRow, *, cell: float = 0.28) -> Figure:
    """A figure with one (intended, measured) pair of panels per measured mode of ``row``."""
    modes = list(row.masks)
    if not modes:
        raise UsageError(f"{row.path}: nothing was measured ({row.skipped}); nothing to draw")
    widest = max(m.kv_len for m in row.masks.values())
    tallest = max(m.q_len for m in row.masks.values())
    fig = Figure(figsize=(2 * max(3.0, widest * cell) + 1, len(modes) * max(1.6, tallest * cell + 1.2)))
    axes = fig.subplots(len(modes), 2, squeeze=False)
    for (ax_meant, ax_seen), mode in zip(axes, modes):
        mask = row.masks[mode]
        ax_meant.imshow(mask.intended.numpy(), cmap="Greys", vmin=0, vmax=1.4, aspect="equal")
        ax_meant.set_title(f"{mode}: intended ({plural(int(mask.intended.sum(1).max()), 'key')})", fontsize=8)
        ax_seen.imshow(mask.weights.numpy(), cmap="Blues", vmin=0, aspect="equal")
        verdict = "agrees" if mask.ok else f"{int(mask.disagree.sum())} cells disagree"
        ax_seen.set_title(f"{mode}: measured ({plural(mask.attended_keys, 'key')}, {verdict})", fontsize=8)
        rows, cols = np.nonzero(mask.disagree.numpy())
        ax_seen.scatter(cols, rows, marker="x", color="red", s=30, linewidths=1.2)
        for ax in (ax_meant, ax_seen):
            ax.set_xlabel("key position", fontsize=7)
            ax.set_ylabel("query", fontsize=7)
            ax.tick_params(labelsize=6)
    where = f" at {row.site}" if row.site else ""
    fig.suptitle(f"{row.path}{where} · tier {row.tier} · device {row.device} · window_arg {row.window_arg} · "
                 f"meant {'every key' if row.intended_keys is None else plural(row.intended_keys, 'key')}, "
                 f"attends {row.attended_keys}", fontsize=9)
    fig.tight_layout()
    return fig


def draw_probe_table(rows: list[ProbeRow], mode: str = "decode") -> Figure:
    """One measured row per path for ``mode`` (the last query), stacked, for a quick comparison."""
    picked = [r for r in rows if mode in r.masks]
    if not picked:
        raise UsageError(f"no row measured mode {mode!r}")
    kv_len = max(r.masks[mode].kv_len for r in picked)
    image = np.zeros((len(picked), kv_len))
    wrong = np.zeros((len(picked), kv_len), dtype=bool)
    for i, r in enumerate(picked):
        m = r.masks[mode]
        image[i, : m.kv_len] = m.weights[-1].numpy()
        wrong[i, : m.kv_len] = m.disagree[-1].numpy()
    fig = Figure(figsize=(max(7.0, kv_len * 0.35), 0.45 * len(picked) + 1.4))
    ax = fig.subplots()
    ax.imshow(image, cmap="Blues", vmin=0, aspect="auto")
    ys, xs = np.nonzero(wrong)
    ax.scatter(xs, ys, marker="x", color="red", s=40)
    ax.set_yticks(range(len(picked)), [f"{r.site or r.path} ({r.tier})" for r in picked], fontsize=7)
    ax.set_xlabel("key position (last query's row)")
    ax.set_title(f"{mode}: last query's weights (red x: differs from the intended window)", fontsize=9)
    fig.tight_layout()
    return fig
