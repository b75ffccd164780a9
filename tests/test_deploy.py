"""swa_kit.launch: a launch as SGLang spells it, and SGLang 0.5.23's decisions for it (backend, pools, drafts)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from swa_kit.models.configs import MODELS_DIR
from swa_kit.models.drafts import NO_DRAFT_CONFIG
from swa_kit.launch.backend import choose_backend
from swa_kit.launch.decide import MINIMUM_CONTEXT, decide
from swa_kit.launch.pool_sizing import swa_request_cap
from swa_kit.launch.inputs import GIB, Launch, parse_env_pairs, parse_server_args, read_server_args
from swa_kit.errors import LaunchRefusedError, ModelConfigError, UsageError


def launch(model="gemma4-31b", args=None, **kw) -> Launch:
    return Launch.from_inputs(model=model, server_args=args, **kw)


# -- inputs ------------------------------------------------------------------------------------------------


def test_flags_command_and_logged_line_read_the_same():
    flags = "--attention-backend aiter --page-size 16 --speculative-algorithm FROZEN_KV_MTP --disable-radix-cache"
    command = f"python -m sglang.launch_server --model-path google/gemma-4-31b-it --tp 8 {flags}"
    logged = ("[2026-11-30 12:00:00] server_args=ServerArgs(model_path='google/gemma-4-31b-it', tp_size=8, "
              "attention_backend='aiter', page_size=16, speculative_algorithm='FROZEN_KV_MTP', "
              "disable_radix_cache=True, load_format=LoadFormat.AUTO) extra text")
    views = [parse_server_args(t) for t in (flags, command, logged)]
    keys = ("attention_backend", "page_size", "speculative_algorithm", "disable_radix_cache")
    assert {tuple(getattr(v, k) for k in keys) for v in views} == {("aiter", 16, "FROZEN_KV_MTP", True)}
    assert views[1].tp_size == views[2].tp_size == 8 and views[0].tp_size == 1  # --tp and tp_size= both read
    assert "load_format" in views[2].not_read and not views[1].not_read
    # A **mapping in the logged call names no field: SGLang never logs one, so the line is refused by name.
    with pytest.raises(UsageError, match=r"\*\*\{\.\.\.\} argument"):
        parse_server_args("server_args=ServerArgs(**overrides, page_size=16, tp_size=8)")


def test_server_args_from_a_file(tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text("python -m sglang.launch_server \\\n  --model-path x \\\n  --swa-full-tokens-ratio 0.25\n")
    assert read_server_args(str(path)).swa_full_tokens_ratio == 0.25
    with pytest.raises(UsageError, match="no such file"):
        read_server_args(str(tmp_path / "missing.sh"))


@pytest.mark.parametrize("text,message", [
    ("--swa-full-tokens-ratio 1.5", "0 < ratio <= 1"),
    ("--page-size 0", "must be >= 1"),
    ("--page-size 16 --page-size 32", "given twice"),
    ("--speculative-eagle-topk 2", "--speculative-algorithm is not"),
    ("--speculative-algorithm FROZEN_KV_MTP --speculative-eagle-topk 4", "topk must be 1"),
    ("--speculative-algorithm MEDUSA", "one of EAGLE"),
    ("--page-size sixteen", "reads it as int"),
    ("--mem-fraction-static 1.2", "0 < f < 1"),
    ("server_args=ServerArgs(page_size=", "paste it whole"),
])
def test_conflicting_or_bad_server_args_refused_in_one_line(text, message):
    with pytest.raises(UsageError, match=message):
        parse_server_args(text)


def test_environment_refuses_unknown_names_and_values():
    with pytest.raises(UsageError, match="'SGLANG_FOO'.*accepted: SGLANG_USE_AITER_UNIFIED_ATTN"):
        parse_env_pairs(["SGLANG_FOO=1"])
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_env_pairs(["SGLANG_USE_AITER"])
    with pytest.raises(UsageError, match="'nhd' or 'vectorized_5d'"):
        parse_env_pairs(["SGLANG_AITER_KV_CACHE_LAYOUT=shuffle"])
    # EnvBool reads yes / y; get_bool_env_var does not.
    assert parse_env_pairs(["SGLANG_USE_AITER=yes"]) == {"SGLANG_USE_AITER": "yes"}
    with pytest.raises(UsageError, match="reads this boolean"):
        parse_env_pairs(["SGLANG_USE_AITER_UNIFIED_ATTN=yes"])


def test_bad_launch_inputs(tmp_path):
    with pytest.raises(UsageError, match="exactly one of --hf-config"):
        Launch.from_inputs(model="gemma4-31b", hf_config=tmp_path)
    with pytest.raises(ModelConfigError, match="no such file"):
        Launch.from_inputs(hf_config=tmp_path)
    with pytest.raises(UsageError, match="platform 'tpu'"):
        launch(platform="tpu")
    with pytest.raises(UsageError, match="SGLang version '0.4.0'"):
        launch(sglang_version="0.4.0")


# -- backend and hybrid pool -------------------------------------------------------------------------------


@pytest.mark.parametrize("model,platform,args,expected", [
    ("gemma4-31b", "rocm-gfx942", None, ("triton", "triton", "triton")),
    ("gemma4-31b", "cuda-sm100", None, ("trtllm_mha", "trtllm_mha", "trtllm_mha")),
    ("gemma4-31b", "rocm-gfx942", "--attention-backend aiter", ("aiter", "aiter", "aiter")),
    ("gemma4-31b", "rocm-gfx942", "--decode-attention-backend aiter", ("triton", "triton", "aiter")),
    ("gpt-oss-20b", "rocm-gfx950", None, ("aiter", "aiter", "aiter")),
    ("gpt-oss-20b", "cuda-sm90", None, ("fa3", "fa3", "fa3")),
    ("gpt-oss-20b", "cpu", None, ("triton", "triton", "triton")),
    ("llama4-scout", "rocm-gfx942", None, ("aiter", "aiter", "aiter")),
    ("gemma3-27b", "rocm-gfx942", None, ("aiter", "aiter", "aiter")),
    ("gemma3-27b", "cuda-sm90", None, ("fa3", "fa3", "fa3")),
    ("mimo-v2-flash", "cuda-sm100", None, ("fa4", "fa4", "fa4")),
    ("gpt-oss-20b", "rocm-gfx942", "--prefill-attention-backend triton --decode-attention-backend triton",
     ("triton", "triton", "triton")),
])
def test_backend_choice_per_architecture_and_platform(model, platform, args, expected):
    choice = choose_backend(launch(model, args, platform=platform))
    assert (choice.attention_backend, choice.prefill_attention_backend, choice.decode_attention_backend) == expected


EXAONE4 = Path(__file__).parent / "data" / "differential" / "exaone4-32b.json"


@pytest.mark.parametrize("platform, args, expected", [
    ("rocm-gfx942", None, "triton"), ("cuda-sm90", None, "fa3"), ("cuda-sm100", None, "trtllm_mha"),
    ("rocm-gfx942", "--attention-backend aiter", "aiter")])
def test_exaone4_backend_override(platform, args, expected):
    # arg_groups/model_overrides/exaone.py: with sliding_window_pattern, a backend is picked when none is given.
    choice = choose_backend(Launch.from_inputs(hf_config=EXAONE4, server_args=args, platform=platform))
    assert choice.attention_backend == expected and "exaone.py" in f"{choice.why} {choice.hybrid_why}"


def test_hybrid_pool_on_off_and_why():
    assert decide(launch()).hybrid_swa_memory.value is True
    off = decide(launch(args="--disable-hybrid-swa-memory")).hybrid_swa_memory
    assert off.value is False and "--disable-hybrid-swa-memory" in off.source
    g3 = decide(launch("gemma3-27b")).hybrid_swa_memory
    assert g3.value is False and "does not list Gemma3ForConditionalGeneration" in g3.source
    assert "gemma2_gemma3.py" in g3.source


# -- pool sizes --------------------------------------------------------------------------------------------


def test_gemma4_default_pools_by_hand():
    d = decide(launch(gpu_memory_gib=192, weights_gib=58))
    full_cell, swa_cell = 10 * 4 * (512 + 512) * 2, 50 * 16 * (256 + 256) * 2
    assert (full_cell, swa_cell) == (81_920, 819_200)
    # memory_hook.py, in MiB: 512 + 16384 (chunked prefill on > 160 GiB) x 1.5 + tp 1 x pp 1 / 8 x 1024
    # + decode graph max_bs 512 x 2 = 26,240 (over the 10 GiB floor); Gemma-4 runs triton, so no aiter cut
    fraction = round((192 * 1024 - 26_240) / (192 * 1024), 3)
    assert fraction == 0.867
    budget = int(192 * GIB * fraction) - 58 * GIB
    full = int(budget // (full_cell + 0.8 * swa_cell))
    swa = int(full * 0.8)
    assert (d.full_tokens.value, d.swa_tokens.value) == (full, swa)
    assert (d.full_bytes.value, d.swa_bytes.value) == (full * full_cell, swa * swa_cell)
    assert d.bytes_saved_vs_one_pool.value == round(1 - (full_cell + 0.8 * swa_cell) / (full_cell + swa_cell), 4)
    assert d.bytes_saved_vs_one_pool.value == pytest.approx(1 - 737_280 / 901_120, abs=1e-4)  # ~18%
    assert "PER-REQUEST MINIMUM" in d.per_request_minimum_bytes.source
    assert d.per_request_minimum_bytes.value == 10 * MINIMUM_CONTEXT * 8192 + 50 * 1024 * 16384


def test_gpt_oss_saves_about_ten_percent():
    d = decide(launch("gpt-oss-20b"))
    assert d.bytes_saved_vs_one_pool.value == pytest.approx(0.1, abs=1e-4)


def test_ratio_page_size_and_floor():
    rng = random.Random()
    ratio, page = rng.choice([0.1, 0.25, 0.5]), rng.choice([1, 16, 64])
    d = decide(launch(args=f"--swa-full-tokens-ratio {ratio} --page-size {page} --max-total-tokens 100000"))
    full = 100000 // page * page
    assert d.full_tokens.value == full and d.swa_tokens.value == int(full * ratio) // page * page
    assert d.swa_pool_floor.value == 1023 + page
    tiny = decide(launch(args="--swa-full-tokens-ratio 0.01 --max-total-tokens 50000"))
    assert tiny.pools.refused and "cannot hold even one request" in tiny.pools.refused  # 500 <= 1023 + 1


def test_request_cap_configurator():
    args = "--max-running-requests 8 --disable-radix-cache --chunked-prefill-size 4096 --page-size 1"
    d = decide(launch(args=args, gpu_memory_gib=192, weights_gib=58))
    per_request = 1023 + 128 * 1 + 1 + 1  # window + eviction interval x draft tokens + page + decode allocation
    cap = per_request * 8 + 2 * 4096 + 1
    assert d.pool_configurator.value == "SWARequestCapPoolConfigurator" and d.swa_tokens.value == cap
    assert d.pool_configurator.source.endswith("SWARequestCapPoolConfigurator (--max-running-requests with the radix "
                                               "cache off)")
    budget = d.pools.budget_bytes
    assert d.full_tokens.value == (budget - cap * 819_200) // 81_920


def test_request_cap_without_gpu_memory_sizes_the_swa_pool_only(capsys):
    # Without a KV budget the full pool's size, and so the bytes saved per token, are unknown; decide() once
    # raised TypeError here (and so did swa-kit audit on such a launch).
    from swa_kit.cli import main

    args = "--max-running-requests 8 --disable-radix-cache --chunked-prefill-size 4096 --page-size 1"
    on_gpu = decide(launch(args=args, gpu_memory_gib=192, weights_gib=58))
    d = decide(launch(args=args, platform="cpu"))
    assert d.swa_tokens.value == on_gpu.swa_tokens.value and d.full_tokens.value is None
    assert d.bytes_saved_vs_one_pool.value is None and "--gpu-memory-gib" in d.bytes_saved_vs_one_pool.source
    assert main(["audit", "--model", "gemma4-31b", "--platform", "cpu", "--server-args", args]) in (0, 1)
    assert "bytes_saved_vs_one_pool" in capsys.readouterr().out
    with pytest.raises(UsageError, match="give --max-running-requests"):
        swa_request_cap(launch(), 1023, 1, 4096)


def test_one_pool_when_hybrid_is_off():
    d = decide(launch("gemma3-27b", args="--max-total-tokens 4096"))
    assert d.swa_tokens.value is None and d.full_tokens.value == 4096 and d.bytes_saved_vs_one_pool.value == 0
    assert d.pool_configurator.value == "DefaultPoolConfigurator"


def test_the_configurator_is_a_name_and_its_source_apart():
    """The decision's value is SGLang's class name, held as a field (never cut out of the source text)."""
    for ratio in (None, 0.3):
        d = decide(launch(args=None if ratio is None else f"--swa-full-tokens-ratio {ratio}"))
        assert d.pool_configurator.value == d.pools.configurator == "HybridSWAPoolConfigurator"
        how = "unset: SGLang's fallback" if ratio is None else "--swa-full-tokens-ratio"
        assert f"HybridSWAPoolConfigurator, swa_full_tokens_ratio {ratio or 0.8} ({how}" in d.pool_configurator.source
        assert d.swa_tokens.source == d.pools.source == d.pool_configurator.source


# -- drafts ------------------------------------------------------------------------------------------------


def test_draft_pools_per_algorithm(tmp_path):
    frozen = decide(launch(args="--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP")).draft_pool.value
    assert frozen.pool.startswith("dummy") and frozen.layout is None
    mimo = decide(launch("mimo-v2-flash", "--speculative-algorithm EAGLE")).draft_pool.value
    assert mimo.pool.startswith("own SWA pool") and mimo.layout.architecture == "MiMoV2MTP"
    # no draft config: SGLang's draft worker reads the target's own config, a hybrid-SWA one here
    itself = decide(launch("gpt-oss-20b", "--speculative-algorithm EAGLE3")).draft_pool.value
    assert itself.layout_from.startswith(NO_DRAFT_CONFIG) and itself.pool == "own SWA pool (hybrid-SWA draft)"
    assert itself.layout.architecture == "GptOssForCausalLM"
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64}
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text(json.dumps(head))
    windowed = decide(launch("gpt-oss-20b", "--speculative-algorithm EAGLE3 --speculative-draft-window-size 64",
                             draft_hf_config=tmp_path / "head"))
    layer = windowed.draft_pool.value.layout.kinds["full"]
    assert (layer.attention, layer.sliding_window_size, layer.window.keys) == ("sliding", 64, 65)
    # A Gemma-4 standalone draft from its own config: hybrid-SWA, so it owns an SWA pool.
    raw = json.loads((MODELS_DIR / "gemma4-31b.json").read_text())["hf_config"]
    raw["text_config"]["num_hidden_layers"] = 6
    (tmp_path / "config.json").write_text(json.dumps(raw))
    standalone = decide(Launch.from_inputs(model="gemma4-31b", draft_hf_config=tmp_path,
                                           server_args="--attention-backend aiter --speculative-algorithm STANDALONE"))
    assert standalone.draft_pool.value.pool.startswith("own SWA pool")
    draft_decode = standalone.routes[("draft", "draft_decode")]
    assert draft_decode.pool.own_swa_pool and draft_decode.pool.swa_pool_resolved
    assert {e.page_table for e in draft_decode.layers if e.kind == "sliding"} == {"swa"}


def test_models_command_shows_sglang_sizing_beside_the_labelled_minimum(capsys):
    from swa_kit.cli import main
    from swa_kit.launch.decide import default_sizing

    g4 = default_sizing("gemma4-31b")
    assert g4["backend_rocm-gfx942"] == "triton" and g4["sglang_saved_pct"] == 18.2
    assert abs(g4["sglang_bytes_per_token"] - 737_280) <= 1 and g4["one_pool_bytes_per_token"] == 901_120
    assert default_sizing("gpt-oss-20b")["sglang_saved_pct"] == 10.0
    assert main(["models", "gpt-oss-20b"]) == 0
    text = capsys.readouterr().out
    assert "sglang_saved_pct" in text and "min_saved_pct" in text and "PER-REQUEST MINIMUM" in text
    assert main(["models", "gemma4-31b", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["sglang_sizing"]["sglang_saved_pct"] == 18.2 and row["per_request_minimum"][1]["min_saved_pct"] == 88.1


@pytest.mark.parametrize("model,platform,args,rule", [
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm EAGLE3 --speculative-eagle-topk 4 "
     "--speculative-num-steps 3 --speculative-num-draft-tokens 8 --page-size 16", "runs only on flashinfer"),
    ("gpt-oss-20b", "cuda-sm100", "--speculative-algorithm EAGLE3 --speculative-eagle-topk 4 "
     "--speculative-num-steps 3 --speculative-num-draft-tokens 8", "trtllm_mha runs speculative topk 1 only"),
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm EAGLE --speculative-eagle-topk 2",
     "without --speculative-num-steps"),
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm EAGLE --speculative-num-steps 3",
     "without --speculative-eagle-topk"),
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm NGRAM --page-size 16", "NGRAM drafts 10 branches"),
])
def test_launches_sglang_refuses_are_refused_in_one_line(model, platform, args, rule):
    with pytest.raises(LaunchRefusedError, match=f"SGLang refuses this launch: .*{rule}") as refused:
        decide(launch(model, args, platform=platform))
    assert "\n" not in str(refused.value) and "speculative_hook.py" in str(refused.value)


def test_ngram_with_one_branch_runs_on_pages():
    args = "--speculative-algorithm NGRAM --speculative-ngram-max-bfs-breadth 1 --page-size 16"
    assert decide(launch("gpt-oss-20b", args)).page_size.value == 16


@pytest.mark.parametrize("model,platform,args,page", [
    ("gemma4-31b", "cuda-sm100", None, 64),  # trtllm_mha: 1 is not a page size it takes
    ("gemma4-31b", "cuda-sm100", "--page-size 32", 32),
    ("mimo-v2-flash", "cuda-sm100", "--page-size 16", 128),  # FA4 on SM100
    ("gpt-oss-20b", "rocm-gfx942", None, 1),
])
def test_page_size_the_backend_forces(model, platform, args, page):
    assert decide(launch(model, args, platform=platform)).page_size.value == page


def test_sm100_without_a_topk_falls_to_triton():
    split = "--prefill-attention-backend aiter --decode-attention-backend triton --speculative-algorithm EAGLE"
    assert choose_backend(launch("gpt-oss-20b", split, platform="cuda-sm100")).attention_backend == "triton"
    given = split + " --speculative-eagle-topk 1 --speculative-num-steps 3"
    assert choose_backend(launch("gpt-oss-20b", given, platform="cuda-sm100")).attention_backend == "trtllm_mha"


def test_the_workshop_story_uses_sglangs_sizing():
    """One rule for the default saving: the workshop's story is default_sizing's, hybrid pool or not."""
    from swa_kit.lessons.workshop import story
    from swa_kit.models.configs import list_models
    from swa_kit.launch.decide import default_sizing

    for name in list_models():
        sizing, memory = default_sizing(name), story.story_memory(name)
        assert memory["default_bytes_per_token"] == sizing["sglang_bytes_per_token"]
        assert round(100 * memory["default_saved_fraction"], 1) == sizing["sglang_saved_pct"]
    assert story.story_memory("gemma3-27b")["default_saved_fraction"] == 0  # SGLang builds no hybrid pool
    half = story.story_memory("gemma4-31b", ratio=0.5)["default_bytes_per_token"]
    assert half == default_sizing("gemma4-31b", ratio=0.5)["sglang_bytes_per_token"] == 81_920 + 0.5 * 819_200


def test_exaone4_allow_list_and_text_only_gemma4_are_refused_as_sglang_does():
    # held against SGLang's own start-up by the differential (tests/differential.py: exaone4-32b, gemma4-31b-text)
    data = Path(__file__).parent / "data" / "differential"
    exaone = data / "exaone4-32b.json"
    with pytest.raises(LaunchRefusedError, match="EXAONE-4 with sliding layers runs only on fa3, triton, trtllm_mha"):
        decide(Launch.from_inputs(hf_config=exaone, server_args="--attention-backend aiter", platform="rocm-gfx942"))
    assert decide(Launch.from_inputs(hf_config=exaone, server_args="--attention-backend triton",
                                     platform="rocm-gfx942")).attention_backend.value == "triton"
    with pytest.raises(LaunchRefusedError, match="text-only Gemma-4 config"):
        decide(Launch.from_inputs(hf_config=data / "gemma4-31b-text.json", platform="rocm-gfx942"))
    assert decide(Launch.from_inputs(model="gemma4-31b", platform="rocm-gfx942")).attention_backend.value == "triton"
