"""Reference solutions to the exercises of ``docs/workshop.md``, one function per exercise.

Each solution is a few calls over the kit's own API, the way a participant would write it in a
notebook cell; ``tests/test_workshop.py`` checks every answer against an independent computation
(hand arithmetic from the model configs, each API's window rule written out, real reads from the pools).
"""

from __future__ import annotations

from typing import Any

from swa_kit import dispatch, probe
from swa_kit.bench import HEADLINE, DecodeCase, math_floor_us
from swa_kit.configs import load_model
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.memory import Savings, full_pool_bytes_per_token, request_bytes, savings
from swa_kit.resolver import decision_table
from swa_kit.window import Window, naive_reads

UNIFIED_FIX = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}


# -- 01: conventions ---------------------------------------------------------------------------------


def window_everywhere(model: str = "gemma3-27b") -> dict[str, Any]:
    """Exercise 1.1: the model's sliding window written in every API's convention."""
    spec = load_model(model)
    return Window(spec.window_keys(spec.swa_attention_layer_ids[0])).everywhere()


def keys_if_passed_unconverted(keys: int, held_in: str = "hf") -> dict[str, int | None | str]:
    """Exercise 1.2: a window of ``keys`` keys, held as ``held_in`` writes it, handed to every API unconverted.

    Returns the keys each API then attends; ``None``: the API reads the value as "no window"; a
    string: the API refuses the value (its error message).
    """
    return {r.convention: (r.error if r.error else r.keys) for r in naive_reads(keys, held_in)}


# -- 02: pools ---------------------------------------------------------------------------------------


def swa_pool_saving(model: str = "gpt-oss-20b", context: int = 128 * 1024) -> Savings:
    """Exercise 2.1: what the SWA pool saves for one request of ``context`` tokens (perfect eviction)."""
    return savings(load_model(model), (context,))[0]


# -- 03: resolvers -----------------------------------------------------------------------------------


def resolvers_that_break(algorithm: str) -> dict[str, str]:
    """Exercise 3.1: ``{resolver: what goes wrong}`` for a draft of ``algorithm`` on a hybrid-SWA model."""
    return {r["resolver"]: r["consequence"] for r in decision_table()
            if r["model"] == "hybrid_swa" and r["role"] == "draft" and r["algorithm"] == algorithm
            and not r["correct"]}


# -- 04: dispatch, guards, probe ---------------------------------------------------------------------


def guard_then_fix(model: str = "gemma3-27b", mode: str = "decode") -> tuple[str | None, dispatch.Plan]:
    """Exercise 4.1: the guard's message on SGLang's default route, and the plan once its way out is taken.

    The message is ``None`` when the default route already passes (a hybrid-pool model such as
    gemma4-31b is forced onto ``unified_attention`` by its resolved SWA pool).
    """
    try:
        dispatch.plan(model, mode)
        message = None
    except DispatchGuardError as error:
        message = str(error)
    return message, dispatch.plan(model, mode, env=UNIFIED_FIX)


def attended_keys_per_site(keys: int = 5, device: str = "cpu") -> dict[str, int | None]:
    """Exercise 4.2 (probe): keys each aiter call site really attends for a layer meant to attend ``keys``."""
    return {row.site: row.attended_keys for row in probe.probe_sglang_sites(keys, device=device)}


def one_key_short_sites(keys: int = 5, device: str = "cpu") -> list[str]:
    """Exercise 4.2: the call sites that attend exactly one key fewer than the layer means."""
    return [site for site, n in attended_keys_per_site(keys, device).items() if n == keys - 1]


def one_key_short_layers(model: str = "gemma4-31b", mode: str = "decode", **plan_args: Any) -> list[int]:
    """Exercise 4.3: the layers whose route attends one key fewer than intended (plan, then read it)."""
    routed = dispatch.plan(model, mode, **plan_args)
    return [p.layer for p in routed.layers
            if p.intended_keys is not None and p.effective_keys == p.intended_keys - 1]


# -- 05: kernels and performance -----------------------------------------------------------------------


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


def headline_floor_us(context: int, copy_tbs: float = 4.27) -> float:
    """Exercise 5.2: the bandwidth floor of the benchmark's headline decode case at ``context`` tokens.

    The headline case is :data:`swa_kit.bench.HEADLINE` (batch 32, 32/8 heads, head dim 128, window
    4096, bf16); ``copy_tbs`` is the device-to-device copy bandwidth measured in the same run.
    """
    if not copy_tbs > 0:
        raise UsageError(f"copy_tbs {copy_tbs!r}: give the measured copy bandwidth in TB/s (> 0)")
    h = HEADLINE
    case = DecodeCase(h["batch"], h["hq"], h["hkv"], h["head_dim"], context, h["window"], h["dtype"])
    return math_floor_us(case, copy_tbs)
