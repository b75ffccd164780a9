"""Notebook 05, kernels and performance: the KV bytes a decode step reads by layer kind, and the bandwidth floor
of the benchmark's headline decode case.
"""

from __future__ import annotations

from typing import Any

from swa_kit.errors import UsageError
from swa_kit.lessons.workshop.story import story_memory
from swa_kit.lessons.workshop.verdict import Verdict, check, number
from swa_kit.measure.bench import HEADLINE, DecodeCase, math_floor_us
from swa_kit.models.configs import load_model
from swa_kit.models.memory import full_pool_bytes_per_token, request_bytes


def decode_kv_bytes(model: str = "gemma4-31b", context: int = 128 * 1024) -> dict[str, int]:
    """Exercise 5.1: KV bytes one request's decode step reads, split by layer kind, and without the window.

    ``sliding_layers`` / ``full_layers``: what window-aware kernels read (a sliding layer only its
    window); ``without_window``: every layer reads the whole context (what paged decode would read).
    """
    spec = load_model(model)
    windowed = request_bytes(spec, context, hybrid=True)
    full = full_pool_bytes_per_token(spec) * context
    return {"sliding_layers": windowed - full, "full_layers": full,
            "without_window": request_bytes(spec, context, hybrid=False)}


def what_the_window_buys(model: str = "gemma4-31b", context: int = 128 * 1024) -> dict[str, float]:
    """Decode time against memory on a hybrid model, both from the model's config.

    ``sliding_share_of_step``: the sliding layers' share of one decode step's KV bytes once they read
    only their window (:func:`decode_kv_bytes`); the most a faster windowed kernel can take off the
    step's KV reading. ``memory_saved_default`` / ``memory_saved_minimum``: the KV the SWA pool saves at
    SGLang's default sizing and at the per-request minimum (:func:`story_memory`).
    """
    read = decode_kv_bytes(model, context)
    story = story_memory(model, context)
    return {"sliding_share_of_step": read["sliding_layers"] / (read["sliding_layers"] + read["full_layers"]),
            "memory_saved_default": story["default_saved_fraction"],
            "memory_saved_minimum": story["minimum_saved_fraction"]}


@check("5.1")
def check_sliding_share(percent: Any, model: str = "gemma4-31b", context: int = 128 * 1024) -> Verdict:
    """Exercise 5.1: the percentage of a decode step's KV bytes the sliding layers read (window-aware kernels)."""
    percent = number(percent, "the sliding layers' share as a number of percent")
    truth = 100 * what_the_window_buys(model, context)["sliding_share_of_step"]
    if abs(percent - truth) <= 0.5:
        return Verdict("5.1", True, f"The sliding layers read {truth:.1f} % of the step's KV bytes; the full layers "
                                    "read the rest, and the window does not touch them.")
    return Verdict("5.1", False, f"{percent} % is off: sliding layers read window x per-token bytes, full layers "
                                 "context x per-token bytes (kernels.decode_kv_bytes).")


def headline_floor_us(context: int, copy_tbs: float) -> float:
    """Exercise 5.2: the bandwidth floor of the benchmark's headline decode case at ``context`` tokens.

    The headline case is :data:`swa_kit.measure.bench.HEADLINE` (batch 32, 32/8 heads, head dim 128, window
    4096, bf16); ``copy_tbs`` is the device-to-device copy bandwidth measured in the same run (a recorded
    run keeps it as ``copy_tbs`` in its JSON under data/bench/), so no bandwidth is typed in here.
    """
    if not copy_tbs > 0:
        raise UsageError(f"copy_tbs {copy_tbs!r}: give the measured copy bandwidth in TB/s (> 0)")
    h = HEADLINE
    case = DecodeCase(h["batch"], h["hq"], h["hkv"], h["head_dim"], context, h["window"], h["dtype"])
    return math_floor_us(case, copy_tbs)


@check("5.2")
def check_headline_floor(us: Any, context: int = 128 * 1024) -> Verdict:
    """Exercise 5.2: the bandwidth floor (microseconds) of the headline decode case at ``context`` tokens,
    at the copy bandwidth of the recorded run (within 2 %)."""
    from swa_kit.measure.bench import load_recorded

    us = number(us, "the floor as a number of microseconds")
    copy_tbs = load_recorded()["copy_tbs"]
    truth = headline_floor_us(context, copy_tbs)
    if abs(us - truth) <= 0.02 * truth:
        return Verdict("5.2", True, f"{truth:.1f} us at {copy_tbs:.2f} TB/s, the same at any context past the "
                                    "window: the window, not the context, sets the bytes.")
    return Verdict("5.2", False, f"{us} us is off: K and V of batch x kv heads x min(context, window) x head_dim "
                                 f"x 2 bytes, over {copy_tbs:.2f} TB/s.")
