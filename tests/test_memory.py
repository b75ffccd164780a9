"""KV bytes per token and hybrid-pool savings, checked by hand and against a token-by-token count."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swa_kit.models.configs import load_model, parse_hf_config
from swa_kit.errors import ModelConfigError
from swa_kit.models.memory import (
    CONTEXTS,
    full_pool_bytes_per_token,
    one_pool_bytes_per_token,
    request_bytes,
    savings,
    swa_pool_bytes_per_token,
)


def test_gemma4_by_hand():
    spec = load_model("gemma4-31b")
    sliding = 16 * (256 + 256) * 2  # kv heads x (K + V dims) x bf16 = 16384
    full = 4 * (512 + 512) * 2  # 8192
    assert swa_pool_bytes_per_token(spec) == 50 * sliding == 819_200
    assert full_pool_bytes_per_token(spec) == 10 * full == 81_920
    assert one_pool_bytes_per_token(spec) == 901_120
    rows = {r.context: r for r in savings(spec)}
    assert set(rows) == {8192, 32768, 131072} == set(CONTEXTS)
    for ctx, row in rows.items():
        assert row.one_pool_bytes == ctx * 901_120
        assert row.hybrid_bytes == ctx * 81_920 + 1024 * 819_200
        assert row.sglang_bytes == row.hybrid_bytes
    assert rows[131072].one_pool_bytes == 110 * (1 << 30)  # 110 GiB for one 128k request
    assert rows[8192].saved_fraction == pytest.approx(1 - (8192 * 81_920 + 1024 * 819_200) / (8192 * 901_120))


def test_mimo_uses_separate_v_width_and_129_keys():
    spec = load_model("mimo-v2-flash")
    assert swa_pool_bytes_per_token(spec) == 39 * 8 * (192 + 128) * 2
    assert full_pool_bytes_per_token(spec) == 9 * 4 * (192 + 128) * 2
    assert request_bytes(spec, 1000, hybrid=True) == 1000 * 9 * 2560 + 129 * 39 * 5120


def test_scout_chunk_saves_nothing_inside_one_chunk():
    spec = load_model("llama4-scout")
    rows = {r.context: r for r in savings(spec)}
    assert rows[8192].saved_bytes == 0  # the whole 8k context is one chunk
    assert rows[32768].hybrid_bytes == 32768 * 12 * 4096 + 8192 * 36 * 4096


def test_gemma3_sglang_keeps_one_pool():
    spec = load_model("gemma3-27b")
    for row in savings(spec):
        assert not row.sglang_uses_hybrid
        assert row.sglang_bytes == row.one_pool_bytes == row.context * 62 * 16 * 256 * 2
        assert row.hybrid_bytes < row.one_pool_bytes  # what a hybrid pool would save


def test_slack_and_bad_inputs():
    spec = load_model("gpt-oss-20b")
    per_layer = 8 * 128 * 2
    assert request_bytes(spec, 1000, hybrid=True, swa_slack_tokens=64) == (1000 * 12 + 192 * 12) * per_layer
    assert request_bytes(spec, 100, hybrid=True) == request_bytes(spec, 100, hybrid=False)  # inside the window
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ModelConfigError, match="context"):
            request_bytes(spec, bad, hybrid=True)
    with pytest.raises(ModelConfigError, match="slack"):
        request_bytes(spec, 10, hybrid=True, swa_slack_tokens=-1)


def test_a_swa_pool_kind_without_a_bound_keeps_the_whole_context():
    # A chunked kind built by hand without chunk_size retains every token (LayerKind.retained_tokens is None);
    # request_bytes once added the slack to that None and raised TypeError.
    spec = load_model("llama4-scout")
    kinds = {name: replace(kind, chunk_size=None) for name, kind in spec.kinds.items()}
    unbounded = replace(spec, kinds=kinds)
    assert request_bytes(unbounded, 20_000, hybrid=True, swa_slack_tokens=64) == request_bytes(spec, 20_000,
                                                                                                 hybrid=False)


kinds = st.fixed_dictionaries({
    "kv": st.integers(1, 4), "hd": st.sampled_from([8, 16, 64]), "vhd": st.sampled_from([8, 16]),
    "keys": st.integers(1, 40),
})


@given(sliding=kinds, full=kinds, layers=st.lists(st.sampled_from(["sliding", "full"]), min_size=1, max_size=8),
       context=st.integers(1, 120), dtype=st.sampled_from(["bfloat16", "float32", "float8_e4m3fn"]))
def test_against_token_by_token_count(sliding, full, layers, context, dtype):
    if "sliding" not in layers:
        layers = layers + ["sliding"]
    raw = {  # a layer_types-style config; sliding kinds take SGLang's swa_* head fields
        "architectures": ["SwaKitTinyForCausalLM"], "model_type": "swa_kit_tiny", "dtype": dtype,
        "num_hidden_layers": len(layers), "layer_types": [f"{t}_attention" for t in layers],
        "sliding_window": sliding["keys"], "num_attention_heads": full["kv"], "num_key_value_heads": full["kv"],
        "head_dim": full["hd"], "v_head_dim": full["vhd"], "swa_num_attention_heads": sliding["kv"],
        "swa_num_key_value_heads": sliding["kv"], "swa_head_dim": sliding["hd"], "swa_v_head_dim": sliding["vhd"],
    }
    spec = parse_hf_config(raw)
    size = {"bfloat16": 2, "float32": 4, "float8_e4m3fn": 1}[dtype]
    # Walk every (token, layer): a sliding layer keeps the token iff the newest query still attends it.
    newest = context - 1
    one, hybrid = 0, 0
    for position in range(context):
        for kind_name in layers:
            k = (sliding if kind_name == "sliding" else full)
            cost = k["kv"] * (k["hd"] + k["vhd"]) * size
            one += cost
            if kind_name == "full" or newest - position < sliding["keys"]:
                hybrid += cost
    assert request_bytes(spec, context, hybrid=False) == one
    assert request_bytes(spec, context, hybrid=True) == hybrid
