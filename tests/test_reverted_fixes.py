"""The fixes the kit can undo (``before-<N>``): each changes exactly its rule, read against SGLang's own code."""

from __future__ import annotations

from pathlib import Path

import pytest

from swa_kit.errors import LaunchRefusedError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch
from swa_kit.launch.refusals import GEMMA4_BACKENDS, LLAMA4_BACKENDS, gemma4_backends, llama4_backends
from swa_kit.measure.audit import audit
from swa_kit.sglang_versions import REVERTIBLE_FIXES, SGLANG_VERSION, SGLANG_VERSIONS, before, has_fix, reverted_fix


def _launch(model: str, args: str = "", version: str = SGLANG_VERSION, platform: str = "rocm-gfx950") -> Launch:
    return Launch.from_inputs(model=model, server_args=args, sglang_version=version, platform=platform)


def test_every_revertible_fix_is_a_version_and_undoes_only_itself():
    for pr in REVERTIBLE_FIXES:
        version = before(pr)
        assert version in SGLANG_VERSIONS and reverted_fix(version) == pr
        assert not has_fix(version, pr) and all(has_fix(version, other) for other in REVERTIBLE_FIXES if other != pr)
    assert reverted_fix(SGLANG_VERSION) is None
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


def test_llama4_allow_list_gains_trtllm_mha_with_pr_12003():
    """model_hook.py handle_model_specific_adjustments: Llama-4's set holds trtllm_mha since PR #12003; it tests the
    resolved attention_backend only, and not on the CPU device."""
    assert llama4_backends(SGLANG_VERSION) == LLAMA4_BACKENDS
    assert set(LLAMA4_BACKENDS) - set(llama4_backends(before(12003))) == {"trtllm_mha"}
    blackwell = "--attention-backend trtllm_mha"
    decide(_launch("llama4-scout", blackwell, platform="cuda-sm100"))
    with pytest.raises(LaunchRefusedError, match="Llama-4 runs only on fa3, aiter, triton, ascend, intel_xpu, got "
                                                 "attention_backend trtllm_mha.*without PR #12003.*triton$"):
        decide(_launch("llama4-scout", blackwell, before(12003), platform="cuda-sm100"))
    for platform, way in (("cuda-sm100", "trtllm_mha"), ("cuda-sm90", "fa3"), ("rocm-gfx942", "aiter")):
        with pytest.raises(LaunchRefusedError, match=f"Llama-4 runs only on .*got attention_backend flashinfer.*"
                                                     f"use --attention-backend {way}$"):
            decide(_launch("llama4-scout", "--attention-backend flashinfer", platform=platform))
    decide(_launch("llama4-scout", "--attention-backend flashinfer", platform="cpu"))  # SGLang skips it on CPU
    # the split is not checked: only attention_backend is
    split = "--attention-backend fa3 --decode-attention-backend flashinfer"
    decide(_launch("llama4-scout", split, platform="cuda-sm90"))
    with pytest.raises(LaunchRefusedError, match="GPT-OSS runs only on"):  # its own list (model_hook.py)
        decide(_launch("gpt-oss-20b", "--attention-backend flashinfer", platform="cuda-sm90"))


def test_gemma4_default_replaces_the_given_backend_before_pr_25547():
    """gemma4.py _gemma4_overrides sets the default only when no backend is set, and model_hook.py refuses one off
    the list (PR #25547); before it the default replaced the given backend and nothing was refused."""
    def backends(args: str, version: str) -> tuple[str, str]:
        decisions = decide(_launch("gemma4-31b", args, version, platform="cuda-sm100"))
        return decisions.prefill_attention_backend.value, decisions.decode_attention_backend.value

    assert backends("--attention-backend triton", SGLANG_VERSION) == ("triton", "triton")
    assert backends("--attention-backend triton", before(25547)) == ("trtllm_mha", "trtllm_mha")
    assert backends("--attention-backend flashinfer", before(25547)) == ("trtllm_mha", "trtllm_mha")
    with pytest.raises(LaunchRefusedError, match="Gemma-4 runs only on"):
        decide(_launch("gemma4-31b", "--attention-backend flashinfer", platform="cuda-sm100"))
    replaced = "SGLang replaces the attention backend given"
    before_fix = audit(_launch("gemma4-31b", "--attention-backend flashinfer", before(25547), "cuda-sm100"))
    assert [f.detail.split(";")[0] for f in before_fix.findings if f.title == replaced] == \
        ["the flags ask for prefill flashinfer, decode flashinfer"]
    # a backend SGLang keeps, or a split whose sides agree (attention_backend takes them), is no finding
    for args in ("--attention-backend triton", "--prefill-attention-backend triton --decode-attention-backend triton",
                 ""):
        kept = audit(_launch("gemma4-31b", args, platform="cuda-sm100"))
        assert all(f.title != replaced for f in kept.findings), args


