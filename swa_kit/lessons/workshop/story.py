"""Notebook 00, the story: what a hybrid pool saves (SGLang's start-up sizing and the per-request minimum), per
model, what PR #38756 fixed (both on the FROZEN_KV MTP draft), and the triage rule with its limits (a draft bug
costs acceptance, a bug on a target route, verify included, costs output; bf16 and sampling drift are no bugs).
"""

from __future__ import annotations

from typing import Any

from swa_kit.errors import UsageError
from swa_kit.launch.decide import default_sizing
from swa_kit.launch.inputs import Launch
from swa_kit.launch.pool_sizing import RATIO_FALLBACK
from swa_kit.lessons.workshop.verdict import Verdict, check, choice, mapping, number
from swa_kit.measure import audit
from swa_kit.models.configs import load_model
from swa_kit.models.memory import request_bytes
from swa_kit.sglang_versions import BEFORE_38756, SGLANG_VERSION


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


@check("0.1")
def check_default_saving(percent: Any, model: str = "gemma4-31b") -> Verdict:
    """Exercise 0.1: the percentage of KV bytes per token SGLang's default sizing saves (within 1 point)."""
    percent = number(percent, "the saving as a number of percent")
    truth = 100 * story_memory(model)["default_saved_fraction"]
    if abs(percent - truth) <= 1:
        return Verdict("0.1", True, f"SGLang's default sizing saves {truth:.1f} % of KV bytes per token.")
    hint = ("that is the per-request minimum (window-sized SWA pool), not SGLang's start-up sizing"
            if abs(percent - 100 * story_memory(model)["minimum_saved_fraction"]) <= 2 else
            "bytes per full-pool token are full_cell + 0.8 x swa_cell; compare with one pool's full_cell + swa_cell")
    return Verdict("0.1", False, f"{percent} % is off: {hint}.")


def memory_rows(models: tuple[str, ...], context: int = 128 * 1024) -> list[dict[str, Any]]:
    """KV saving per model two ways, labelled: SGLang's default start-up sizing and the per-request minimum.

    ``saved_pct_sglang_default``: bytes per token of context saved against one pool by the pools SGLang 0.5.23
    sizes at start-up with default arguments (:func:`swa_kit.launch.decide.default_sizing`: the SWA pool at
    ``swa_full_tokens_ratio`` 0.8 of the full pool's tokens; 0 where SGLang builds one pool, e.g. Gemma-3);
    ``saved_pct_min_per_request_<N>k``: one request of ``context`` tokens whose sliding layers keep exactly their
    window (the floor, what SGLang would reach only with a tiny ratio).
    """
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


#: Exercise 0.2's cases: what is broken, and on which route. ``draft``: the draft worker; ``target``: a target
#: route every request takes; ``verify``: a target route only speculative decoding reaches (target verify).
#: The seed's two coupled fixes are both on the draft: before PR #38756, SGLang's FROZEN_KV MTP draft read the
#: target's SWA pool with untranslated ids, and its sliding layer decoded on the windowless paged decode
#: (``swa-kit audit ... --sglang-version before-38756``; :func:`pr_fixed_rows`).
TRIAGE_CASES: dict[str, str] = {
    "naive resolver: an EAGLE draft reads its own pool through the target's SWA mapping (SGLang #25103)": "draft",
    "before PR #38756: the FROZEN_KV MTP draft reads the target's SWA pool with untranslated ids": "draft",
    "before PR #38756: the FROZEN_KV MTP draft's sliding layer decodes on paged_attention_ragged (no window)":
        "draft",
    "EAGLE with topk 4 on aiter: target verify's sliding layers take extend_attention_fwd (no window, untranslated "
    "ids)": "verify",
    "SGLang's unified call sites: every target sliding layer attends one key short": "target",
}

#: What a bug on each route costs. Verification is lossless: the target re-computes every drafted token with its
#: own forward pass and keeps only those it would have produced, so a draft bug costs acceptance (speed), or stops
#: the run if it faults; a bug on a target route changes the output, and target verify is a target route, even
#: though only speculative decoding reaches it.
TRIAGE_RULE: dict[str, str] = {"draft": "acceptance", "target": "output", "verify": "output"}

#: What the rule does not cover: differences that are no bug, so they point at no route.
NOT_BUGS: tuple[str, ...] = (
    "bf16 drift: verify computes several tokens in one pass, in another reduction order than plain decoding, so a "
    "near-tie can flip a greedy token with no bug anywhere; compare in float32, or compare accuracy, not text",
    "sampling: with temperature > 0, speculative sampling keeps the target's distribution, not its draws, so "
    "outputs differ from a run without it; compare distributions or accuracy, or decode greedily",
)


def triage(route: str) -> str:
    """The triage rule (:data:`TRIAGE_RULE`): what a bug on ``route`` ("draft", "target" or "verify") costs."""
    if route not in TRIAGE_RULE:
        raise UsageError(f"route {route!r}: the triage rule knows {', '.join(map(repr, TRIAGE_RULE))}")
    return TRIAGE_RULE[route]


@check("0.2")
def check_triage(answers: Any) -> Verdict:
    """Exercise 0.2: ``{case: "acceptance" | "output"}`` for every case of :data:`TRIAGE_CASES`."""
    costs = ("acceptance", "output")
    answers = mapping(answers, TRIAGE_CASES, lambda cost: choice(cost, costs, "a cost"),
                      "a dict with every key of story.TRIAGE_CASES, each mapped to 'acceptance' or 'output'")
    wrong = [case for case, route in TRIAGE_CASES.items() if answers[case] != triage(route)]
    if not wrong:
        return Verdict("0.2", True, "A draft bug costs acceptance; a bug on a target route costs output, target "
                                    "verify included, although only speculation reaches it.")
    return Verdict("0.2", False, f"{len(wrong)} of {len(TRIAGE_CASES)} wrong, e.g. {wrong[0]!r}: ask which worker "
                                 "runs the broken route, and whether the target re-checks what it produces.")


#: The seed's own launch: Gemma-4 31B with its FROZEN_KV MTP draft on the aiter backend.
SEED_LAUNCH = {"model": "gemma4-31b", "server_args": "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP"}


def pr_fixed_rows(model: str = SEED_LAUNCH["model"], server_args: str = SEED_LAUNCH["server_args"]
                  ) -> list[dict[str, Any]]:
    """What PR #38756 fixed, from the audit of one launch at ``before-38756`` and at SGLang 0.5.23: one row per
    (worker, mode) whose sliding layers route differently, with kernel, page table, keys and the kit's verdict."""
    reports = {version: audit.to_json(audit.audit(Launch.from_inputs(model=model, server_args=server_args,
                                                                      sglang_version=version)))
               for version in (BEFORE_38756, SGLANG_VERSION)}
    sliding = {version: {(r["worker"], r["mode"]): r for r in report["routes"] if r["kind"] == "sliding"}
               for version, report in reports.items()}
    rows = []
    for key, old in sliding[BEFORE_38756].items():
        new = sliding[SGLANG_VERSION][key]
        if (old["kernel"], old["page_table"], old["kit"]) == (new["kernel"], new["page_table"], new["kit"]):
            continue
        rows.append({"worker": key[0], "mode": key[1],
                     **{f"{field}_{tag}": route[field] for tag, route in (("before", old), ("after", new))
                        for field in ("kernel", "page_table", "keys", "kit")}})
    return rows
