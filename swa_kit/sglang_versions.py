"""The SGLang releases the kit mirrors: the one place their names are written.

The kit's tables, pools, routes and guards read SGLang :data:`SGLANG_VERSION`, which carries SGLang PR #38756
(``_resolve_swa_kv_pool`` and the paged-decode guard ``_reject_paged_decode_sliding_window``). The kit can also
plan a launch on the release before that PR (:data:`BEFORE_38756`), which has neither, to show what ran silently
wrong there.

Other fixes to SGLang's sliding-window code are modelled the same way, one PR at a time: ``before-<N>`` is
SGLang :data:`SGLANG_VERSION` with the change of PR #N (one of :data:`REVERTIBLE_FIXES`) undone as the kit models
it, and nothing else. That is how a known bug whose release is not on the package index is replayed. Every version
the code compares, offers as a choice or prints comes from here; docstrings may cite "SGLang 0.5.23 file X" as
prose.
"""

from __future__ import annotations

#: The SGLang release whose code the kit mirrors (and whose wheel CI installs).
SGLANG_VERSION = "0.5.23"

#: The fixes the kit can undo, by PR number (``sgl-project/sglang`` unless the text says otherwise): what
#: ``before-<N>`` changes in the kit's model of SGLang :data:`SGLANG_VERSION`.
REVERTIBLE_FIXES: dict[int, str] = {
    38756: "no SWA-pool resolver, no paged-decode guard",
    33974: "--enable-unified-memory refuses DSPARK (its linear chain on the unified pool)",
    29622: "the hybrid-SWA pool configurators leave an EAGLE / STANDALONE draft's layers out of the KV budget",
    17630: "an EAGLE-family draft's pool takes the token count before the hybrid-SWA adjustment",
    25103: "trtllm_mha resolves the target's SWA pool (the allocator's) for an EAGLE draft too",
    26966: "trtllm_mha resolves the SWA pool from the worker's own pool only (a FROZEN_KV MTP draft's is a dummy)",
    27491: "trtllm_mha resolves the allocator's SWA pool for every draft, EAGLE's too (#26966 without its exception)",
    34924: "DFLASH-family decode frees no out-of-window SWA slot (0.5.23 has the change this PR proposed)",
    38757: "aiter prefill and extend run CK mha_batch_prefill_func even with unified_attention on",
    38758: "Gemma-4's backend allow-list lacks aiter",
    25547: "Gemma-4's default backend replaces any --attention-backend given, and no allow-list refuses one",
    26147: "Gemma-4's model file passes its whole window W as sliding_window_size, not W - 1",
    18970: "trtllm_mha gives sliding layers no SWA page table (they index the SWA pool with full-pool slot ids)",
    12003: "Llama-4's backend allow-list lacks trtllm_mha",
    2170: "ROCm/aiter PR #2170 (in the aiter SGLang 0.5.23 installs): CK batch prefill picks its masked module "
          "where its kernel computes no mask",
}


def before(pr: int) -> str:
    """The version name for SGLang :data:`SGLANG_VERSION` with PR #``pr``'s fix undone."""
    if pr not in REVERTIBLE_FIXES:
        raise KeyError(f"PR #{pr} is not a fix the kit models (one of {sorted(REVERTIBLE_FIXES)})")
    return f"before-{pr}"


#: The release before SGLang PR #38756: no SWA-pool resolver, no paged-decode guard.
BEFORE_38756 = before(38756)
#: The versions a launch may name (``--sglang-version``), the default first.
SGLANG_VERSIONS = (SGLANG_VERSION, *(before(pr) for pr in sorted(REVERTIBLE_FIXES, reverse=True)))


def has_fix(version: str, pr: int) -> bool:
    """Whether SGLang ``version`` has PR #``pr``'s fix (every version but ``before-<pr>`` has it)."""
    return version != before(pr)


def versions_help() -> str:
    """``--sglang-version``'s help: the release the kit mirrors, and what each ``before-<N>`` undoes."""
    undone = "; ".join(f"{before(pr)}: {what}" for pr, what in sorted(REVERTIBLE_FIXES.items(), reverse=True))
    return f"{SGLANG_VERSION}, or before-<N>, {SGLANG_VERSION} with PR #N's fix undone ({undone})"


def reverted_fix(version: str) -> int | None:
    """The PR whose fix ``version`` undoes (``before-<N>`` gives N), or None for SGLang :data:`SGLANG_VERSION`."""
    return next((pr for pr in REVERTIBLE_FIXES if version == before(pr)), None)


def has_pr_38756(version: str) -> bool:
    """Whether SGLang ``version`` has PR #38756's fixed resolver and paged-decode guard."""
    return has_fix(version, 38756)
