"""The kinds of failure the known-bugs corpus names, and how each audit shows them in its findings.

A corpus entry (:mod:`swa_kit.measure.bugs`) names the class its thread shows; :func:`finding_classes` reads the
classes an audit's finding shows from its severity and wording, for the SGLang audit and the vLLM one alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.measure.audit import Finding
from swa_kit.measure.vllm_drafter_audit import MISROUTED, NEVER_ADMITTED

#: The finding that stands for the audit's answer to a launch SGLang refuses at start-up (one line, exit 2).
REFUSAL_TITLE = "SGLang refuses this launch at start-up"


@dataclass(frozen=True)
class FindingClass:
    """A kind of failure: how the audit shows it (severity and the wording of its finding), or what it lacks."""

    name: str
    what: str
    severity: str | None = None  # None: the audit cannot raise this class yet
    markers: tuple[str, ...] = ()  # text of the finding's title or detail that marks the class
    lacks: str = ""


FINDING_CLASSES: dict[str, FindingClass] = {c.name: c for c in (
    FindingClass("untranslated-slots", "a sliding layer's SWA buffer is indexed with untranslated full-pool slot "
                 "ids", "wrong", ("untranslated full-pool slot ids",)),
    FindingClass("window-not-passed", "a sliding layer reaches a kernel that gets no window and attends the whole "
                 "context", "wrong", ("takes no window", "gets no window")),
    FindingClass("one-key-short", "a sliding layer attends W - 1 keys where the model means W", "one-short",
                 ("one key short",)),
    FindingClass("swa-pool-too-small", "the SWA pool is below the window plus a page: SGLang cannot admit a "
                 "request", "raises", ("the SWA pool is too small",)),
    FindingClass("mistranslated-slots", "an EAGLE draft that owns a full-only pool reads it through the target's "
                 "full->SWA mapping", "wrong", ("SWA-translated slot ids would index a full-size buffer",)),
    FindingClass("draft-pool-smaller", "the draft's full pool is smaller than the target's, so draft KV writes go "
                 "out of bounds", "wrong", ("the draft's full pool is smaller than the target's",)),
    FindingClass("draft-kv-outside-budget", "the draft's KV pool is allocated on top of a budget sized for the "
                 "target alone", "raises", ("the draft's KV pool is allocated outside the KV budget",)),
    FindingClass("swa-eviction", "out-of-window SWA slots are never freed, or freed twice, at run time",
                 "memory", ("out-of-window SWA slots are never freed",)),
    FindingClass("window-with-sinks", "attention sinks and a window together in one kernel give wrong output",
                 lacks="the audit models no attention sinks and does not plan the deterministic Triton path"),
    FindingClass("window-too-wide", "a model file passes W where SGLang's convention wants W - 1: one key too "
                 "many", "one-short", ("one key too many",)),
    FindingClass("ck-head-dim-cap", "aiter's CK prefill refuses head_dim over 256", "raises",
                 ("supports a head dimension of at most",)),
    FindingClass("startup-refusal", "SGLang refuses the launch at start-up (a model's backend allow-list)",
                 "raises", (REFUSAL_TITLE,)),
    FindingClass("tree-window-by-row", "an EAGLE tree's drafts get their window bound by flattened row, not "
                 "depth: a draft past a sibling's branch attends fewer keys than meant", "wrong", ("not its depth",)),
    FindingClass("backend-replaced", "SGLang runs another attention backend than the one the flags give, and "
                 "refuses nothing", "info", ("SGLang replaces the attention backend given",)),
    FindingClass("ck-window-dispatch", "aiter's batch prefill loads a masked module where its kernel computes "
                 "no mask, and fails", "raises", ("invalid argument for batch_prefill",)),
    FindingClass("verify-as-one-token", "a speculative verify step's query tokens reach a decode kernel told "
                 "max_seqlen_q=1, which attends them as one", "wrong",
                 ("draft tokens are attended as if they were one",)),
    FindingClass("local-sized-as-full", "with vLLM's hybrid KV-cache manager off, sliding (and chunked-local) "
                 "layers are sized for the whole context", "memory", ("pay for the whole context",)),
    FindingClass("shuffled-kv-window", "with aiter's shuffled KV layout, vLLM's ROCM_AITER_FA stops at an assertion "
                 "on a sliding-window, sinks or multi-token decode", "raises",
                 ("Shuffle KV cache layout is not supported",)),
    FindingClass("drafter-wrong-block-table", "a drafter layer's KV is written through another KV-cache group's "
                 "block table than its own", "wrong", (MISROUTED,)),
    FindingClass("admission-whole-sequence", "admission charges a drafter's sliding group for the whole prompt, "
                 "so a request the pool holds waits until it times out", "raises", (NEVER_ADMITTED,)),
)}


def finding_classes(finding: Finding) -> frozenset[str]:
    """The classes one finding shows (a route finding may join several problems)."""
    text = f"{finding.title}\n{finding.detail}"
    return frozenset(c.name for c in FINDING_CLASSES.values()
                     if c.severity == finding.severity and any(m in text for m in c.markers))
