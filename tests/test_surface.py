"""The kit's table of SGLang's SWA surface, and the start-up refusals and notes it gives a launch.

The expected refusals are written out from SGLang 0.5.23's source as the oracle: ``arg_groups/kv_cache_hook.py
handle_unified_memory_pool`` and ``handle_cache_compatibility``, ``mem_cache/kv_cache_configurator.py``,
``arg_groups/speculative_hook.py handle_speculative_decoding``, ``_handle_dspark`` and ``_handle_uno``.
"""

from __future__ import annotations

import json
import random
from dataclasses import fields
from pathlib import Path

import pytest

from swa_kit.cli import main
from swa_kit.engine.call_sites import DECLARED_SITES
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.errors import LaunchRefusedError, NotModelledError, UsageError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch, ServerArgsView
from swa_kit.launch.refusals import dspark_markov_rank
from swa_kit.launch.surface import KINDS, STATUSES, SURFACE, check_surface
from swa_kit.measure.audit import audit

HOOK = "kv_cache_hook.py handle_unified_memory_pool"
DRAFT_LLAMA = Path(__file__).parent / "data" / "differential" / "draft-llama-2l.json"


def _check(args: str, model: str = "gemma4-31b", platform: str = "rocm-gfx942"):
    return check_surface(Launch.from_inputs(model=model, server_args=args, platform=platform))


# -- the table -------------------------------------------------------------------------------------------------

def test_every_entry_has_a_kind_a_status_and_a_reason():
    for (kind, name), entry in SURFACE.items():
        assert (kind, name) == (entry.kind, entry.name) and kind in KINDS, entry
        assert entry.status in STATUSES and len(entry.note) > 20, entry


def test_what_the_kit_reads_is_modelled_and_what_it_models_it_reads():
    read = {f.name for f in fields(ServerArgsView)} - {"not_read", "not_read_values"}
    args = {name: e for (kind, name), e in SURFACE.items() if kind == "server_arg"}
    assert all(args[name].status == "modelled" for name in read if name in args)
    # a modelled argument outside ServerArgsView is read where it applies: check_surface (UNO's LoRA), the draft's
    # decode (the sink), or nowhere the kit's models reach (the prefix tails: DeepSeek-V4's configurator alone)
    assert {n for n, e in args.items() if e.status == "modelled"} - read == \
        {"uno_lora_path", "speculative_draft_sink_size", "swa_prefix_tails"}


def test_no_name_twice_and_the_modelled_backends_are_the_planners():
    from swa_kit.engine.plan_args import BACKENDS
    from swa_kit.launch import surface

    assert len(SURFACE) == sum(len(group) for group in (surface.SERVER_ARGS, surface.SWA_POOLS,
                                                        surface.ATTENTION_BACKENDS, surface.SPEC_ALGORITHMS))
    assert {name for (kind, name), e in SURFACE.items() if kind == "attention_backend" and e.status == "modelled"} \
        == set(BACKENDS)


def test_the_algorithms_are_the_registrys():
    algorithms = {name: e for (kind, name), e in SURFACE.items() if kind == "spec_algorithm"}
    assert set(algorithms) == {a.name for a in SpeculativeAlgorithm}
    # written out: NGRAM alone keeps the "refused" status (it drafts nothing, so no launch is refused for it)
    assert {n for n, e in algorithms.items() if e.status != "modelled"} == {"NGRAM"}


# -- --enable-unified-memory ---------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["frozen_kv_mtp", "standalone", "ngram", "uno"])
def test_unified_memory_refuses_other_algorithms(algorithm):
    extra = " --uno-lora-path /l" if algorithm == "uno" else ""
    with pytest.raises(LaunchRefusedError, match=f"takes --speculative-algorithm EAGLE, EAGLE3, DFLASH, DSPARK only, "
                                                 f"got {algorithm.upper()} .*{HOOK}"):
        _check(f"--enable-unified-memory --speculative-algorithm {algorithm} --page-size 1 --attention-backend triton"
               f"{extra}")


