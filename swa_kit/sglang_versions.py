"""The SGLang releases the kit mirrors: the one place their names are written.

The kit's tables, pools, routes and guards read SGLang :data:`SGLANG_VERSION`, which carries SGLang PR #38756
(``_resolve_swa_kv_pool`` and the paged-decode guard ``_reject_paged_decode_sliding_window``). The kit can also
plan a launch on the release before that PR (:data:`BEFORE_38756`), which has neither, to show what ran silently
wrong there. Every version the code compares, offers as a choice or prints comes from here; docstrings may cite
"SGLang 0.5.23 file X" as prose.
"""

from __future__ import annotations

#: The SGLang release whose code the kit mirrors (and whose wheel CI installs).
SGLANG_VERSION = "0.5.23"
#: The release before SGLang PR #38756: no SWA-pool resolver, no paged-decode guard.
BEFORE_38756 = "before-38756"
#: The versions a launch may name (``--sglang-version``), the default first.
SGLANG_VERSIONS = (SGLANG_VERSION, BEFORE_38756)


def has_pr_38756(version: str) -> bool:
    """Whether SGLang ``version`` has PR #38756's fixed resolver and paged-decode guard."""
    return version == SGLANG_VERSION
