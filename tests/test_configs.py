"""Model layouts from Hugging Face configs (bundled shortcuts and --hf-config): parse, derive, refuse clearly."""

from __future__ import annotations

import copy
import json
import random

import pytest

from swa_kit.models.configs import MODELS_DIR, list_models, load_hf_config, load_model, parse_bundle, parse_hf_config
from swa_kit.errors import ModelConfigError

REQUIRED = {"gemma4-31b", "gpt-oss-20b", "gemma3-27b"}

# Hand-written expectations (the sources named in each file).
EXPECTED = {
    # name: (layers, swa layers, full layers, SGLang hybrid pool, {kind: (keys or chunk, q, kv, head_dim, v_head_dim)})
    "gemma4-31b": (60, 50, 10, True, {"sliding": (1024, 32, 16, 256, 256), "full": (None, 32, 4, 512, 512)}),
    "gemma3-27b": (62, 52, 10, False, {"sliding": (1024, 32, 16, 128, 128), "full": (None, 32, 16, 128, 128)}),
    "gpt-oss-20b": (24, 12, 12, True, {"sliding": (128, 64, 8, 64, 64), "full": (None, 64, 8, 64, 64)}),
    "gpt-oss-120b": (36, 18, 18, True, {"sliding": (128, 64, 8, 64, 64), "full": (None, 64, 8, 64, 64)}),
    "llama4-scout": (48, 36, 12, True, {"chunked": (8192, 40, 8, 128, 128), "full": (None, 40, 8, 128, 128)}),
    "mimo-v2-flash": (48, 39, 9, True, {"sliding": (129, 64, 8, 192, 128), "full": (None, 64, 4, 192, 128)}),
}


def test_required_and_hybrid_models_present():
    names = set(list_models())
    assert REQUIRED <= names
    hybrid = [n for n in names if load_model(n).sglang_hybrid_swa_pool]
    assert len(set(hybrid) - REQUIRED) >= 2
    assert set(EXPECTED) == names


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_figures(name):
    spec = load_model(name)
    layers, n_swa, n_full, hybrid, kinds = EXPECTED[name]
    assert spec.name == name == spec.path.stem
    assert (spec.num_layers, len(spec.swa_attention_layer_ids), len(spec.full_attention_layer_ids)) == (
        layers, n_swa, n_full)
    assert spec.sglang_hybrid_swa_pool is hybrid
    for kind_name, (keys, q, kv, hd, vhd) in kinds.items():
        k = spec.kinds[kind_name]
        assert (k.retained_tokens, k.num_q_heads, k.num_kv_heads, k.head_dim, k.v_head_dim) == (keys, q, kv, hd, vhd)
    assert sorted(spec.swa_attention_layer_ids + spec.full_attention_layer_ids) == list(range(layers))
    assert spec.sources and all(spec.sources.values())


def test_layer_placement_matches_sglang_rules():
    # SGLang's get_hybrid_layer_ids for Llama 4: SWA when (i + 1) % 4 != 0.
    scout = load_model("llama4-scout")
    assert scout.swa_attention_layer_ids == [i for i in range(48) if (i + 1) % 4]
    # transformers' Gemma default: every 6th layer full.
    g4 = load_model("gemma4-31b")
    assert g4.full_attention_layer_ids == [i for i in range(60) if (i + 1) % 6 == 0]
    assert g4.full_attention_layer_ids[-1] == 59  # the last layer is full
    oss = load_model("gpt-oss-20b")
    assert oss.swa_attention_layer_ids == list(range(0, 24, 2))
    mimo = load_model("mimo-v2-flash")
    assert mimo.full_attention_layer_ids == [0] + [i for i in range(48) if (i + 1) % 6 == 0]


def test_windows_and_sglang_window_sizes():
    # MiMo writes the window SGLang's way (sliding_window_size 128): transformers makes it 129 keys,
    # and SGLang's model file passes 128 as it is.
    mimo = load_model("mimo-v2-flash").kinds["sliding"]
    assert (mimo.window.keys, mimo.sliding_window_size) == (129, 128)
    g4 = load_model("gemma4-31b").kinds["sliding"]
    assert (g4.window_field, g4.window.keys, g4.sliding_window_size) == ("sliding_window", 1024, 1023)
    scout = load_model("llama4-scout").kinds["chunked"]
    assert scout.window.keys is None and scout.chunk_size == 8192 and scout.sliding_window_size == -1