def test_unified_memory_takes_the_page_major_backends_only():
    """SGLang's pipeline runs handle_page_major_kv_layout before handle_unified_memory_pool: aiter is refused with or
    without speculation; a model whose K and V rows differ (MiMo-V2, 192 / 128) takes fewer."""
    for spec in ("", " --speculative-algorithm eagle"):
        with pytest.raises(LaunchRefusedError, match="page-major KV layout, which runs only on triton, fa3, fa4, "
                                                     "flashinfer, trtllm_mha, got aiter .*handle_page_major_kv_layout"):
            _check(f"--enable-unified-memory --attention-backend aiter{spec}")
    assert _check("--enable-unified-memory --attention-backend triton") == []  # modelled: no note
    with pytest.raises(LaunchRefusedError, match=r"runs only on triton, fa3, fa4 \(K and V rows differ"):
        _check("--enable-unified-memory --attention-backend flashinfer", model="mimo-v2-flash", platform="cuda-sm90")


def test_unified_memory_with_eagle_on_fa4_is_refused_and_on_triton_is_not():
    with pytest.raises(LaunchRefusedError, match=f"EAGLE runs only on the backends fa3, flashinfer, triton, "
                                                 f"trtllm_mha .*got fa4 .*{HOOK}"):
        _check("--enable-unified-memory --speculative-algorithm eagle --attention-backend fa4", platform="cuda-sm100")
    assert _check("--enable-unified-memory --speculative-algorithm eagle --attention-backend triton") == []
    with pytest.raises(LaunchRefusedError, match="got flashmla"):  # a draft off the MHA rails
        _check("--enable-unified-memory --speculative-algorithm eagle --attention-backend triton "
               "--speculative-draft-attention-backend flashmla")


def test_unified_memory_per_algorithm_backends():
    with pytest.raises(LaunchRefusedError, match="DSPARK runs only on the backends .*fa4.*got trtllm_mha"):
        _check("--enable-unified-memory --speculative-algorithm dspark --attention-backend trtllm_mha",
               platform="cuda-sm90")
    assert _check("--enable-unified-memory --speculative-algorithm dspark --attention-backend fa4",
                  platform="cuda-sm100") == []  # served, and both modelled: no refusal, no note
    with pytest.raises(LaunchRefusedError, match="DFLASH runs only on the backends fa3, flashinfer, triton, "
                                                 "trtllm_mha .*got fa4"):
        _check("--enable-unified-memory --speculative-algorithm dflash --attention-backend fa4",
               platform="cuda-sm100")


def test_unified_memory_refuses_trees_and_non_hybrid_models():
    with pytest.raises(LaunchRefusedError, match="linear chain only, got --speculative-eagle-topk 4"):
        _check("--enable-unified-memory --speculative-algorithm eagle --attention-backend triton "
               "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8")
    with pytest.raises(LaunchRefusedError, match="EAGLE needs a hybrid-SWA .*Gemma3ForConditionalGeneration"):
        _check("--enable-unified-memory --speculative-algorithm eagle --attention-backend triton", model="gemma3-27b")
    # SGLang's own words, from the pool build (kv_cache_configurator.py KVCacheConfigurator._init_pools)
    with pytest.raises(LaunchRefusedError, match=r"when it builds the pools: --enable-unified-memory only supports "
                                                 r"hybrid Mamba and hybrid sliding-window-attention models "
                                                 r"\(DeepSeek-V4 excluded\); the current model "
                                                 r"\(Gemma3ForConditionalGeneration\) is neither "
                                                 r".*kv_cache_configurator.py KVCacheConfigurator._init_pools"):
        _check("--enable-unified-memory --attention-backend triton", model="gemma3-27b")


def test_unified_memory_without_speculation_is_modelled_not_named():
    """On a page-major backend SGLang starts it without speculation; the kit sizes its buffer (no note), whichever
    way the flag is spelled, and leaves a launch that turns it off alone."""
    for args in ("--enable-unified-memory --attention-backend triton",
                 "--enable-unified-memory=true --attention-backend triton",
                 "server_args=ServerArgs(enable_unified_memory=True, page_size=1, attention_backend='triton')"):
        assert _check(args) == []
        assert _decide(args, platform="rocm-gfx942").unified_memory.value["total_bytes"] > 0
    for args in ("--enable-unified-memory=false", "server_args=ServerArgs(enable_unified_memory=False, "
                                                  "speculative_draft_sink_size=None, swa_prefix_tails=None)"):
        assert _check(args) == []
        assert _decide(args, platform="rocm-gfx942").unified_memory.value is None
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args="--enable-unified-memory --load-format auto "
                                                                       "--attention-backend triton"))
    assert not any("not modelled" in f.title for f in report.findings)
    assert report.decisions.unified_memory.value["entry_bytes"] == {"full": 24576, "swa": 24576}
    # it changes the pools, so it is not among the arguments that route and size nothing
    unread = [f.detail for f in report.findings if f.title == "server arguments the kit does not read"]
    assert unread == ["load_format"]