def test_unified_memory_admits_dspark_with_pr_33974():
    """kv_cache_hook.py handle_unified_memory_pool lists DSPARK among its algorithms since PR #33974."""
    args = "--enable-unified-memory --attention-backend triton --speculative-algorithm DSPARK"
    dspark = Path(__file__).parent / "data" / "differential" / "draft-dspark-2l.json"
    served = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=args, platform="cuda-sm100",
                                       draft_hf_config=dspark))
    assert served.unified_memory.value["draft_lanes"] == {"full": 2}  # on 0.5.23 its draft fuses into the entries
    with pytest.raises(LaunchRefusedError, match="takes --speculative-algorithm EAGLE, EAGLE3, DFLASH only, got "
                                                 "DSPARK .without PR #33974"):
        audit(_launch("gpt-oss-20b", args, before(33974), "cuda-sm100"))
    eagle = "--enable-unified-memory --attention-backend triton --speculative-algorithm EAGLE"
    draft = Path(__file__).parent / "data" / "differential" / "draft-llama-2l.json"  # the fused draft's config
    audit(Launch.from_inputs(model="gpt-oss-20b", server_args=eagle, sglang_version=before(33974),
                             platform="cuda-sm100", draft_hf_config=draft))  # only DSPARK is taken back


def _rows(version: str, args: str = "--attention-backend aiter", env: dict | None = None) -> dict:
    """(mode, kind) -> (kernel, what the server raises) for Gemma-4 (sliding head_dim 256, full 512) on aiter."""
    launch = Launch.from_inputs(model="gemma4-31b", server_args=args, sglang_version=version, platform="rocm-gfx950",
                                env=env)
    plans = decide(launch).routes
    return {(mode, e.kind): (e.kernel, e.sglang_verdict) for (_, mode), p in plans.items() for e in p.layers}


def test_ck_prefill_refuses_head_dims_over_256_only():
    """mha_batch_prefill_func asserts head_dim <= 256 (SGLang's _forward_extend_unified docstring says so)."""
    from swa_kit.engine.call_sites import CK_MAX_HEAD_DIM
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


def test_before_26147_gemma4_passes_its_whole_window():
    """gemma4_causal.py get_attention_sliding_window_size: 0.5.23 returns sliding_window - 1; before PR #26147, W."""
    from swa_kit.models.configs import as_of_version, load_model
    model = load_model("gemma4-31b")
    undone = as_of_version(model, before(26147))
    for label, kind in model.kinds.items():
        was = undone.kinds[label]
        if kind.attention == "sliding":
            assert (kind.sliding_window_size, was.sliding_window_size) == (kind.window.keys - 1, kind.window.keys)
            assert was.window == kind.window  # the window meant is the model's, whatever the file passes
        else:
            assert was == kind
    assert "before PR #26147" in undone.sources["sliding_window_size"]
    assert as_of_version(undone, before(26147)) == undone and as_of_version(model, SGLANG_VERSION) is model
    for other in ("gpt-oss-20b", "gemma3-27b"):  # their files pass W - 1 on every version the kit knows
        assert as_of_version(load_model(other), before(26147)) == load_model(other)


def test_before_26147_triton_extend_attends_one_key_too_many():
    """Triton extend masks q <= k + sws: W + 1 keys with sws = W. The runner's window stays W - 1
    (gemma4_causal.py get_attention_sliding_window_size; the kit takes it as unchanged by the PR), and window layers
    read its rail: decode keeps the newest W - 1 keys, an extend's first query sees W (tests/test_triton_rail.py)."""
    from swa_kit.measure.audit import audit
    report = audit(_launch("gemma4-31b", "--attention-backend triton", before(26147), "cuda-sm90"))
    rows = {(mode, e.kind): e.effective_keys for (_, mode), p in report.decisions.routes.items() for e in p.layers}
    assert (rows["prefill", "sliding"], rows["extend", "sliding"], rows["decode", "sliding"]) == (1025, 1024, 1023)
    assert [f.title for f in report.findings if f.severity == "one-short"] == [
        "sliding layers attend 1025 of 1024 keys (one key too many)",
        "sliding layers attend 1023 of 1024 keys (one key short)"]
    fixed = audit(_launch("gemma4-31b", "--attention-backend triton", SGLANG_VERSION, "cuda-sm90"))
    assert not any("too many" in f.title for f in fixed.findings)


def _trtllm(version: str, args: str = "") -> dict:
    launch = Launch.from_inputs(model="gpt-oss-20b", server_args=f"--attention-backend trtllm_mha {args}",
                                sglang_version=version, platform="cuda-sm100")
    return {(worker, mode, e.kind): e for (worker, mode), p in decide(launch).routes.items() for e in p.layers}


