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

import torch

from swa_kit.engine import routing
from swa_kit.measure import probe
from swa_kit.measure.bench import HEADLINE, DecodeCase, math_floor_us
from swa_kit.models.configs import load_model
from swa_kit.launch.decide import default_sizing
from swa_kit.launch.pool_sizing import RATIO_FALLBACK
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.masks import forward_mask
from swa_kit.models.memory import (
    Savings,
    full_pool_bytes_per_token,
    request_bytes,
    savings,
)
from swa_kit.engine.resolver import decision_table
from swa_kit.window import Window, naive_reads
from swa_kit.engine.workers import build_workers, run_decode

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
    ``--swa-full-tokens-ratio ratio`` (:func:`swa_kit.launch.decide.default_sizing`; one pool where SGLang
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


# == notebooks 01-02 (conventions, masks, pools) ====================================================
# -- 01: conventions ---------------------------------------------------------------------------------


def window_everywhere(model: str = "gemma3-27b") -> dict[str, Any]:
    """Exercise 1.1: the model's sliding window written in every API's convention."""
    spec = load_model(model)
    return Window(spec.window_keys(spec.swa_attention_layer_ids[0])).everywhere()


def _as_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _check_dict(exercise: str, answer: Any, truth: dict[str, Any], what: str, hint: str) -> Verdict:
    """Compare a learner's ``{convention: value}`` dict with ``truth``; name the first wrong entry."""
    if not isinstance(answer, dict) or set(answer) != set(truth):
        raise UsageError(f"answer {answer!r}: give a dict with exactly the keys {sorted(truth)} ({what})")
    wrong = [name for name in truth if _as_value(answer[name]) != truth[name]]
    if not wrong:
        return Verdict(exercise, True, f"All {len(truth)} {what} are right.")
    return Verdict(exercise, False, f"{len(wrong)} of {len(truth)} wrong, e.g. {wrong[0]!r}: "
                                    f"{answer[wrong[0]]!r}. {hint}")


def check_window_everywhere(answer: Any, model: str = "gemma3-27b") -> Verdict:
    """Exercise 1.1: ``{convention: value}`` for every API of :data:`swa_kit.window.CONVENTIONS`."""
    if (missing := _unanswered("1.1", answer, "a dict {convention: value}")) is not None:
        return missing
    return _check_dict("1.1", answer, window_everywhere(model), "window values",
                       "Count the keys each value lets a query see (the table above gives each API's rule).")


def keys_if_passed_unconverted(keys: int, held_in: str = "hf") -> dict[str, int | None | str]:
    """Exercise 1.2: a window of ``keys`` keys, held as ``held_in`` writes it, handed to every API unconverted.

    Returns the keys each API then attends; ``None``: the API reads the value as "no window"; a
    string: the API refuses the value (its error message).
    """
    return {r.convention: (r.error if r.error else r.keys) for r in naive_reads(keys, held_in)}


def check_unconverted(answer: Any, keys: int = 1024, held_in: str = "hf") -> Verdict:
    """Exercise 1.2: ``{convention: keys attended}`` when ``keys`` held as ``held_in`` is passed to every API as is."""
    if (missing := _unanswered("1.2", answer, "a dict {convention: keys attended}")) is not None:
        return missing
    return _check_dict("1.2", answer, keys_if_passed_unconverted(keys, held_in), "key counts",
                       "An API that counts W - 1 reads the value as one key fewer than it attends.")


#: Exercise 1.3's tree: a complete binary tree of 7 draft tokens after 8 committed tokens, window 4 keys.
TREE: dict[str, Any] = {"parents": (-1, 0, 0, 1, 1, 2, 2), "prefix": 8, "window": 4}


def tree_keys_seen(token: int, parents: tuple[int, ...] = TREE["parents"], prefix: int = TREE["prefix"],
                   window: int = TREE["window"]) -> list[int]:
    """Exercise 1.3: the KV columns draft ``token`` attends in target verify of an EAGLE tree.

    Columns ``0 .. prefix - 1`` are committed tokens, ``prefix + i`` is draft token ``i``.
    """
    mask = forward_mask("tree", len(parents), prefix + len(parents), window, parents=parents)
    if not isinstance(token, int) or not 0 <= token < len(parents):
        raise UsageError(f"token {token!r}: give a draft token index in 0..{len(parents) - 1}")
    return mask.dense()[token].nonzero().flatten().tolist()


def check_tree_keys(answer: Any, token: int = 3) -> Verdict:
    """Exercise 1.3: the sorted KV columns draft ``token`` of :data:`TREE` attends."""
    if (missing := _unanswered("1.3", answer, "a list of KV column indices")) is not None:
        return missing
    if not isinstance(answer, (list, tuple, set)) or not all(isinstance(c, int) for c in answer):
        raise UsageError(f"answer {answer!r}: give the KV columns as a list of ints, e.g. [5, 6, 8]")
    truth = tree_keys_seen(token)
    if sorted(answer) == truth:
        return Verdict("1.3", True, f"Draft token {token} attends {len(truth)} keys: the window's committed "
                                    "tokens, its ancestors and itself.")
    extra, missed = sorted(set(answer) - set(truth)), sorted(set(truth) - set(answer))
    return Verdict("1.3", False, f"listed but not attended: {extra}; attended but not listed: {missed}. A draft "
                                 "token sits at position prefix + depth, sees its ancestors (never a sibling), and "
                                 "the window counts them.")


def memory_rows(models: tuple[str, ...], context: int = 128 * 1024) -> list[dict[str, Any]]:
    """KV saving per model two ways, labelled: SGLang's default start-up sizing and the per-request minimum.

    ``saved_pct_sglang_default``: bytes per token of context saved against one pool by the pools SGLang 0.5.23
    sizes at start-up with default arguments (:func:`swa_kit.launch.decide.default_sizing`: the SWA pool at
    ``swa_full_tokens_ratio`` 0.8 of the full pool's tokens; 0 where SGLang builds one pool, e.g. Gemma-3);
    ``saved_pct_min_per_request_<N>k``: one request of ``context`` tokens whose sliding layers keep exactly their
    window (the floor, what SGLang would reach only with a tiny ratio).
    """
    from swa_kit.launch.decide import default_sizing  # reads configs through transformers: import when asked

    rows = []
    for name in models:
        spec, sizing = load_model(name), default_sizing(name)
        minimum = 100 * story_memory(name, context)["minimum_saved_fraction"]
        rows.append({"model": name, "sglang_hybrid_pool": sizing["sglang_hybrid_pool"],
                     "sliding_layers": len(spec.swa_attention_layer_ids),
                     "full_layers": len(spec.full_attention_layer_ids),
                     "saved_pct_sglang_default": sizing["sglang_saved_pct"],
                     f"saved_pct_min_per_request_{context // 1024}k": round(minimum, 1)})
    return rows


# -- 02: pools ---------------------------------------------------------------------------------------

#: Exercise 2.1's request: the notebook's tiny hybrid model (window 4 keys) prefills and then decodes.
DECODE_RUN = {"prompt_len": 6, "decode_steps": 10}


def slots_held(prompt_len: int = DECODE_RUN["prompt_len"], decode_steps: int = DECODE_RUN["decode_steps"]) -> \
        dict[str, int]:
    """Exercise 2.1: full-pool and SWA-pool slots the request holds after its last decode step."""
    counts = run_decode(build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=24),
                        prompt_len, decode_steps)[-1].counts(0)
    return {"full": counts["full_live"], "swa": counts["swa_live"]}


