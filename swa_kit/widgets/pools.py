"""Step a request through decode and watch its full and SWA slots move.

:func:`decode_step_state` is the callback: a plain function of the slider value that
replays a small run up to that step and returns what the widget shows. :func:`decode_stepper`
wraps it in an ipywidgets slider.
"""

from __future__ import annotations

import functools
from typing import Any

from swa_kit.errors import ModelConfigError
from swa_kit.viz.pools import MappingPlot, OccupancyPlot
from swa_kit.widgets._coalesce import Coalescer
from swa_kit.widgets._panel import BlitFigure, FigurePanel, freeze_layout
from swa_kit.engine.workers import PoolSnapshot, build_workers, run_decode


@functools.lru_cache(maxsize=8)
def _replay(prompt_len: int, decode_steps: int, model: str, size: int, size_swa: int
            ) -> tuple[tuple[PoolSnapshot, ...], int | None]:
    """One run's snapshots and the model's window, computed once per run (a slider move only reads them)."""
    workers = build_workers(model, size=size, size_swa=size_swa, max_context_len=prompt_len + decode_steps)
    return tuple(run_decode(workers, prompt_len, decode_steps)), workers.target.layout.window_keys


def decode_step_state(step: int, prompt_len: int = 6, decode_steps: int = 12, model: str = "hybrid_swa",
                      size: int = 40, size_swa: int = 12) -> dict[str, Any]:
    """The pools after ``step`` decode steps (0 = right after the prefill) of one request."""
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= decode_steps:
        raise ModelConfigError(f"step {step!r} is outside 0..{decode_steps}; move the slider within the run")
    snapshots, window = _replay(prompt_len, decode_steps, model, size, size_swa)
    snap = snapshots[step]
    seq_len = prompt_len + step
    counts = snap.counts(0)
    swa = snap.swa_ids.get(0)
    text = (f"step {step}: {seq_len} tokens; full slots {snap.full_ids[0].tolist()}; "
            + (f"SWA slots {swa.tolist()} (0 = freed, reads go to the dummy slot); window {window} keys"
               if swa is not None else "one pool, nothing is evicted"))
    return {"step": step, "seq_len": seq_len, "counts": counts, "snapshot": snap,
            "history": list(snapshots[: step + 1]), "text": text}


def decode_stepper(prompt_len: int = 6, decode_steps: int = 12, model: str = "hybrid_swa") -> Any:
    """An ipywidgets slider over decode steps, drawing the occupancy and the mapping at each step.

    Both figures are built once for the whole run and redrawn in place the first time a step is shown; a step
    shown again reuses its pictures.
    """
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=0, min=0, max=decode_steps, description="decode step")
    panel = FigurePanel(n_figures=2)
    run = decode_step_state(decode_steps, prompt_len, decode_steps, model)
    occupancy = OccupancyPlot(run["history"])
    occupancy_frames = BlitFigure(freeze_layout(occupancy.fig), occupancy.changing_artists)
    mapping = MappingPlot(len(run["snapshot"].full_owner)) if run["snapshot"].swa_ids else None
    if mapping is not None:
        freeze_layout(mapping.show(run["snapshot"]))
        mapping_frames = BlitFigure(mapping.fig, mapping.changing_artists)

    @functools.lru_cache(maxsize=64)  # the run is fixed: a step's pictures are drawn once, shown again from here
    def pictures(step: int) -> tuple[bytes, bytes | None]:
        occupancy.show(step)
        if mapping is None:
            return occupancy_frames.frame(), None
        mapping.show(decode_step_state(step, prompt_len, decode_steps, model)["snapshot"])
        return occupancy_frames.frame(), mapping_frames.frame()

    def draw(step: int) -> None:
        panel.show(decode_step_state(step, prompt_len, decode_steps, model)["text"], *pictures(step))

    latest = Coalescer(draw, panel.show_error)  # a drag redraws its newest step only
    slider.observe(lambda change: latest.submit(change["new"]), names="value")
    draw(slider.value)
    return widgets.VBox([slider, panel.box])
