"""The fixes the kit can undo (``before-<N>``): each changes exactly its rule, read against SGLang's own code."""

from __future__ import annotations

import pytest

from swa_kit.errors import LaunchRefusedError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch
from swa_kit.launch.refusals import GEMMA4_BACKENDS, gemma4_backends
from swa_kit.sglang_versions import REVERTIBLE_FIXES, SGLANG_VERSION, SGLANG_VERSIONS, before, has_fix, undone_fix


def _launch(model: str, args: str = "", version: str = SGLANG_VERSION, platform: str = "rocm-gfx950") -> Launch:
    return Launch.from_inputs(model=model, server_args=args, sglang_version=version, platform=platform)


def test_every_revertible_fix_is_a_version_and_undoes_only_itself():
    for pr in REVERTIBLE_FIXES:
        version = before(pr)
        assert version in SGLANG_VERSIONS and undone_fix(version) == pr
        assert not has_fix(version, pr) and all(has_fix(version, other) for other in REVERTIBLE_FIXES if other != pr)
    assert undone_fix(SGLANG_VERSION) is None
    with pytest.raises(KeyError, match="not a fix the kit models"):
        before(1)


def test_gemma4_allow_list_gains_aiter_with_pr_38758():
    """model_hook.py handle_model_specific_adjustments: 0.5.23's accepted_backends end with aiter (PR #38758)."""
    assert gemma4_backends(SGLANG_VERSION) == GEMMA4_BACKENDS and "aiter" in GEMMA4_BACKENDS
    assert set(GEMMA4_BACKENDS) - set(gemma4_backends(before(38758))) == {"aiter"}
    decide(_launch("gemma4-31b", "--attention-backend aiter"))  # accepted on 0.5.23
    with pytest.raises(LaunchRefusedError, match="Gemma-4 runs only on.*without PR #38758"):
        decide(_launch("gemma4-31b", "--attention-backend aiter", before(38758)))
    # triton stays allowed, and a model without the allow-list is not touched
    decide(_launch("gemma4-31b", "--attention-backend triton", before(38758)))
    decide(_launch("gpt-oss-20b", "--attention-backend aiter", before(38758)))
