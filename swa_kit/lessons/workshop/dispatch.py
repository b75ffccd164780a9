"""Notebook 04, aiter dispatch and guards: the guard on SGLang's default route and its way out, and the call
sites and layers that attend one key fewer than the layer means.
"""

from __future__ import annotations

import functools
from typing import Any

from swa_kit.engine import routing
from swa_kit.errors import DispatchGuardError
from swa_kit.launch.inputs import Launch
from swa_kit.lessons.workshop.verdict import Verdict, check, integer, integers, names
from swa_kit.measure import audit, probe


UNIFIED_FIX = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}


def guard_then_fix(model: str = "gemma3-27b", mode: str = "decode") -> tuple[str | None, routing.Plan]:
    """Exercise 4.1: the guard's message on SGLang's default route, and the plan once its way out is taken.

    The message is ``None`` when the default route already passes (a hybrid-pool model such as
    gemma4-31b is forced onto ``unified_attention`` by its resolved SWA pool).
    """
    try:
        routing.plan(model, mode)
        message = None
    except DispatchGuardError as error:
        message = str(error)
    return message, routing.plan(model, mode, env=UNIFIED_FIX)


def guard_and_way_out(model: str = "gemma3-27b", mode: str = "decode") -> dict[str, Any]:
    """Exercise 4.1: layers the guard refuses on SGLang's default route, and the keys a sliding layer
    attends once ``SGLANG_USE_AITER_UNIFIED_ATTN=1`` (the way out) is taken."""
    refused = [p.layer for p in routing.plan(model, mode, strict=False).layers if p.guard]
    fixed = routing.plan(model, mode, env=UNIFIED_FIX)
    after = {p.effective_keys for p in fixed.layers if p.kind == "sliding"}
    intended = {p.intended_keys for p in fixed.layers if p.kind == "sliding"}
    return {"refused_layers": len(refused), "intended_keys": intended.pop() if len(intended) == 1 else intended,
            "keys_after_way_out": after.pop() if len(after) == 1 else after}


@check("4.1")
def check_guard_way_out(refused_layers: Any, keys_after: Any, model: str = "gemma3-27b") -> Verdict:
    """Exercise 4.1: how many of the model's layers the guard refuses at decode, and how many keys a sliding
    layer attends after the way out ``SGLANG_USE_AITER_UNIFIED_ATTN=1``."""
    refused_layers = integer(refused_layers, "the number of layers the guard refuses, a whole number")
    keys_after = integer(keys_after, "the keys a sliding layer attends after the way out, a whole number")
    truth = guard_and_way_out(model)
    right = [refused_layers == truth["refused_layers"], keys_after == truth["keys_after_way_out"]]
    if all(right):
        return Verdict("4.1", True, f"{truth['refused_layers']} sliding layers refused; after the way out each "
                                    f"attends {truth['keys_after_way_out']} keys of the {truth['intended_keys']} "
                                    "it means: the way out is one key short.")
    hints = ["count the layers the plan refuses (every sliding layer)",
             "read effective_keys of a sliding layer in the plan with the environment variable set"]
    return Verdict("4.1", False, "; ".join(h for h, ok in zip(hints, right) if not ok) + ".")


def attended_keys_per_site(keys: int = 5, device: str = "cpu") -> dict[str, int | None]:
    """Exercise 4.2 (probe): keys each aiter call site really attends for a layer meant to attend ``keys``."""
    return {row.site: row.attended_keys for row in probe.probe_sglang_sites(keys, device=device)
            if row.site is not None}  # every site row names its site


def one_key_short_sites(keys: int = 5, device: str = "cpu") -> list[str]:
    """Exercise 4.2: the call sites that attend exactly one key fewer than the layer means."""
    return [site for site, n in attended_keys_per_site(keys, device).items() if n == keys - 1]


@functools.cache
def _measured_short_sites(keys: int) -> frozenset[str]:
    """:func:`one_key_short_sites` on the CPU, measured once per process: a learner re-runs the check often."""
    return frozenset(one_key_short_sites(keys))


@check("4.2")
def check_one_key_short_sites(sites: Any, keys: int = 5) -> Verdict:
    """Exercise 4.2: the aiter call sites (names of :data:`swa_kit.engine.call_sites.SITES`) that attend ``keys - 1``
    keys for a layer meant to attend ``keys``, as the probe measures them."""
    sites = names(sites, routing.SITES, "a list of call-site names (the keys of routing.SITES)")
    truth = set(_measured_short_sites(keys))
    if set(sites) == truth:
        return Verdict("4.2", True, f"Every unified_attention site ({len(truth)}) gets (sws - 1, 0) and attends "
                                    f"{keys - 1} keys; the kernel given (W - 1, 0) attends {keys}: the argument is "
                                    "short, not the kernel.")
    missed, extra = sorted(truth - set(sites)), sorted(set(sites) - truth)
    return Verdict("4.2", False, f"missing {missed}, not short {extra}: read attended_keys of each probe row.")


def one_key_short_layers(model: str = "gemma4-31b", mode: str = "decode", **plan_args: Any) -> list[int]:
    """Exercise 4.3: the layers whose route attends one key fewer than intended (plan, then read it)."""
    routed = routing.plan(model, mode, **plan_args)
    return [p.layer for p in routed.layers
            if p.intended_keys is not None and p.effective_keys == p.intended_keys - 1]


def default_launch_rows(models: tuple[str, ...] = ("gpt-oss-120b", "gemma4-31b"),
                        platform: str = "rocm-gfx942") -> list[dict[str, Any]]:
    """The launch a learner meets: each model with no ``--attention-backend``, audited on ``platform``. One row per
    model: the backend SGLang picks (and why), and what a sliding layer's decode attends there."""
    rows = []
    for model in models:
        report = audit.audit(Launch.from_inputs(model=model, platform=platform))
        (decode,) = [r for r in audit.to_json(report)["routes"]
                     if (r["worker"], r["mode"], r["kind"]) == ("target", "decode", "sliding")]
        choice = report.decisions.attention_backend
        rows.append({"model": model, "attention_backend": choice.value, "chosen_by": choice.source.split(";")[0],
                     "decode_kernel": decode["kernel"], "window_arg": decode["window_arg"], "keys": decode["keys"]})
    return rows


@check("4.3")
def check_one_key_short_layers(layers: Any, model: str = "gemma4-31b", mode: str = "decode",
                               **plan_args: Any) -> Verdict:
    """Exercise 4.3: the layers of ``model``'s ``mode`` plan whose route attends one key fewer than intended
    (any order; ``plan_args`` as for :func:`swa_kit.engine.routing.plan`, e.g. the way out of 4.1 as ``env``)."""
    layers = integers(layers, "the layer indices as a list of whole numbers")
    truth = set(one_key_short_layers(model, mode, **plan_args))
    sliding = {p.layer for p in routing.plan(model, mode, **plan_args).layers if p.kind == "sliding"}
    if set(layers) == truth:
        return Verdict("4.3", True, f"{len(truth)} layers, every sliding layer of {model} and only those: each gets "
                                    "(sws - 1, 0); the full layers pass (-1, -1) and attend the whole context.")
    missed, extra = sorted(truth - set(layers)), sorted(set(layers) - truth)
    hint = ("a full layer is never short: it takes no window" if set(extra) - sliding else
            "read effective_keys against intended_keys in every row of the plan")
    return Verdict("4.3", False, f"{len(missed)} short layers missing, {len(extra)} listed that are not short: "
                                 f"{hint}.")
