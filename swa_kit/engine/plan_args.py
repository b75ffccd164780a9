"""What :func:`swa_kit.engine.routing.plan` accepts: forward modes, backends, and one check of its arguments."""

from __future__ import annotations

from swa_kit.engine.resolver import RESOLVERS
from swa_kit.engine.spec_algorithms import PLANNED, SpeculativeAlgorithm
from swa_kit.errors import UsageError
from swa_kit.sglang_versions import SGLANG_VERSIONS

#: Forward modes the planner knows: SGLang's EXTEND (without / with a cached prefix), DECODE,
#: TARGET_VERIFY, DRAFT_EXTEND_V2 and the draft worker's multi-step DECODE.
MODES = ("prefill", "extend", "decode", "verify", "draft_extend", "draft_decode")
#: SGLang attention backends the planner routes.
BACKENDS = ("aiter", "triton", "trtllm_mha")


def check_plan_args(mode: str, spec: str, topk: int, worker: str, resolver: str, backend: str, version: str) -> None:
    """Refuse (:class:`UsageError`, naming the value) an argument combination the planner cannot route."""
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    if spec not in PLANNED:
        raise UsageError(f"unknown speculative algorithm {spec!r}; one of {', '.join(PLANNED)}")
    if resolver not in RESOLVERS:
        raise UsageError(f"unknown resolver {resolver!r}; one of {', '.join(RESOLVERS)}")
    if backend not in BACKENDS:
        raise UsageError(f"attention backend {backend!r}: the planner routes {', '.join(BACKENDS)}")
    if version not in SGLANG_VERSIONS:
        raise UsageError(f"SGLang version {version!r}: one of {', '.join(SGLANG_VERSIONS)}")
    if worker not in ("target", "draft"):
        raise UsageError(f"worker {worker!r}: 'target' or 'draft'")
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise UsageError(f"topk {topk!r}: speculative topk is an int >= 1")
    needs_spec = mode in ("verify", "draft_extend", "draft_decode") or worker == "draft"
    if needs_spec and spec == "none":
        raise UsageError(f"mode {mode!r} / worker {worker!r} happens only with speculative decoding: pass a spec "
                         f"algorithm ({', '.join(a for a in PLANNED if a != 'none')})")
    if mode.startswith("draft_") and worker != "draft":
        raise UsageError(f"mode {mode!r} runs on the draft worker: pass worker='draft'")
    if mode == "verify" and worker != "target":
        raise UsageError("target verify runs on the target worker: pass worker='target'")
    if SpeculativeAlgorithm.from_string(spec).traits.single_chain and topk != 1:
        raise UsageError(f"{spec.upper()} drafts a single chain: topk must be 1, got {topk}")