def check_slots_held(full: Any, swa: Any) -> Verdict:
    """Exercise 2.1: the request's full-pool and SWA-pool slots after :data:`DECODE_RUN`."""
    if full is ... or swa is ...:
        return Verdict("2.1", None, "Replace both ... with slot counts, then run the cell again.")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (full, swa)):
        raise UsageError(f"full={full!r}, swa={swa!r}: give both slot counts as ints")
    truth = slots_held()
    if (full, swa) == (truth["full"], truth["swa"]):
        return Verdict("2.1", True, "The full pool grows with the context; the SWA pool stays at the window.")
    hint = ("the full pool keeps every token of the request" if full != truth["full"] else
            "the SWA pool keeps only the tokens a query can still attend")
    return Verdict("2.1", False, f"({full}, {swa}) is off: {hint}.")


def swa_pool_saving(model: str = "gpt-oss-20b", context: int = 128 * 1024) -> Savings:
    """Exercise 2.2: what the SWA pool saves for one request of ``context`` tokens (perfect eviction)."""
    return savings(load_model(model), (context,))[0]


def check_hybrid_saving(minimum_percent: Any, default_percent: Any, model: str = "gpt-oss-20b",
                        context: int = 128 * 1024) -> Verdict:
    """Exercise 2.2: the per-request minimum and SGLang's default saving, in percent (within 1 point each)."""
    if minimum_percent is ... or default_percent is ...:
        return Verdict("2.2", None, "Replace both ... with percentages, then run the cell again.")
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in (minimum_percent, default_percent)):
        raise UsageError(f"minimum_percent={minimum_percent!r}, default_percent={default_percent!r}: "
                         "give both savings as numbers of percent, e.g. 42.5")
    from swa_kit.launch.decide import default_sizing  # reads configs through transformers: import when asked

    minimum = 100 * swa_pool_saving(model, context).saved_fraction
    default = default_sizing(model)["sglang_saved_pct"]  # per token of context: the same at any context
    if abs(minimum_percent - minimum) <= 1 and abs(default_percent - default) <= 1:
        return Verdict("2.2", True, f"The per-request minimum saves {minimum:.1f} %, SGLang's default sizing "
                                    f"{default:.1f} %: quote the one that matches the launch.")
    if abs(minimum_percent - minimum) > 1:
        hint = "the minimum: sliding layers keep only their window of the request, full layers all of it"
    else:
        hint = "the default: one full-pool token costs full_cell + 0.8 x swa_cell, one pool full_cell + swa_cell"
    return Verdict("2.2", False, f"not both within a point; check {hint}.")


