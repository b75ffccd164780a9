"""Model specs in data/models: load, expand, validate, and reject malformed files clearly."""

from __future__ import annotations

import copy
import json
import random

import pytest

from swa_kit.configs import MODELS_DIR, list_models, load_model, parse_model
from swa_kit.errors import ModelConfigError

REQUIRED = {"gemma4-31b", "gpt-oss-20b", "gemma3-27b"}

# Hand-written expectations (FACTS.md section 7 and the sources named in each file).
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


def test_windows_are_converted_through_the_conventions():
    # MiMo writes the window SGLang's way (keys - 1): 128 -> 129 keys.
    mimo = load_model("mimo-v2-flash").kinds["sliding"]
    assert (mimo.window_convention, mimo.window_value, mimo.window.keys) == ("sglang", 128, 129)
    g4 = load_model("gemma4-31b").kinds["sliding"]
    assert (g4.window_field, g4.window_convention, g4.window.keys) == ("sliding_window", "hf", 1024)
    scout = load_model("llama4-scout").kinds["chunked"]
    assert scout.window.keys is None and scout.chunk_size == 8192


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


def _mutate(raw, path, value):
    node = raw
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize("path,value,message", [
    (("name",), "GPT_OSS", "lower case"),
    (("dtype",), "int3", "dtype must be one of"),
    (("num_layers",), 0, "positive integer"),
    (("layer_pattern", "cycle"), [], "non-empty list"),
    (("layer_pattern", "cycle"), ["sliding", "mystery"], "does not define"),
    (("layer_pattern", "overrides"), {"99": "full"}, "not a layer id"),
    (("kinds", "sliding", "attention"), "local", "attention must be one of"),
    (("kinds", "sliding", "num_kv_heads"), 7, "not a multiple"),
    (("kinds", "sliding", "head_dim"), -64, "positive integer"),
    (("kinds", "sliding", "window"), KeyError, "needs window"),
    (("kinds", "sliding", "window", "value"), 0, "invalid window value"),
    (("kinds", "sliding", "window", "convention"), "nope", "unknown window convention"),
    (("kinds", "full", "window"), {"field": "x", "convention": "hf", "value": 4}, "only sliding kinds"),
    (("kinds", "sliding", "extra"), 1, "unknown keys"),
    (("sources",), {}, "sources lack"),
    (("sglang_hybrid_swa_pool",), "yes", "true or false"),
    (("layer_types",), ["full"] * 24, "exactly one of"),
])
def test_bad_specs_are_rejected_clearly(path, value, message):
    raw = _mutate(copy.deepcopy(_raw()), path, value)
    with pytest.raises(ModelConfigError, match=message):
        parse_model(raw)


def test_hybrid_without_window_and_unused_kind():
    raw = _raw()
    raw.pop("layer_pattern")
    raw["layer_types"] = ["full"] * 24
    with pytest.raises(ModelConfigError, match="no layer uses"):
        parse_model(copy.deepcopy(raw))
    del raw["kinds"]["sliding"]
    raw["sources"]["layer_types"] = "test"
    with pytest.raises(ModelConfigError, match="no layer is sliding"):
        parse_model(raw)


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
