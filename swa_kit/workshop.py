"""Reference solutions to the exercises of ``docs/workshop.md``, one function per exercise, and the checks
the notebooks call on a learner's answer.

Each solution is a few calls over the kit's own API, the way a participant would write it in a
notebook cell; ``tests/test_workshop.py`` checks every answer against an independent computation
(hand arithmetic from the model configs, the window conventions written out by hand, real reads
from the pools). A ``check_*`` function takes the learner's answer and returns a :class:`Verdict`;
an answer left as ``...`` gets "not answered yet", so the exercise versions of the notebooks run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swa_kit import dispatch, probe
from swa_kit.bench import HEADLINE, DecodeCase, math_floor_us
from swa_kit.configs import load_model
from swa_kit.deploy.decide import default_sizing
from swa_kit.deploy.pool_sizing import RATIO_FALLBACK
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.memory import (
    Savings,
    full_pool_bytes_per_token,
    request_bytes,
    savings,
)
from swa_kit.resolver import decision_table
from swa_kit.window import Window, naive_reads

UNIFIED_FIX = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}


@dataclass(frozen=True)
class Verdict:
    """A check's answer to the learner: right (True), wrong (False) or not answered yet (None)."""

    exercise: str
    ok: bool | None
    message: str

    def __str__(self) -> str:
        mark = {True: "right", False: "not yet right", None: "not answered yet"}[self.ok]
        return f"Exercise {self.exercise}: {mark}. {self.message}"

    __repr__ = __str__


def _unanswered(exercise: str, answer: Any, how: str) -> Verdict | None:
    return Verdict(exercise, None, f"Replace the ... with {how}, then run the cell again.") if answer is ... else None


# -- 00: the story -----------------------------------------------------------------------------------

#: SGLang's default ``swa_full_tokens_ratio``: SWA-pool tokens per full-pool token, fixed at start-up
#: (SGLang 0.5.23, ``server_args`` / ``arg_groups/fields/schedule.py``; bytes per full-pool token
#: ``full_cell + ratio * swa_cell`` in ``model_executor/pool_configurator.py``).
SGLANG_SWA_FULL_TOKENS_RATIO = RATIO_FALLBACK


def story_memory(model: str = "gemma4-31b", context: int = 128 * 1024,
                 ratio: float = SGLANG_SWA_FULL_TOKENS_RATIO) -> dict[str, float]:
    """What a hybrid pool buys ``model``, two ways: SGLang's start-up sizing and the per-request minimum.

    ``default_*``: KV bytes per full-pool token as SGLang sizes the pools at start-up with
    ``--swa-full-tokens-ratio ratio`` (:func:`swa_kit.deploy.decide.default_sizing`; one pool where SGLang
    builds no hybrid pool); ``minimum_*``: one request of ``context`` tokens whose sliding layers keep
    exactly their window (perfect eviction, the floor).
    """
    sizing = default_sizing(model, ratio=ratio)
    one, default = sizing["one_pool_bytes_per_token"], sizing["sglang_bytes_per_token"]
    spec = load_model(model)
    hybrid, whole = request_bytes(spec, context, hybrid=True), request_bytes(spec, context, hybrid=False)
    return {"one_pool_bytes_per_token": one, "default_bytes_per_token": default,
            "default_saved_fraction": 1 - default / one,
            "minimum_request_bytes": hybrid, "one_pool_request_bytes": whole,
            "minimum_saved_fraction": 1 - hybrid / whole}


def check_default_saving(percent: Any, model: str = "gemma4-31b") -> Verdict:
    """Exercise 0.1: the percentage of KV bytes per token SGLang's default sizing saves (within 1 point)."""
    if (missing := _unanswered("0.1", percent, "a percentage such as 42")) is not None:
        return missing
    if not isinstance(percent, (int, float)) or isinstance(percent, bool):
        raise UsageError(f"answer {percent!r}: give the saving as a number of percent, e.g. 42.5")
    truth = 100 * story_memory(model)["default_saved_fraction"]
    if abs(percent - truth) <= 1:
        return Verdict("0.1", True, f"SGLang's default sizing saves {truth:.1f} % of KV bytes per token.")
    hint = ("that is the per-request minimum (window-sized SWA pool), not SGLang's start-up sizing"
            if abs(percent - 100 * story_memory(model)["minimum_saved_fraction"]) <= 2 else
            "bytes per full-pool token are full_cell + 0.8 x swa_cell; compare with one pool's full_cell + swa_cell")
    return Verdict("0.1", False, f"{percent} % is off: {hint}.")


#: Exercise 0.2's cases: what is broken, and in which worker. The triage rule maps the worker to the cost.
TRIAGE_CASES: dict[str, str] = {
    "naive resolver: an EAGLE draft reads its own pool through the target's SWA mapping (SGLang #25103)": "draft",
    "legacy resolver: a FROZEN_KV MTP draft reads the target's SWA pool with untranslated ids": "draft",
    "guard off: a target sliding layer decodes on paged_attention_ragged (no window)": "target",
    "SGLang's unified call sites: every target sliding layer attends one key short": "target",
}


def triage(worker: str) -> str:
    """The triage rule. Verification is lossless: the target checks every drafted token with its own
    forward pass, so a bug in the draft can only cost acceptance (speed; or stop the run if it faults),
    while a bug in the target changes the output itself."""
    costs = {"draft": "acceptance", "target": "output"}
    if worker not in costs:
        raise UsageError(f"worker {worker!r}: the triage rule knows 'draft' and 'target'")
    return costs[worker]


def check_triage(answers: Any) -> Verdict:
    """Exercise 0.2: ``{case: "acceptance" | "output"}`` for every case of :data:`TRIAGE_CASES`."""
    if (missing := _unanswered("0.2", answers, 'a dict {case: "acceptance" or "output"}')) is not None:
        return missing
    if not isinstance(answers, dict) or set(answers) != set(TRIAGE_CASES):
        raise UsageError("answers: give a dict with exactly the keys of workshop.TRIAGE_CASES, "
                         "each mapped to 'acceptance' or 'output'")
    wrong = [case for case, worker in TRIAGE_CASES.items() if answers[case] != triage(worker)]
    if not wrong:
        return Verdict("0.2", True, "A draft bug costs acceptance, a target bug costs output.")
    return Verdict("0.2", False, f"{len(wrong)} of {len(TRIAGE_CASES)} wrong, e.g. {wrong[0]!r}: ask which worker "
                                 "is broken, and whether the target re-checks what it produces.")


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


def headline_floor_us(context: int, copy_tbs: float) -> float:
    """Exercise 5.2: the bandwidth floor of the benchmark's headline decode case at ``context`` tokens.

    The headline case is :data:`swa_kit.bench.HEADLINE` (batch 32, 32/8 heads, head dim 128, window
    4096, bf16); ``copy_tbs`` is the device-to-device copy bandwidth measured in the same run (a recorded
    run keeps it as ``copy_tbs`` in its JSON under data/bench/), so no bandwidth is typed in here.
    """
    if not copy_tbs > 0:
        raise UsageError(f"copy_tbs {copy_tbs!r}: give the measured copy bandwidth in TB/s (> 0)")
    h = HEADLINE
    case = DecodeCase(h["batch"], h["hq"], h["hkv"], h["head_dim"], context, h["window"], h["dtype"])
    return math_floor_us(case, copy_tbs)
