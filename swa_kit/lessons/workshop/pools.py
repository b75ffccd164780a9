"""Notebook 02, KV pools full vs SWA: the slots a request holds in each pool after decoding, and what the SWA pool
saves per request and at SGLang's default sizing.
"""

from __future__ import annotations

from typing import Any

from swa_kit.engine.workers import build_workers, run_decode
from swa_kit.lessons.workshop.verdict import Verdict, check, integer, number
from swa_kit.models.configs import load_model
from swa_kit.models.memory import Savings, savings


#: Exercise 2.1's request: the notebook's tiny hybrid model (window 4 keys) prefills and then decodes.
DECODE_RUN = {"prompt_len": 6, "decode_steps": 10}


def slots_held(prompt_len: int = DECODE_RUN["prompt_len"], decode_steps: int = DECODE_RUN["decode_steps"]) -> \
        dict[str, int]:
    """Exercise 2.1: full-pool and SWA-pool slots the request holds after its last decode step."""
    counts = run_decode(build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=24),
                        prompt_len, decode_steps)[-1].counts(0)
    return {"full": counts["full_live"], "swa": counts["swa_live"]}


@check("2.1")
def check_slots_held(full: Any, swa: Any) -> Verdict:
    """Exercise 2.1: the request's full-pool and SWA-pool slots after :data:`DECODE_RUN`."""
    full = integer(full, "the full pool's slot count, a whole number")
    swa = integer(swa, "the SWA pool's slot count, a whole number")
    truth = slots_held()
    if (full, swa) == (truth["full"], truth["swa"]):
        return Verdict("2.1", True, "The full pool grows with the context; the SWA pool stays at the window.")
    hint = ("the full pool keeps every token of the request" if full != truth["full"] else
            "the SWA pool keeps only the tokens a query can still attend")
    return Verdict("2.1", False, f"({full}, {swa}) is off: {hint}.")


def swa_pool_saving(model: str = "gpt-oss-20b", context: int = 128 * 1024) -> Savings:
    """Exercise 2.2: what the SWA pool saves for one request of ``context`` tokens (perfect eviction)."""
    return savings(load_model(model), (context,))[0]


@check("2.2")
def check_hybrid_saving(minimum_percent: Any, default_percent: Any, model: str = "gpt-oss-20b",
                        context: int = 128 * 1024) -> Verdict:
    """Exercise 2.2: the per-request minimum and SGLang's default saving, in percent (within 1 point each)."""
    minimum_percent = number(minimum_percent, "the per-request minimum saving as a number of percent")
    default_percent = number(default_percent, "SGLang's default saving as a number of percent")
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
