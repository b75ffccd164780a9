"""Pictures of a benchmark result: time vs context, the bandwidth roofline, ratios, prefill TFLOP/s.

Each function takes a result dict from :func:`swa_kit.measure.bench.run_benchmark` or
:func:`swa_kit.measure.bench.load_recorded` and returns a ``Figure`` (no pyplot). A recorded
result says so in every title, with its GPU and date, so it is never taken for a fresh run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from swa_kit.measure.bench.cases import HEADLINE
from swa_kit.measure.bench.results import headline_rows

#: One colour and marker per path label, fixed across pictures.
STYLE = {
    "kit_triton_swa@p16": ("#1a9850", "o", "-"),
    "kit_triton_swa@p1": ("#66bd63", "s", "-"),
    "aiter_triton_unified@p16": ("#d73027", "^", "-"),
    "flex_attention": ("#4575b4", "D", "-"),
    "sdpa_window": ("#313695", "v", "-"),
    "sdpa_dense_mask": ("#fdae61", "x", "--"),
    "sdpa_full": ("#7f7f7f", "+", "--"),
    "aiter_triton_unified": ("#d73027", "^", "-"),
}


def provenance(result: dict[str, Any]) -> str:
    """"RECORDED on <gpu>, <date>" or "measured now on <gpu>": every title carries it."""
    gpu, date = result["machine"].get("gpu", "?"), str(result.get("date", "?"))[:10]
    return f"RECORDED on {gpu}, {date}" if result.get("recorded") else f"measured now on {gpu}"


def _style(label: str) -> tuple[str, str, str]:
    return STYLE.get(label, ("#000000", ".", "-"))


def time_vs_context(result: dict[str, Any], window: int | None = None) -> Figure:
    """Decode time against context for every path: windowed paths stay flat, full attention climbs."""
    rows = headline_rows(result, window)
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label in sorted({r["label"] for r in rows}, key=lambda s: list(STYLE).index(s) if s in STYLE else 99):
        pts = sorted((r["case"]["context"], r["time_ms"] * 1e3) for r in rows if r["label"] == label)
        color, marker, line = _style(label)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, linestyle=line, color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (keys per request)")
    ax.set_ylabel("decode time (us, median)")
    w = HEADLINE["window"] if window is None else window
    ax.set_title(f"Decode, W={w}, B={HEADLINE['batch']}, Hq/Hkv={HEADLINE['hq']}/{HEADLINE['hkv']}, "
                 f"D={HEADLINE['head_dim']}\n{provenance(result)}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: never over a point
    return fig


def bandwidth_roofline(result: dict[str, Any]) -> Figure:
    """Achieved window bandwidth against the bytes a decode must read, under the measured copy ceiling."""
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    rows = [r for r in result["decode"] if r.get("window_tbs")]
    for label in sorted({r["label"] for r in rows}, key=lambda s: list(STYLE).index(s) if s in STYLE else 99):
        mine = [r for r in rows if r["label"] == label]
        color, marker, _ = _style(label)
        ax.scatter([r["window_bytes"] for r in mine], [r["window_tbs"] for r in mine], s=14, color=color,
                   marker=marker, label=label, alpha=0.8)
    copy = result["copy_tbs"]
    ax.axhline(copy, color="black", linewidth=1)
    ax.text(ax.get_xlim()[0] if rows else 1, copy * 1.03, f" measured copy {copy:.2f} TB/s", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("window K/V bytes per call")
    ax.set_ylabel("window bytes / time (TB/s)")
    ax.set_title(f"Decode bandwidth against the copy ceiling, every case\n{provenance(result)}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def ratio_matrix(result: dict[str, Any], context: int | None = None) -> tuple[list[str], np.ndarray]:
    """Labels and the matrix ``[i, j] = time(j) / time(i)`` at the headline shape (>1: row i is faster)."""
    rows = headline_rows(result)
    contexts = sorted({r["case"]["context"] for r in rows})
    if not contexts:
        return [], np.zeros((0, 0))
    context = contexts[-1] if context is None else context
    rows = sorted((r for r in rows if r["case"]["context"] == context), key=lambda r: r["time_ms"])
    labels = [r["label"] for r in rows]
    times = np.array([r["time_ms"] for r in rows])
    return labels, times[None, :] / times[:, None]


def ratios(result: dict[str, Any], context: int | None = None) -> Figure:
    """Every path's speed-up over every other at the headline shape, as a heat map."""
    labels, matrix = ratio_matrix(result, context)
    fig = Figure(figsize=(7.5, 5.5))
    ax = fig.add_subplot()
    if not labels:
        ax.text(0.5, 0.5, "no headline rows in this result", ha="center")
        return fig
    image = ax.imshow(np.log2(matrix), cmap="RdYlGn", vmin=-4, vmax=4)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ctx = context or max(r["case"]["context"] for r in headline_rows(result))
    ax.set_title(f"time(column) / time(row) at context {ctx}, W={HEADLINE['window']} (> 1: row is faster)\n"
                 f"{provenance(result)}", fontsize=9)
    fig.colorbar(image, ax=ax, label="log2 ratio")
    fig.tight_layout()
    return fig


def prefill_tflops(result: dict[str, Any]) -> Figure:
    """Prefill TFLOP/s (attended pairs) per path, tokens and window."""
    rows = [r for r in result["prefill"] if r.get("tflops")]
    fig = Figure(figsize=(7.5, 4.0))
    ax = fig.add_subplot()
    cases = sorted({(r["case"]["tokens"], r["case"]["window"]) for r in rows})
    labels = sorted({r["label"] for r in rows})
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        values = [next((r["window_tflops"] for r in rows if r["label"] == label and
                        (r["case"]["tokens"], r["case"]["window"]) == c), 0.0) for c in cases]
        ax.bar(np.arange(len(cases)) + i * width, values, width, label=label, color=_style(label)[0])
    ax.set_xticks(np.arange(len(cases)) + 0.4 - width / 2, [f"T={t // 1024}k\nW={w}" for t, w in cases], fontsize=8)
    ax.set_ylabel("TFLOP/s of the window's pairs")
    ax.set_title(f"Prefill (one request, Hq/Hkv 32/8, D 128)\n{provenance(result)}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    return fig