# -- 03: resolvers -----------------------------------------------------------------------------------


def resolvers_that_break(algorithm: str) -> dict[str, str]:
    """Exercise 3.1: ``{resolver: what goes wrong}`` for a draft of ``algorithm`` on a hybrid-SWA model."""
    return {r["resolver"]: r["consequence"] for r in decision_table()
            if r["model"] == "hybrid_swa" and r["role"] == "draft" and r["algorithm"] == algorithm
            and not r["correct"]}


# -- 04: dispatch, guards, probe ---------------------------------------------------------------------


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


def attended_keys_per_site(keys: int = 5, device: str = "cpu") -> dict[str, int | None]:
    """Exercise 4.2 (probe): keys each aiter call site really attends for a layer meant to attend ``keys``."""
    return {row.site: row.attended_keys for row in probe.probe_sglang_sites(keys, device=device)
            if row.site is not None}  # every site row names its site


def one_key_short_sites(keys: int = 5, device: str = "cpu") -> list[str]:
    """Exercise 4.2: the call sites that attend exactly one key fewer than the layer means."""
    return [site for site, n in attended_keys_per_site(keys, device).items() if n == keys - 1]


def one_key_short_layers(model: str = "gemma4-31b", mode: str = "decode", **plan_args: Any) -> list[int]:
    """Exercise 4.3: the layers whose route attends one key fewer than intended (plan, then read it)."""
    routed = routing.plan(model, mode, **plan_args)
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

    The headline case is :data:`swa_kit.measure.bench.HEADLINE` (batch 32, 32/8 heads, head dim 128, window
    4096, bf16); ``copy_tbs`` is the device-to-device copy bandwidth measured in the same run (a recorded
    run keeps it as ``copy_tbs`` in its JSON under data/bench/), so no bandwidth is typed in here.
    """
    if not copy_tbs > 0:
        raise UsageError(f"copy_tbs {copy_tbs!r}: give the measured copy bandwidth in TB/s (> 0)")
    h = HEADLINE
    case = DecodeCase(h["batch"], h["hq"], h["hkv"], h["head_dim"], context, h["window"], h["dtype"])
    return math_floor_us(case, copy_tbs)


# == notebooks 03-05: the exercises' checks ===========================================================
# Each check takes the learner's answer (``...`` = not answered yet) and computes the truth from the
# kit's API; tests/test_workshop.py checks that truth against independent computations.


def _number(exercise: str, answer: Any, example: str) -> Verdict | None:
    """The "not answered yet" verdict, or a UsageError for an answer that is not a number; None for a number."""
    if (missing := _unanswered(exercise, answer, example)) is not None:
        return missing
    if not isinstance(answer, (int, float)) or isinstance(answer, bool):
        raise UsageError(f"answer {answer!r}: give a number, e.g. {example}")
    return None


# -- 03: which resolver breaks which draft; the triage rule the other way round ----------------------


def check_resolver_breaks(answers: Any) -> Verdict:
    """Exercise 3.1: ``{"EAGLE": resolver, "FROZEN_KV_MTP": resolver}``, the resolver that breaks each draft."""
    how = "a dict {'EAGLE': 'legacy' | 'naive' | 'fixed', 'FROZEN_KV_MTP': ...}"
    if (missing := _unanswered("3.1", answers, how)) is not None:
        return missing
    algorithms = ("EAGLE", "FROZEN_KV_MTP")
    if not isinstance(answers, dict) or set(answers) != set(algorithms):
        raise UsageError(f"answers {answers!r}: give {how}")
    wrong = []
    for algorithm in algorithms:
        breaks = resolvers_that_break(algorithm)
        if answers[algorithm] not in breaks:
            wrong.append(f"{algorithm}: {answers[algorithm]!r} reads the right KV for it")
    if not wrong:
        return Verdict("3.1", True, "legacy breaks FROZEN_KV MTP (no translation where its draft reads the target's "
                                    "SWA pool); naive breaks EAGLE (translation of ids into the draft's own pool).")
    return Verdict("3.1", False, "; ".join(wrong) + ". Ask which pool each draft *reads*, and whether its ids "
                                                    "need the target's full->SWA mapping.")


#: Exercise 3.2's reports: a symptom, and the worker whose bug explains it (the triage rule read backwards).
SYMPTOMS: dict[str, str] = {
    "after an upgrade, speculative decoding accepts fewer drafted tokens; the text equals the run without it":
        "draft",
    "with and without speculative decoding, answers to long prompts drift off topic once they pass the window":
        "target",
    "with speculative decoding on, the server stops on an illegal memory access after a few dozen tokens; "
    "without it, it runs": "draft",
    "a benchmark's accuracy with speculative decoding equals the accuracy without it": "neither",
}


def check_which_worker(answers: Any) -> Verdict:
    """Exercise 3.2: ``{symptom: "draft" | "target" | "neither"}`` for every report in :data:`SYMPTOMS`.

    "neither" is the seed's evidence: an unchanged accuracy rules out a target bug, and says nothing
    about the draft (acceptance says that).
    """
    if (missing := _unanswered("3.2", answers, 'a dict {symptom: "draft", "target" or "neither"}')) is not None:
        return missing
    if not isinstance(answers, dict) or set(answers) != set(SYMPTOMS):
        raise UsageError("answers: give a dict with exactly the keys of workshop.SYMPTOMS, each mapped to "
                         "'draft', 'target' or 'neither'")
    wrong = [symptom for symptom, worker in SYMPTOMS.items() if answers[symptom] != worker]
    if not wrong:
        return Verdict("3.2", True, "Output changed -> target; only speed (or a fault in the draft's read) -> draft; "
                                    "unchanged output shows the target is intact.")
    return Verdict("3.2", False, f"{len(wrong)} of {len(SYMPTOMS)} wrong, e.g. {wrong[0]!r}: did the *output* "
                                 "change (target), or only how fast it came (draft)?")


# -- 04: the guard and its way out; the call sites one key short --------------------------------------


def guard_and_way_out(model: str = "gemma3-27b", mode: str = "decode") -> dict[str, Any]:
    """Exercise 4.1: layers the guard refuses on SGLang's default route, and the keys a sliding layer
    attends once ``SGLANG_USE_AITER_UNIFIED_ATTN=1`` (the way out) is taken."""
    refused = [p.layer for p in routing.plan(model, mode, strict=False).layers if p.guard]
    fixed = routing.plan(model, mode, env=UNIFIED_FIX)
    after = {p.effective_keys for p in fixed.layers if p.kind == "sliding"}
    intended = {p.intended_keys for p in fixed.layers if p.kind == "sliding"}
    return {"refused_layers": len(refused), "intended_keys": intended.pop() if len(intended) == 1 else intended,
            "keys_after_way_out": after.pop() if len(after) == 1 else after}


def check_guard_way_out(refused_layers: Any, keys_after: Any, model: str = "gemma3-27b") -> Verdict:
    """Exercise 4.1: how many of the model's layers the guard refuses at decode, and how many keys a sliding
    layer attends after the way out ``SGLANG_USE_AITER_UNIFIED_ATTN=1``."""
    for answer in (refused_layers, keys_after):
        if (problem := _number("4.1", answer, "10")) is not None:
            return problem
    truth = guard_and_way_out(model)
    right = [refused_layers == truth["refused_layers"], keys_after == truth["keys_after_way_out"]]
    if all(right):
        return Verdict("4.1", True, f"{truth['refused_layers']} sliding layers refused; after the way out each "
                                    f"attends {truth['keys_after_way_out']} keys of the {truth['intended_keys']} "
                                    "it means: the way out is one key short.")
    hints = ["count the layers the plan refuses (every sliding layer)",
             "read effective_keys of a sliding layer in the plan with the environment variable set"]
    return Verdict("4.1", False, "; ".join(h for h, ok in zip(hints, right) if not ok) + ".")


def check_one_key_short_sites(sites: Any, keys: int = 5) -> Verdict:
    """Exercise 4.2: the aiter call sites (names of :data:`swa_kit.engine.call_sites.SITES`) that attend ``keys - 1``
    keys for a layer meant to attend ``keys``, as the probe measures them."""
    if (missing := _unanswered("4.2", sites, "a list of site names such as ['decode.unified']")) is not None:
        return missing
    if isinstance(sites, str) or not all(isinstance(s, str) for s in sites):
        raise UsageError(f"answer {sites!r}: give a list of call-site names (keys of swa_kit.engine.call_sites.SITES)")
    unknown = sorted(set(sites) - set(routing.SITES))
    if unknown:
        raise UsageError(f"unknown call site(s) {unknown}; known: {', '.join(routing.SITES)}")
    truth = set(one_key_short_sites(keys))
    if set(sites) == truth:
        return Verdict("4.2", True, f"Every unified_attention site ({len(truth)}) gets (sws - 1, 0) and attends "
                                    f"{keys - 1} keys; the kernel given (W - 1, 0) attends {keys}: the argument is "
                                    "short, not the kernel.")
    missed, extra = sorted(truth - set(sites)), sorted(set(sites) - truth)
    return Verdict("4.2", False, f"missing {missed}, not short {extra}: read attended_keys of each probe row.")


# -- 05: what a decode step reads; the floor of the headline case ---------------------------------------


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


def check_sliding_share(percent: Any, model: str = "gemma4-31b", context: int = 128 * 1024) -> Verdict:
    """Exercise 5.1: the percentage of a decode step's KV bytes the sliding layers read (window-aware kernels)."""
    if (problem := _number("5.1", percent, "42.5")) is not None:
        return problem
    truth = 100 * what_the_window_buys(model, context)["sliding_share_of_step"]
    if abs(percent - truth) <= 0.5:
        return Verdict("5.1", True, f"The sliding layers read {truth:.1f} % of the step's KV bytes; the full layers "
                                    "read the rest, and the window does not touch them.")
    return Verdict("5.1", False, f"{percent} % is off: sliding layers read window x per-token bytes, full layers "
                                 "context x per-token bytes (workshop.decode_kv_bytes).")


