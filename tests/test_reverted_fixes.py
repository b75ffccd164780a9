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


def _rows(version: str, args: str = "--attention-backend aiter", env: dict | None = None) -> dict:
    """(mode, kind) -> (kernel, what the server raises) for Gemma-4 (sliding head_dim 256, full 512) on aiter."""
    launch = Launch.from_inputs(model="gemma4-31b", server_args=args, sglang_version=version, platform="rocm-gfx950",
                                env=env)
    plans = decide(launch).routes
    return {(mode, e.kind): (e.kernel, e.sglang_verdict) for (_, mode), p in plans.items() for e in p.layers}


def test_ck_prefill_refuses_head_dims_over_256_only():
    """mha_batch_prefill_func asserts head_dim <= 256 (SGLang's _forward_extend_unified docstring says so)."""
    from swa_kit.engine.routing import CK_MAX_HEAD_DIM
    assert CK_MAX_HEAD_DIM == 256
    off = _rows(SGLANG_VERSION, "--attention-backend aiter --disable-hybrid-swa-memory")  # no SWA pool: CK extend
    kernel, refused = off["prefill", "full"]
    assert kernel == "mha_batch_prefill_func" and "head_dim 512" in refused.problem
    assert refused.title == "aiter's CK prefill refuses this head dimension"
    assert off["prefill", "sliding"][0] == "mha_batch_prefill_func" and off["prefill", "sliding"][1] is None  # 256
    on = _rows(SGLANG_VERSION, "--attention-backend aiter --disable-hybrid-swa-memory",
               {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    assert on["prefill", "full"] == ("unified_attention", None)  # the way out it names
    shuffled = _rows(SGLANG_VERSION, env={"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"})
    assert "vectorized_5d" in shuffled["prefill", "full"][1].ways_out[0]  # the 5D extend is CK, before unified


def test_before_38757_aiter_extend_runs_ck_even_with_unified_on():
    """aiter_backend.py forward_extend: PR #38757 put `if self.use_triton_unified_attention` before CK prefill."""
    fixed, undone = _rows(SGLANG_VERSION), _rows(before(38757))
    for mode in ("prefill", "extend"):
        assert fixed[mode, "full"] == ("unified_attention", None)
        assert undone[mode, "full"][0] == "mha_batch_prefill_func" and undone[mode, "full"][1] is not None
        assert undone[mode, "sliding"] == ("mha_batch_prefill_func", None)
    assert fixed["decode", "full"] == undone["decode", "full"]  # decode is not this PR's
