"""The vLLM release the kit mirrors, and the fixes to it the kit can undo: the one place their names are written.

The kit's vLLM rules (``swa_kit/launch/vllm_*.py``) read vLLM :data:`VLLM_VERSION`. A known vLLM bug whose release
the kit does not model is replayed at ``before-<N>``: vLLM :data:`VLLM_VERSION` with the change of PR #N (one of
:data:`REVERTIBLE_FIXES`, ``vllm-project/vllm`` unless the text says otherwise) undone as the kit models it, and
nothing else, as :mod:`swa_kit.sglang_versions` does for SGLang. Each undone change was read in the wheels on the
package index on both sides of its PR (the corpus entries' evidence names the releases and lines).
"""

from __future__ import annotations

#: The vLLM release whose code the kit mirrors (the newest on the package index; CI's vLLM venv installs it).
VLLM_VERSION = "0.34.0"

#: The fixes the kit can undo, by PR number: what ``before-<N>`` changes in the kit's model of vLLM
#: :data:`VLLM_VERSION`.
REVERTIBLE_FIXES: dict[int, str] = {
    41847: "a --kv-transfer-config turns the hybrid KV-cache manager off whatever its connector, one that supports "
           "the manager (SupportsHMA) included",
    29234: "ROCM_AITER_FA decodes a sliding layer's single-token steps with aiter's paged_attention_v1 and no "
           "window (the backend before its sliding-window support)",
    32877: "ROCM_AITER_FA sends a multi-token decode (a speculative verify step) to its single-token paged decode, "
           "told max_seqlen_q=1",
    50169: "DFlash writes every drafter layer's context KV through the first drafter group's slot mapping, not "
           "each layer's own group's (0.34.0's per-layer mapping undone; the PR itself is open)",
    55800: "start-up sizes a drafter's sliding-window group for its window while admission charges it the prompt "
           "(0.34.0 sizes both from max_admission_blocks_per_request, merged PR #40946; the thread is open)",
}


def before(pr: int) -> str:
    """The version name for vLLM :data:`VLLM_VERSION` with PR #``pr``'s fix undone."""
    if pr not in REVERTIBLE_FIXES:
        raise KeyError(f"vLLM PR #{pr} is not a fix the kit models (one of {sorted(REVERTIBLE_FIXES)})")
    return f"before-{pr}"


#: The versions a vLLM launch may name (``--vllm-version``), the default first.
VLLM_VERSIONS = (VLLM_VERSION, *(before(pr) for pr in sorted(REVERTIBLE_FIXES, reverse=True)))


def has_fix(version: str, pr: int) -> bool:
    """Whether vLLM ``version`` has PR #``pr``'s fix (every version but ``before-<pr>`` has it)."""
    return version != before(pr)


def versions_help() -> str:
    """``--vllm-version``'s help: the release the kit mirrors, and what each ``before-<N>`` undoes."""
    undone = "; ".join(f"{before(pr)}: {what}" for pr, what in sorted(REVERTIBLE_FIXES.items(), reverse=True))
    return f"{VLLM_VERSION}, or before-<N>, {VLLM_VERSION} with vLLM PR #N's fix undone ({undone})"


def reverted_fix(version: str) -> int | None:
    """The PR whose fix ``version`` undoes (``before-<N>`` gives N), or None for vLLM :data:`VLLM_VERSION`."""
    return next((pr for pr in REVERTIBLE_FIXES if version == before(pr)), None)