def check_headline_floor(us: Any, context: int = 128 * 1024) -> Verdict:
    """Exercise 5.2: the bandwidth floor (microseconds) of the headline decode case at ``context`` tokens,
    at the copy bandwidth of the recorded run (within 2 %)."""
    from swa_kit.measure.bench import load_recorded

    if (problem := _number("5.2", us, "100.0")) is not None:
        return problem
    copy_tbs = load_recorded()["copy_tbs"]
    truth = headline_floor_us(context, copy_tbs)
    if abs(us - truth) <= 0.02 * truth:
        return Verdict("5.2", True, f"{truth:.1f} us at {copy_tbs:.2f} TB/s, the same at any context past the "
                                    "window: the window, not the context, sets the bytes.")
    return Verdict("5.2", False, f"{us} us is off: K and V of batch x kv heads x min(context, window) x head_dim "
                                 f"x 2 bytes, over {copy_tbs:.2f} TB/s.")


# == notebook 06: debugging a launch ====================================================================


def decode_window_on_aiter(model: str = "gemma4-31b") -> dict[str, Any]:
    """What SGLang's aiter backend hands a sliding layer of ``model`` at decode (the kit's plan)."""
    layer = next(p for p in routing.plan(model, "decode", strict=False).layers if p.kind == "sliding")
    return {"window_arg": tuple(layer.window_arg), "attended_keys": layer.effective_keys,
            "intended_keys": layer.intended_keys}


