"""Draw the README's pictures (docs/img/*.png), one per notebook, from the kit's own viz functions.

    python scripts/readme_figures.py

Each picture is what the named notebook shows; nothing here is drawn by hand.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from swa_kit.measure import bench
from swa_kit.measure import probe
from swa_kit.lessons.tiny_model import load_models
from swa_kit.lessons.speculative import DEMO_PROMPTS, greedy_decode, resolver_rows
from swa_kit.viz.bench import time_vs_context
from swa_kit.viz.masks import conventions_figure
from swa_kit.viz.pools import plot_pool_occupancy
from swa_kit.viz.probe import draw_probe
from swa_kit.viz.speculative import acceptance_curve
from swa_kit.engine.workers import build_workers, run_decode

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def acceptance() -> Figure:
    models = load_models()
    prompts = [models.cfg.encode(p) for p in DEMO_PROMPTS[:2]]
    plain = greedy_decode(models, prompts, 64)
    _, runs = resolver_rows(models, prompts, 64, plain)
    fills = sum(max(0, models.cfg.max_window - len(p)) for p in prompts) / len(prompts)
    return acceptance_curve(runs, window_fills_at=fills)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    figures = {
        "conventions.png": lambda: conventions_figure(8),  # notebook 01
        "pool_occupancy.png": lambda: plot_pool_occupancy(  # notebook 02
            run_decode(build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=18), 6, 12)),
        "acceptance.png": acceptance,  # notebook 03
        "probe_unified.png": lambda: draw_probe(  # notebook 04
            next(r for r in probe.probe_sglang_sites(5) if r.site == "extend.unified")),
        "time_vs_context.png": lambda: time_vs_context(bench.load_recorded()),  # notebook 05
    }
    for name, draw in figures.items():
        draw().savefig(OUT / name, dpi=110, bbox_inches="tight")
        print(OUT / name)


if __name__ == "__main__":
    main()