def _config(arch, **fields):
    return {"architectures": [arch], "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 16, **fields}


def test_gemma3n_passes_the_whole_window_and_mistral_none():
    g3n = parse_hf_config(_config("Gemma3nForCausalLM", model_type="gemma3n_text", sliding_window=512,
                                  layer_types=["sliding_attention"] * 3 + ["full_attention"], num_kv_shared_layers=0))
    assert g3n.kinds["sliding"].window.keys == 512 and g3n.kinds["sliding"].sliding_window_size == 512
    assert not g3n.sglang_hybrid_swa_pool
    mistral = parse_hf_config(_config("MistralForCausalLM", model_type="mistral", sliding_window=4096))
    assert set(mistral.layer_types) == {"sliding"} and mistral.kinds["sliding"].sliding_window_size == -1
    assert "llama.py" in mistral.sources["sliding_window_size"]


def test_command_r7b_passes_the_whole_window_on_its_sliding_layers():
    # SGLang's commandr.py hands RadixAttention config.sliding_window itself on Cohere-2's sliding layers.
    r7b = parse_hf_config(_config("Cohere2ForCausalLM", model_type="cohere2", sliding_window=4096,
                                  num_hidden_layers=8))
    assert r7b.full_attention_layer_ids == [3, 7]  # transformers' default: three sliding layers, then one full
    assert r7b.kinds["sliding"].window.keys == 4096 and r7b.kinds["sliding"].sliding_window_size == 4096
    assert not r7b.sglang_hybrid_swa_pool and "commandr.py" in r7b.sources["sliding_window_size"]


def test_sources_name_transformers_and_sglang():
    g4 = load_model("gemma4-31b")
    assert "Gemma4Config" in g4.sources["config"] and "per_layer_config" in g4.sources["heads and head dims"]
    assert "gemma4_causal.py" in g4.sources["sliding_window_size"]
    assert all("FACTS" not in v for m in list_models() for v in load_model(m).sources.values())


def test_hf_config_path_and_directory(tmp_path):
    raw = json.loads((MODELS_DIR / "gpt-oss-20b.json").read_text())["hf_config"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    by_dir, by_file = load_hf_config(tmp_path), load_hf_config(tmp_path / "config.json")
    assert by_dir.layer_types == by_file.layer_types == load_model("gpt-oss-20b").layer_types
    with pytest.raises(ModelConfigError, match="missing.*no such file"):
        load_hf_config(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_hf_config(tmp_path / "bad.json")


def test_per_layer_accessors_agree_with_layer_types():
    rng = random.Random()
    for name in list_models():
        spec = load_model(name)
        for layer_id in rng.sample(range(spec.num_layers), 5):
            kind = spec.kinds[spec.layer_types[layer_id]]
            assert spec.layer_kind(layer_id) is kind
            assert spec.window_keys(layer_id) == (None if kind.attention == "full" else kind.retained_tokens)
        for bad in (-1, spec.num_layers, 1.5, True):
            with pytest.raises(ModelConfigError, match="does not exist"):
                spec.layer_kind(bad)


def test_unknown_model_lists_known():
    with pytest.raises(ModelConfigError, match="known models: .*gemma4-31b"):
        load_model("gemma5")
    with pytest.raises(ModelConfigError):
        load_model("../models/gemma4-31b")


def _raw(name="gpt-oss-20b"):
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


@pytest.mark.parametrize("key,value,message", [
    ("architectures", ["FalconForCausalLM"],
     "unknown architecture 'FalconForCausalLM'; the kit models: Cohere2ForCausalLM, Exaone4"),
    ("architectures", "GptOssForCausalLM", "architectures must list"),
    ("num_key_value_heads", 7, "not a multiple"),
    ("head_dim", -64, "whole number in 1..2,147,483,647"),
    ("sliding_window", 0, "sliding_window in 1..2,147,483,647"),
    ("num_hidden_layers", 2_000_000, "num_hidden_layers must be a whole number in 1..4,096, got 2000000"),
    ("layer_types", ["sliding_attention", "mystery"] * 12, "transformers refuses this config.*mystery"),
    ("layer_types", ["sliding_attention"] * 3, "transformers refuses this config.*number of .layer_types."),
])
def test_bad_configs_are_refused_clearly(key, value, message):
    raw = copy.deepcopy(_raw()["hf_config"])
    raw[key] = value
    with pytest.raises(ModelConfigError, match=message):
        parse_hf_config(raw)


@pytest.mark.parametrize("key,value,message", [
    ("name", "GPT_OSS", "lower case"), ("sources", {}, "sources must map"), ("extra", 1, "unknown keys"),
])
def test_bad_bundles_are_refused_clearly(key, value, message):
    raw = _raw()
    raw[key] = value
    with pytest.raises(ModelConfigError, match=message):
        parse_bundle(raw, "test")


def test_every_config_field_needs_a_source():
    raw = _raw()
    del raw["sources"]["sliding_window"]
    with pytest.raises(ModelConfigError, match=r"sources lack an entry for config fields \['sliding_window'\]"):
        parse_bundle(raw, "test")


def test_file_stem_must_match_name(tmp_path):
    raw = _raw()
    (tmp_path / "other-name.json").write_text(json.dumps(raw))
    with pytest.raises(ModelConfigError, match="file stem"):
        load_model("other-name", tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_model("broken", tmp_path)
    (tmp_path / "gpt-oss-20b.json").write_text(json.dumps(raw))
    assert load_model("gpt-oss-20b", tmp_path).num_layers == 24
    assert list_models(tmp_path) == ["broken", "gpt-oss-20b", "other-name"]


# max_position_embeddings as published (model cards for Gemma-4 and MiMo), each named in the spec's sources.
CONTEXT = {"gemma4-31b": 262144, "gemma3-27b": 131072, "gpt-oss-20b": 131072, "gpt-oss-120b": 131072,
           "llama4-scout": 10485760, "mimo-v2-flash": 262144}


@pytest.mark.parametrize("name", sorted(CONTEXT))
def test_bundled_context_length_is_kept_with_its_source(name):
    from swa_kit.launch.inputs import Launch
    from swa_kit.launch.memory_fraction import context_length

    spec = load_model(name)
    text = spec.hf_config.get("text_config", spec.hf_config)
    assert text["max_position_embeddings"] == CONTEXT[name] and spec.sources["config.max_position_embeddings"]
    assert context_length(Launch.from_inputs(model=name)) == CONTEXT[name]  # SGLang's get_context_length


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gemma3-27b", "gemma4-31b", "llama4-scout"])
def test_architectures_null_is_inferred_from_model_type_and_said(name):
    """transformers' config classes save ``"architectures": null``: the model_type names the model."""
    raw = _raw(name)["hf_config"]
    named = parse_hf_config(raw)
    inferred = parse_hf_config({**raw, "architectures": None})
    assert inferred.architecture == named.architecture
    assert inferred.layer_types == named.layer_types and inferred.kinds == named.kinds
    assert "architecture" not in named.sources
    assert inferred.sources["architecture"].startswith("INFERRED") and repr(raw["model_type"]) in \
        inferred.sources["architecture"]


def test_architectures_null_with_an_unmodelled_model_type_is_refused():
    raw = {**_raw()["hf_config"], "architectures": None, "model_type": "falcon"}
    with pytest.raises(ModelConfigError, match="architectures is null and model_type 'falcon' names no architecture"):
        parse_hf_config(raw)


@pytest.mark.parametrize("name", ["gemma3-27b", "gemma4-31b"])
def test_a_multimodal_config_without_its_text_config_is_refused(name):
    """Without text_config, transformers would build its default text model: a different model, silently."""
    raw = {k: v for k, v in _raw(name)["hf_config"].items() if k != "text_config"}
    with pytest.raises(ModelConfigError, match="ForConditionalGeneration keeps its text model under text_config"):
        parse_hf_config(raw, where="x/config.json")


def test_huge_and_special_files_fail_fast_naming_the_file(tmp_path):
    import time
    start = time.perf_counter()
    with pytest.raises(ModelConfigError, match="config '/dev/zero' is not a regular file"):
        load_hf_config("/dev/zero")
    big = tmp_path / "config.json"
    big.write_text(" " * (5 << 20) + "{}")
    with pytest.raises(ModelConfigError, match=f"config '{big}' is over 4,194,304 bytes"):
        load_hf_config(big)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelConfigError, match=f"config '{deep}': JSON nested deeper than 32"):
        load_hf_config(deep)
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({**_raw()["hf_config"], "rope_theta": float("nan")}))
    with pytest.raises(ModelConfigError, match="NaN is not a finite number"):
        load_hf_config(nan)
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps({**_raw()["hf_config"], "num_hidden_layers": 2_000_000}))
    with pytest.raises(ModelConfigError, match=f"{layers}: num_hidden_layers must be a whole number in 1..4,096"):
        load_hf_config(layers)
    assert time.perf_counter() - start < 5


def test_a_loaded_config_carries_the_hash_of_its_bytes(tmp_path):
    import hashlib
    file = tmp_path / "config.json"
    file.write_text(json.dumps(_raw()["hf_config"]))
    assert load_hf_config(tmp_path).sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