def check_decode_window(window_arg: Any, attended_keys: Any, model: str = "gemma4-31b") -> Verdict:
    """Exercise 6.1: the window argument a sliding layer of ``model`` gets at decode on the aiter backend, and
    the keys it then attends."""
    if (missing := _unanswered("6.1", window_arg, "a (left, right) pair such as (7, 0)")) is not None:
        return missing
    if (problem := _number("6.1", attended_keys, "8")) is not None:
        return problem
    if not isinstance(window_arg, (tuple, list)) or len(window_arg) != 2:
        raise UsageError(f"answer {window_arg!r}: give the window argument as a (left, right) pair, e.g. (7, 0)")
    truth = decode_window_on_aiter(model)
    right = [tuple(window_arg) == truth["window_arg"], attended_keys == truth["attended_keys"]]
    if all(right):
        return Verdict("6.1", True, f"window_size={truth['window_arg']}: sliding_window_size is W - 1 and the call "
                                    f"site subtracts one more, so the kernel attends {truth['attended_keys']} of the "
                                    f"{truth['intended_keys']} keys the model was trained with.")
    hints = ["start from sliding_window_size (W - 1) and apply the unified call site's (sws - 1, 0)",
             "aiter's unified kernel attends 1 + left keys"]
    return Verdict("6.1", False, "; ".join(h for h, ok in zip(hints, right) if not ok) + ".")


def first_position_one_short_changes(window: int) -> int:
    """The first query position (0-based) that attends different keys under ``window`` and ``window - 1`` keys,
    from the two windows' masks (:meth:`swa_kit.window.Window.attends`)."""
    positions = torch.arange(2 * window)
    wide = Window(window).attends(positions[:, None], positions[None, :])
    narrow = Window(window - 1).attends(positions[:, None], positions[None, :])
    return int((wide != narrow).any(dim=1).nonzero()[0])


def check_first_changed_position(position: Any, window: int = 16) -> Verdict:
    """Exercise 6.2: the first prompt position whose logits can differ between a window of ``window`` keys and
    one of ``window - 1``."""
    if (problem := _number("6.2", position, "10")) is not None:
        return problem
    truth = first_position_one_short_changes(window)
    if position == truth:
        return Verdict("6.2", True, f"Position {truth}: the first query with more than {window - 1} keys behind it "
                                    "(itself included); every earlier one attends the same keys under both windows.")
    return Verdict("6.2", False, "count the keys a query at position p attends: p + 1 of them, until the window "
                                 "caps it.")
