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


#: Exercise 3.2's reports: a symptom, and every answer the triage rule read backwards defends. ``draft``: the draft
#: worker; ``target``: a target route every request takes; ``verify``: the target route only speculative decoding
#: reaches; ``neither``: no bug (bf16 or sampling drift, or evidence that rules the target out).
SYMPTOMS: dict[str, tuple[str, ...]] = {
    "after an upgrade, speculative decoding accepts fewer drafted tokens; the greedy text equals the run without it":
        ("draft",),
    "with and without speculative decoding, answers to long prompts drift off topic once they pass the window":
        ("target",),
    "only with EAGLE at topk 4, greedy answers to long prompts part from plain decoding past the window; with "
    "topk 1 they match": ("verify",),
    # a fault only with speculation is on a route only speculation reaches: the draft's (the seed's FROZEN_KV MTP
    # draft), or target verify's (EAGLE topk 4 reads untranslated ids from the SWA buffer); the audit tells which
    "with speculative decoding on, the server stops on an illegal memory access after a few dozen tokens; "
    "without it, it runs": ("draft", "verify"),
    "in bf16, greedy text with speculative decoding differs from plain decoding by a token here and there, short "
    "prompts too; in float32 it does not": ("neither",),
    "with temperature 0.8, answers with speculative decoding differ from answers without it": ("neither",),
    "a benchmark's accuracy with speculative decoding equals the accuracy without it": ("neither",),
}
ROUTES = ("draft", "target", "verify", "neither")


@check("3.2")
def check_which_worker(answers: Any) -> Verdict:
    """Exercise 3.2: ``{symptom: "draft" | "target" | "verify" | "neither"}`` for every report in :data:`SYMPTOMS`.

    A draft bug costs acceptance (or faults); a bug on a target route costs output, target verify included, though
    only speculation reaches it; bf16 and sampling drift are no bugs. A fault only with speculation is defensible
    as either route speculation adds, so both are accepted.
    """
    answers = mapping(answers, SYMPTOMS, lambda route: choice(route, ROUTES, "a route"),
                      f"a dict with every key of drafts.SYMPTOMS, each mapped to one of {', '.join(map(repr, ROUTES))}")
    wrong = [symptom for symptom, accepted in SYMPTOMS.items() if answers[symptom] not in accepted]
    if not wrong:
        return Verdict("3.2", True, "Output changed with and without speculation -> target; only with it -> target "
                                    "verify; only speed, or a fault only with speculation -> draft (or verify: "
                                    "audit the routes); bf16 or sampling drift and an unchanged accuracy -> no bug.")
    return Verdict("3.2", False, f"{len(wrong)} of {len(SYMPTOMS)} wrong, e.g. {wrong[0]!r}: did the *output* "
                                 "change (a target route: every request's, or verify's only with speculation), only "
                                 "how fast it came (draft), or only by numerics or sampling (no bug)?")
