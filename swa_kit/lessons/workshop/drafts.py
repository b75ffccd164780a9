"""Notebook 03, draft and target sharing pools: which SWA-pool resolver breaks which draft, and the triage rule
read backwards (from a symptom to the broken worker).
"""

from __future__ import annotations

from typing import Any

from swa_kit.engine.resolver import decision_table
from swa_kit.lessons.workshop.verdict import Verdict, check, choice, mapping


def resolvers_that_break(algorithm: str) -> dict[str, str]:
    """Exercise 3.1: ``{resolver: what goes wrong}`` for a draft of ``algorithm`` on a hybrid-SWA model."""
    return {r["resolver"]: r["consequence"] for r in decision_table()
            if r["model"] == "hybrid_swa" and r["role"] == "draft" and r["algorithm"] == algorithm
            and not r["correct"]}


@check("3.1")
def check_resolver_breaks(answers: Any) -> Verdict:
    """Exercise 3.1: ``{"EAGLE": resolver, "FROZEN_KV_MTP": resolver}``, the resolver that breaks each draft."""
    algorithms, resolvers = ("EAGLE", "FROZEN_KV_MTP"), ("legacy", "naive", "fixed")
    answers = mapping(answers, algorithms, lambda r: choice(r, resolvers, "a resolver"),
                      "a dict {'EAGLE': resolver, 'FROZEN_KV_MTP': resolver}, each 'legacy', 'naive' or 'fixed'")
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


@check("3.2")
def check_which_worker(answers: Any) -> Verdict:
    """Exercise 3.2: ``{symptom: "draft" | "target" | "neither"}`` for every report in :data:`SYMPTOMS`.

    "neither" is the seed's evidence: an unchanged accuracy rules out a target bug, and says nothing
    about the draft (acceptance says that).
    """
    workers = ("draft", "target", "neither")
    answers = mapping(answers, SYMPTOMS, lambda w: choice(w, workers, "a worker"),
                      "a dict with every key of drafts.SYMPTOMS, each mapped to 'draft', 'target' or 'neither'")
    wrong = [symptom for symptom, worker in SYMPTOMS.items() if answers[symptom] != worker]
    if not wrong:
        return Verdict("3.2", True, "Output changed -> target; only speed (or a fault in the draft's read) -> draft; "
                                    "unchanged output shows the target is intact.")
    return Verdict("3.2", False, f"{len(wrong)} of {len(SYMPTOMS)} wrong, e.g. {wrong[0]!r}: did the *output* "
                                 "change (target), or only how fast it came (draft)?")
