"""Step a request through decode and watch its full and SWA slots move.

:func:`decode_step_state` is the callback: a plain function of the slider value that
replays a small run up to that step and returns what the widget shows. :func:`decode_stepper`
wraps it in an ipywidgets slider.
"""

from __future__ import annotations

from typing import Any

from swa_kit.errors import ModelConfigError
from swa_kit.viz.pools import plot_mapping, plot_pool_occupancy
from swa_kit.widgets._panel import FigurePanel
from swa_kit.workers import build_workers, run_decode


def decode_step_state(step: int, prompt_len: int = 6, decode_steps: int = 12, model: str = "hybrid_swa",
                      size: int = 40, size_swa: int = 12) -> dict[str, Any]:
    """The pools after ``step`` decode steps (0 = right after the prefill) of one request."""
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= decode_steps:
        raise ModelConfigError(f"step {step!r} is outside 0..{decode_steps}; move the slider within the run")
    workers = build_workers(model, size=size, size_swa=size_swa, max_context_len=prompt_len + decode_steps)
    snapshots = run_decode(workers, prompt_len, decode_steps)
    snap = snapshots[step]
    seq_len = prompt_len + step
    counts = snap.counts(0)
    window = workers.target.layout.window_keys
    swa = snap.swa_ids.get(0)
    text = (f"step {step}: {seq_len} tokens; full slots {snap.full_ids[0].tolist()}; "
            + (f"SWA slots {swa.tolist()} (0 = freed, reads go to the dummy slot); window {window} keys"
               if swa is not None else "one pool, nothing is evicted"))
    return {"step": step, "seq_len": seq_len, "counts": counts, "snapshot": snap, "history": snapshots[: step + 1],
            "text": text}


def decode_stepper(prompt_len: int = 6, decode_steps: int = 12, model: str = "hybrid_swa") -> Any:
    """An ipywidgets slider over decode steps, drawing the occupancy and the mapping at each step."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=0, min=0, max=decode_steps, description="decode step")
    panel = FigurePanel(n_figures=2)

    def draw(change: Any = None) -> None:
        state = decode_step_state(slider.value, prompt_len, decode_steps, model)
        mapping = plot_mapping(state["snapshot"]) if state["snapshot"].swa_ids else None
        panel.show(state["text"], plot_pool_occupancy(state["history"]), mapping)

    slider.observe(draw, names="value")
    draw()
    return widgets.VBox([slider, panel.box])