def test_trtllm_mha_attends_the_window_on_the_swa_page_table():
    """window_left = sws: FlashInfer keeps keys i - sws .. i, sws + 1 = W; SWA layers read the SWA page table."""
    rows = _trtllm(SGLANG_VERSION, "--speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 2 "
                   "--speculative-num-draft-tokens 3")
    for (worker, mode, kind), e in rows.items():
        assert e.kernel == ("trtllm_batch_context_with_kv_cache" if mode in ("prefill", "extend") else
                            "trtllm_batch_decode_with_kv_cache"), (worker, mode)
        assert e.sglang_verdict is None and e.kit_verdict is None, (worker, mode, kind)
        if worker == "target" and kind == "sliding":
            assert (e.window_arg, e.effective_keys, e.intended_keys, e.page_table) == (127, 128, 128, "swa")
    assert rows["target", "decode", "full"].effective_keys is None  # window_left -1 on full layers


def test_before_18970_trtllm_mha_keeps_the_window_but_reads_swa_with_full_slots():
    """0.5.8.post1, the last release before the PR, passes window_left=layer.sliding_window_size at every kernel call
    (tests/test_bugs_releases.py reads it); the PR added the SWA page table only."""
    rows = _trtllm(before(18970), "--speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 2 "
                   "--speculative-num-draft-tokens 3")
    fixed = _trtllm(SGLANG_VERSION, "--speculative-algorithm EAGLE --speculative-eagle-topk 1 "
                    "--speculative-num-steps 2 --speculative-num-draft-tokens 3")
    for mode in ("prefill", "extend", "decode", "verify"):
        sliding, full = rows["target", mode, "sliding"], rows["target", mode, "full"]
        assert (sliding.window_arg, sliding.effective_keys) == (fixed["target", mode, "sliding"].window_arg,
                                                                 fixed["target", mode, "sliding"].effective_keys)
        assert (sliding.window_arg, sliding.effective_keys, sliding.page_table, sliding.buffer) == (127, 128, "full",
                                                                                                   "swa")
        assert "untranslated full-pool slot ids" in sliding.kit_verdict.problem
        assert "no window" not in sliding.kit_verdict.problem  # the slots alone are wrong
        assert "PR #18970" in sliding.kit_verdict.ways_out[0] and full.kit_verdict is None


def _dispatch(version: str, model: str = "gpt-oss-20b", args: str = "--attention-backend aiter",
              env: dict | None = None) -> dict:
    launch = Launch.from_inputs(model=model, server_args=args, sglang_version=version, env=env)
    return {(mode, e.kind): e for (_, mode), p in decide(launch).routes.items() for e in p.layers}


def test_before_aiter_2170_ck_prefill_fails_on_windowed_layers_only():
    """ROCm/aiter #2170: the kernel drops window_left >= max_seqlen_k (no mask), the Python side still loaded the
    masked module: only a windowed CK call (left = sws >= 0) can mismatch."""
    off = "--attention-backend aiter --disable-hybrid-swa-memory"  # no SWA pool: CK extend
    undone, fixed = _dispatch(before(2170), args=off), _dispatch(SGLANG_VERSION, args=off)
    for mode in ("prefill", "extend"):
        sliding, full = undone[mode, "sliding"], undone[mode, "full"]
        assert sliding.kernel == "mha_batch_prefill_func" and sliding.window_arg == (127, -1)
        assert "invalid argument for batch_prefill" in sliding.sglang_verdict.problem and "at most 127 keys" in \
            sliding.sglang_verdict.problem
        assert full.sglang_verdict is None and fixed[mode, "sliding"].sglang_verdict is None
    unified = _dispatch(before(2170))  # the hybrid pool forces unified_attention: no CK call, nothing to dispatch
    assert unified["prefill", "sliding"].kernel == "unified_attention"
    assert unified["prefill", "sliding"].sglang_verdict is None
    shuffled = _dispatch(before(2170), env={"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"})
    assert "invalid argument" in shuffled["prefill", "sliding"].sglang_verdict.problem  # the 5D extend is CK too


@pytest.mark.parametrize("pr", sorted(REVERTIBLE_FIXES))
def test_the_audit_says_which_fix_it_undid(pr):
    from swa_kit.measure.audit import audit
    report = audit(Launch.from_inputs(model="gpt-oss-20b", sglang_version=before(pr)))
    info = [f for f in report.findings if f.where == "version"]
    assert [f.title for f in info] == [f"before-{pr}: PR #{pr} undone"]
    assert not any(f.where == "version" for f in audit(Launch.from_inputs(model="gpt-oss-20b")).findings)