# -- draft sink, prefix tails, DSPARK and UNO ----------------------------------------------------------------

def test_draft_sink_size():
    with pytest.raises(LaunchRefusedError, match="requires --speculative-draft-window-size.*handle_speculative"):
        _check("--speculative-algorithm eagle --speculative-draft-sink-size 4")
    with pytest.raises(LaunchRefusedError, match="non-negative, got -1"):
        _check("--speculative-algorithm eagle --speculative-draft-window-size 64 --speculative-draft-sink-size -1")
    with pytest.raises(UsageError, match="--speculative-draft-sink-size 'four': SGLang reads an integer"):
        _check("--speculative-algorithm eagle --speculative-draft-window-size 64 --speculative-draft-sink-size four")
    sink = random.randint(1, 64)
    assert _check(f"--speculative-algorithm eagle --speculative-draft-window-size 64 --speculative-draft-sink-size "
                  f"{sink}") == []  # modelled: no note


def test_swa_prefix_tails():
    with pytest.raises(LaunchRefusedError, match="non-negative integer, got -2.*handle_cache_compatibility"):
        _check("--swa-prefix-tails -2")
    assert _check("--swa-prefix-tails 8") == []  # modelled: no note


def test_dspark_and_uno_devices_and_uno_rules():
    with pytest.raises(LaunchRefusedError, match="DSPARK runs on cuda, npu, xpu devices only, got cpu.*_handle_dspark"):
        _check("--speculative-algorithm dspark", platform="cpu")
    with pytest.raises(LaunchRefusedError, match="UNO runs on cuda devices only"):
        _check("--speculative-algorithm uno --uno-lora-path /l", platform="cpu")
    with pytest.raises(LaunchRefusedError, match="UNO requires --uno-lora-path"):
        _check("--speculative-algorithm uno")
    with pytest.raises(LaunchRefusedError, match="UNO requires --speculative-num-draft-tokens, its verify width"):
        _check("--speculative-algorithm uno --uno-lora-path /l")
    uno = "--speculative-algorithm uno --uno-lora-path /l --speculative-num-draft-tokens 4"
    with pytest.raises(LaunchRefusedError, match="UNO requires TP=PP=1 and no DP attention, got tp 2"):
        _check(f"{uno} --tp 2 --attention-backend fa3", platform="cuda-sm90")
    with pytest.raises(LaunchRefusedError, match="UNO requires fa3 for both prefill and decode, got prefill fa3, "
                                                 "decode triton"):
        _check(f"{uno} --attention-backend fa3 --decode-attention-backend triton", platform="cuda-sm90")
    with pytest.raises(LaunchRefusedError, match="takes no --speculative-draft-model-path"):
        _check("--speculative-algorithm uno --uno-lora-path /l --speculative-draft-model-path /d")
    with pytest.raises(LaunchRefusedError, match="UNO requires fa3 .*got prefill triton"):  # ROCm: cuda device
        _check(uno)
    assert _check(f"{uno} --attention-backend fa3", platform="cuda-sm90") == []
    assert _check("--speculative-algorithm dspark") == []


def test_a_refusal_exits_with_the_usage_code(capsys):
    code = main(["audit", "--model", "gemma4-31b", "--server-args",
                 "--enable-unified-memory --speculative-algorithm frozen_kv_mtp"])
    assert code == 2 and "handle_unified_memory_pool" in capsys.readouterr().err


# -- the 5-D decode --------------------------------------------------------------------------------------------

def _gluon_mask_keys(context_length: int, sliding_window: int) -> int:
    """Keys ``pa_decode_gluon`` keeps for one decode query (ROCm/aiter ops/triton/gluon/pa_decode_gluon.py,
    paged_attention_decode_sliding_window: k < context_length and k >= context_length - SLIDING_WINDOW + 1)."""
    start = context_length - sliding_window
    return sum(1 for k in range(context_length) if start + 1 <= k)


def test_gluon_5d_decode_keys_follow_aiters_mask():
    site = DECLARED_SITES["decode.gluon_5d"]
    assert "pa_decode_gluon.py" in site.source and "inferred" not in site.source
    for _ in range(50):
        sws = random.randint(1, 600)
        length = random.randint(sws + 1, 4 * sws + 2)  # a context past the window, as keys_of assumes
        assert site.keys_of(site.window_arg(sws)) == _gluon_mask_keys(length, site.window_arg(sws))
    assert site.keys_of(site.window_arg(-1)) is None  # full layers: sliding_window=0, every key
    report = audit(Launch.from_inputs(model="gpt-oss-20b", env={"SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d",
                                                                 "SGLANG_USE_AITER": "1"}))
    decode = report.decisions.routes[("target", "decode")].layers[0]
    assert (decode.kernel, decode.window_arg, decode.effective_keys) == ("pa_decode_gluon", 127, 126)


