"""The ways out the kit recommends when a sliding layer cannot run right, each with what it changes in a launch
and what it still costs.

One record per way out, so the guard's messages (:mod:`swa_kit.engine.routing`), the docs and the notebooks
print the same words, and a test applies each one to the launch it is recommended for (an environment
variable, server arguments or an SGLang release) and holds the audit of the result against the cost stated
here. None of them reaches the window the model was trained with on SGLang 0.5.23: the unified call sites
pass ``(sws - 1, 0)`` and the Triton backend's decode keeps ``sws`` keys, each one key short. The fix that
would attend all ``W`` keys is a code change (:data:`UNIFIED_CALL_SITE_FIX`), not a way out of a launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swa_kit.sglang_versions import SGLANG_VERSION


@dataclass(frozen=True)
class WayOut:
    """One recommended way out: how to take it, and the cost that remains once it is taken ("" for none)."""

    name: str
    text: str  # the words every message prints; names ``cost`` where there is one
    cost: str
    env: dict[str, str] = field(default_factory=dict)
    server_args: str = ""  # flags added to (or replacing the same flags of) the launch
    drops: tuple[str, ...] = ()  # switches (flags without a value) the way out removes from the launch
    sglang_version: str | None = None  # the release that carries it (None: any)

    def __post_init__(self) -> None:
        if self.cost and self.cost not in self.text:
            raise ValueError(f"way out {self.name!r}: its text must name its cost {self.cost!r}")

    def applied_to(self, server_args: str, env: dict[str, str]) -> tuple[str, dict[str, str]]:
        """A launch's server arguments and environment with this way out taken (its flags replace the same ones)."""
        kept = " ".join(word for word in server_args.split() if word not in self.drops)
        return _merge_flags(kept, self.server_args), {**env, **self.env}


#: Switches a launch may hold among its '--flag value' pairs (SGLang's store_true flags the ways out touch).
SWITCHES = ("--disable-hybrid-swa-memory",)


def _flag_pairs(args: str) -> dict[str, str | None]:
    words, pairs = args.split(), dict[str, str | None]()
    while words:
        flag = words.pop(0)
        if flag in SWITCHES:
            pairs[flag] = None
        elif flag.startswith("--") and words and not words[0].startswith("--"):
            pairs[flag] = words.pop(0)
        else:
            raise ValueError(f"server args {args!r}: give '--flag value' pairs (or the switches {', '.join(SWITCHES)})")
    return pairs


def _merge_flags(base: str, extra: str) -> str:
    merged = {**_flag_pairs(base), **_flag_pairs(extra)}
    return " ".join(flag if value is None else f"{flag} {value}" for flag, value in merged.items())


ONE_KEY_SHORT = "one key short"

UNIFIED_ATTN = WayOut(
    "unified-attn",
    "set SGLANG_USE_AITER_UNIFIED_ATTN=1 (unified_attention takes a window, but SGLang passes it "
    f"(sws - 1, 0): each unified call site then attends W - 1 keys, {ONE_KEY_SHORT}; measure it with swa-kit probe)",
    ONE_KEY_SHORT, env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})

TRITON_BACKEND = WayOut(
    "triton-backend",
    "select a different attention backend: --attention-backend triton (its decode keeps the newest sws keys, "
    f"counting the query, so every sliding layer decodes {ONE_KEY_SHORT}: SGLang's triton_backend.py "
    "update_sliding_window_buffer, PR #32087)",
    ONE_KEY_SHORT, server_args="--attention-backend triton")

UNIFIED_VERIFY = WayOut(
    "unified-verify",
    "verify through unified_attention: speculative topk=1 (--speculative-eagle-topk 1) with "
    "SGLANG_AITER_UNIFIED_VERIFY=1 (plus SGLANG_USE_AITER_UNIFIED_ATTN=1 without a hybrid pool); it gives up tree "
    f"drafting (fewer accepted tokens) and verifies {ONE_KEY_SHORT} like every unified call site",
    ONE_KEY_SHORT, env={"SGLANG_AITER_UNIFIED_VERIFY": "1", "SGLANG_USE_AITER_UNIFIED_ATTN": "1"},
    server_args="--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")

FIXED_RESOLVER = WayOut(
    "fixed-resolver",
    f"run an SGLang with PR #38756 ({SGLANG_VERSION} has it): its _resolve_swa_kv_pool returns the allocator's "
    f"SWAKVPool for a FROZEN_KV MTP draft, whose sliding layers then take the unified route, {ONE_KEY_SHORT}",
    ONE_KEY_SHORT, sglang_version=SGLANG_VERSION)

KEEP_HYBRID_POOL = WayOut(
    "keep-hybrid-pool",
    "drop --disable-hybrid-swa-memory: SGLang builds the SWA pool again, which saves KV memory and makes the aiter "
    f"backend decode sliding layers through unified_attention at (sws - 1, 0), {ONE_KEY_SHORT}",
    ONE_KEY_SHORT, drops=("--disable-hybrid-swa-memory",))
#: Every way out the kit's messages recommend, by name.
WAYS_OUT: dict[str, WayOut] = {w.name: w for w in (UNIFIED_ATTN, TRITON_BACKEND, UNIFIED_VERIFY, FIXED_RESOLVER,
                                                   KEEP_HYBRID_POOL)}

#: The fix that would attend all W keys at aiter's four unified call sites (extend, decode, verify, draft extend):
#: pass ``(sws, 0)`` instead of ``(sws - 1, 0)``. Not in SGLang 0.5.23; a change to aiter_backend.py, not a flag.
UNIFIED_CALL_SITE_FIX = {"before": "window_size=(sws - 1, 0)", "after": "window_size=(sws, 0)",
                         "call_sites": ("extend", "decode", "verify", "draft_extend"),
                         "file": "python/sglang/srt/layers/attention/aiter_backend.py",
                         "in_sglang": f"not in SGLang {SGLANG_VERSION}"}
