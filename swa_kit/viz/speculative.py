"""Pictures of speculative decoding runs: acceptance over generated length per resolver, the guard run."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from swa_kit.lessons.speculative import Generation


def acceptance_curve(runs: list[Generation], window_fills_at: float | None = None, bins: int = 8) -> Figure:
    """Mean accepted drafts per round against tokens generated so far, one line per (algorithm, resolver)."""
    fig = Figure(figsize=(9, 3.6))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, algorithm in zip(axes, ("eagle", "frozen_kv_mtp")):
        chosen = [r for r in runs if r.algorithm == algorithm]
        top = max((x.generated for r in chosen for x in r.rounds), default=1) + 1
        edges = np.linspace(0, top, bins + 1)
        for run in chosen:
            gen = np.array([x.generated for x in run.rounds])
            rate = np.array([x.accepted / x.drafted for x in run.rounds])
            if gen.size == 0:
                ax.plot([], [], label=f"{run.resolver}: no round ({(run.error or '')[:30]})")
                continue
            which = np.digitize(gen, edges) - 1
            means = [rate[which == b].mean() if (which == b).any() else np.nan for b in range(bins)]
            label = run.resolver + (" (stopped: " + run.error.split(":")[0] + ")" if run.error else "")
            ax.plot((edges[:-1] + edges[1:]) / 2, means, marker="o", label=label)
        if window_fills_at is not None:
            ax.axvline(window_fills_at, color="grey", linestyle=":", label="window full (mean prompt)")
        ax.set_title(algorithm)
        ax.set_xlabel("tokens generated so far")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("accepted / drafted per round")
    fig.tight_layout()
    return fig


def guard_divergence(report: dict[str, Any]) -> Figure:
    """Per prompt: where the window fills and where the window-ignoring kernel's output leaves plain decoding."""
    fig = Figure(figsize=(7, 0.6 + 0.5 * len(report["outputs"])))
    ax = fig.subplots()
    n = len(report["plain_outputs"][0])
    for i, (fills, first) in enumerate(zip(report["window_fills_at"], report["first_divergence"])):
        ax.barh(i, n, color="#d9ead3", edgecolor="none")
        if first is not None:
            ax.barh(i, n - first, left=first, color="#f4cccc", edgecolor="none")
        ax.plot([fills, fills], [i - 0.4, i + 0.4], color="black", linewidth=2)
    ax.set_yticks(range(len(report["outputs"])), [f"prompt {i}" for i in range(len(report["outputs"]))])
    ax.set_xlabel("generated token (green: same as plain, red: from first divergence; bar: window full)")
    ax.set_title(f"layer {report['layer']} on {report['path']} (no window), guard off")
    fig.tight_layout()
    return fig