# -- decide(): SGLang's refusals, and the surfaces the kit refuses by name -----------------------------------

def _decide(args: str, model: str = "gpt-oss-20b", platform: str = "cuda-sm90", draft=None):
    return decide(Launch.from_inputs(model=model, server_args=args, platform=platform, draft_hf_config=draft))


def test_decide_refuses_what_sglang_refuses_at_start_up():
    with pytest.raises(LaunchRefusedError, match="GPT-OSS runs only on triton, .*got prefill flashinfer.*model_hook"):
        _decide("--enable-unified-memory --attention-backend flashinfer")
    with pytest.raises(LaunchRefusedError, match="page-major KV layout.*got aiter.*kv_cache_hook.py"):
        _decide("--enable-unified-memory --attention-backend aiter", platform="rocm-gfx950")
    with pytest.raises(LaunchRefusedError, match="requires --speculative-draft-window-size"):
        _decide("--speculative-algorithm eagle --speculative-draft-sink-size 4")
    with pytest.raises(LaunchRefusedError, match="takes --speculative-algorithm EAGLE, EAGLE3, DFLASH, DSPARK only, "
                                                 "got FROZEN_KV_MTP"):
        _decide("--enable-unified-memory --attention-backend triton --speculative-algorithm frozen_kv_mtp")


@pytest.mark.parametrize(("config", "rank"), [({}, 0), ({"markov_rank": 2}, 2), ({"dspark_markov_rank": 3}, 3),
                                             ({"dflash_config": {"markov_rank": 1}, "markov_rank": 0}, 1),
                                             ({"text_config": {"markov_rank": 4}}, 4), ({"markov_rank": None}, 0)])
def test_dspark_markov_rank_is_read_as_sglang_reads_it(config, rank):
    assert dspark_markov_rank(config) == rank


def test_decide_refuses_dspark_with_a_draft_without_markov_rank(tmp_path):
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps({**json.loads(DRAFT_LLAMA.read_text()), "markov_rank": 0}))
    with pytest.raises(LaunchRefusedError, match="DSPARK requires markov_rank > 0 .*got 0.*spec_aux_hidden_state.py"):
        _decide("--speculative-algorithm dspark", draft=draft)
    draft.write_text(json.dumps({**json.loads(DRAFT_LLAMA.read_text()), "markov_rank": 1}))
    assert _decide("--speculative-algorithm dspark", draft=draft).draft_layers_in_pool.value == {"full": 2, "swa": 0}


@pytest.mark.parametrize(("args", "surface"), [
    ("--enable-page-major-kv-layout --attention-backend triton", "--enable-page-major-kv-layout"),
])
def test_decide_refuses_by_name_what_sglang_serves_and_the_kit_does_not_model(args, surface):
    with pytest.raises(NotModelledError, match=f"^the kit does not model {surface}"):
        _decide(args)
    plan = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=args, platform="cuda-sm90"),
                  plan_unmodelled=True)
    assert plan.full_tokens.value is not None  # the audit still answers, for the launch without it
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args=args, platform="cuda-sm90"))
    assert any(f.title.startswith(f"{surface} is not modelled") for f in report.findings)


@pytest.mark.parametrize("args", [
    "--swa-prefix-tails 2",
    "--speculative-algorithm eagle --speculative-draft-window-size 64 --speculative-draft-sink-size 4",
    "--speculative-algorithm uno --uno-lora-path /l --speculative-num-draft-tokens 4 --attention-backend fa3",
])
def test_decide_answers_the_surfaces_it_models(args):
    """Once refused by name, now modelled: decide answers and the audit names no surface as left out."""
    assert _decide(args).full_tokens.value is not None
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args=args, platform="cuda-sm90"))
    assert not [f for f in report.findings if "is not modelled" in f.title or "does not read" in f.title]


def test_decide_leaves_modelled_launches_alone():
    assert _decide("--speculative-algorithm eagle --speculative-draft-window-size 64").full_tokens.value
    assert _decide("server_args=ServerArgs(enable_unified_memory=False, swa_prefix_tails=None)").full_tokens.value
