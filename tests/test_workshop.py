"""The workshop's reference solutions (swa_kit.workshop) against independent computations.

Oracles: hand arithmetic from the config.json of data/models, each API's window rule
written out literally, masks built from each API's own rule, KV written into real pools and read
back, and attention computed by hand on fresh random inputs. No check re-calls the solution's
own chain of functions.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from swa_kit import workshop
from swa_kit.configs import MODELS_DIR
from swa_kit.dispatch import SITES, site_path
from swa_kit.errors import SlotError, UsageError
from swa_kit.pools import KVWriteLoc
from swa_kit.probe import synthetic_batch
from swa_kit.resolver import RESOLVERS, read_keys, slots_read
from swa_kit.workers import SpeculativeAlgorithm, build_workers

# -- independent helpers -------------------------------------------------------------------------


def raw(model: str) -> dict:
    """The bundled config.json's figures, read by hand (no transformers): dtype, layers, each kind's shape."""
    config = json.loads((MODELS_DIR / f"{model}.json").read_text())["hf_config"]
    text = config.get("text_config", config)
    n = text["num_hidden_layers"]
    if config["model_type"] == "gpt_oss":  # transformers' default layer_types: even layers sliding
        types = ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    else:  # Gemma 3 / 4: every 6th layer full
        types = ["full" if (i + 1) % 6 == 0 else "sliding" for i in range(n)]
    sliding = {"num_kv_heads": text["num_key_value_heads"], "head_dim": text["head_dim"],
               "window": {"value": text["sliding_window"]}}
    full = {"num_kv_heads": text.get("num_global_key_value_heads", text["num_key_value_heads"]),
            "head_dim": text.get("global_head_dim", text["head_dim"])}
    return {"dtype": text["dtype"], "layer_types": types, "kinds": {"sliding": sliding, "full": full}}


def layer_types(model: str) -> list[str]:
    return raw(model)["layer_types"]


def per_token_bytes(kind: dict, dtype_bytes: int = 2) -> int:
    return kind["num_kv_heads"] * (kind["head_dim"] + kind.get("v_head_dim", kind["head_dim"])) * dtype_bytes


# Each API's own rule for "key k is visible to query q", with the value as that API takes it
# (each library's own code). Used to count keys without the kit's converters.
def _pair_rule(v):
    return lambda q, k: q - v[0] <= k <= q + v[1]


API_RULES = {
    "hf": lambda v: lambda q, k: k <= q and q - k < v,
    "sglang": lambda v: lambda q, k: k <= q and q - k <= v,
    "flash_attn": _pair_rule,
    "aiter_ck": _pair_rule,
    "flashinfer": lambda v: lambda q, k: k <= q and q - k <= v,
    "aiter_unified": lambda v: lambda q, k: k <= q and q - k < 1 + v[0],
    "aiter_v1": lambda v: lambda q, k: k <= q and q - k < v,
    "flex": lambda v: lambda q, k: k <= q and q - k < v,
    "flash_attn_4": _pair_rule,
}


def keys_seen(convention: str, value, q: int = 5000) -> int:
    rule = API_RULES[convention](value)
    return sum(rule(q, k) for k in range(q + 1))


# -- 01 ------------------------------------------------------------------------------------------


def test_gemma3_window_in_every_api():
    w = raw("gemma3-27b")["kinds"]["sliding"]["window"]
    assert w["value"] == 1024  # Hugging Face's sliding_window counts the query itself
    W = w["value"]
    expected = {"hf": W, "sglang": W - 1, "flash_attn": (W - 1, 0), "aiter_ck": (W - 1, 0), "flashinfer": W - 1,
                "aiter_unified": (W - 1, 0), "aiter_v1": W, "flex": W, "flash_attn_4": (W - 1, 0)}
    answer = workshop.window_everywhere("gemma3-27b")
    assert answer == expected
    for convention, value in answer.items():
        assert keys_seen(convention, value) == W, convention


@pytest.mark.parametrize("held_in", ["hf", "sglang"])
def test_unconverted_values_attend_one_key_off(held_in):
    W = random.Random().randint(2, 3000)
    held = W if held_in == "hf" else W - 1
    answer = workshop.keys_if_passed_unconverted(W, held_in)
    for convention, keys in answer.items():
        value = (held, 0) if convention in ("flash_attn", "aiter_ck", "aiter_unified", "flash_attn_4") else held
        assert keys == keys_seen(convention, value), (convention, W)
    counting_w = {"hf", "aiter_v1", "flex"}
    shift = {name: (0 if name in counting_w else 1) - (0 if held_in == "hf" else 1) for name in answer}
    assert answer == {name: W + shift[name] for name in answer}


def test_window_of_one_held_in_sglang_turns_paged_v1_off():
    answer = workshop.keys_if_passed_unconverted(1, "sglang")
    assert answer["aiter_v1"] is None  # 0 is paged_attention_v1's "no window"
    assert isinstance(answer["hf"], str) and isinstance(answer["flex"], str)  # 0 keys: refused, not clamped
    assert answer["sglang"] == answer["flashinfer"] == 1


# -- 02 ------------------------------------------------------------------------------------------


def test_gpt_oss_20b_saving_at_128k_by_hand():
    d = raw("gpt-oss-20b")
    assert d["dtype"] == "bfloat16"
    types = layer_types("gpt-oss-20b")
    window = d["kinds"]["sliding"]["window"]["value"]
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    ctx = 128 * 1024
    one_pool = sum(per[t] for t in types) * ctx
    hybrid = sum(per[t] * (min(ctx, window) if t == "sliding" else ctx) for t in types)
    answer = workshop.swa_pool_saving("gpt-oss-20b", ctx)
    assert (answer.one_pool_bytes, answer.hybrid_bytes) == (one_pool, hybrid)
    # 24 layers x 8 kv heads x (64 + 64) x 2 bytes: 6 GiB with one pool; 12 sliding layers keep 128 tokens.
    assert one_pool == 6 * 2**30
    assert answer.saved_bytes == 12 * 8 * 128 * 2 * (ctx - 128)
    assert abs(answer.saved_gib - 2.997) < 1e-3 and abs(answer.saved_fraction - 0.4995) < 1e-4


def test_saving_at_random_contexts():
    rng = random.Random()
    d = raw("gpt-oss-20b")
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    window = d["kinds"]["sliding"]["window"]["value"]
    for ctx in [rng.randint(1, window)] + [rng.randint(window, 300_000) for _ in range(3)]:
        saved = sum(per[t] * (ctx - min(ctx, window)) for t in layer_types("gpt-oss-20b") if t == "sliding")
        assert workshop.swa_pool_saving("gpt-oss-20b", ctx).saved_bytes == saved, ctx


# -- 03 ------------------------------------------------------------------------------------------


def _request_past_the_swa_pool(workers):
    """Request 1's full ids run past the SWA buffer: request 0 filled the SWA pool and left its window."""
    alloc = workers.target.token_to_kv_pool_allocator
    first = alloc.alloc(14)
    alloc.free_swa(first[:10])
    ids = alloc.alloc(10)
    workers.target.req_to_token_pool.req_to_token[1, :10] = ids.to(torch.int32)
    return ids


def _reads_right_keys(workers, resolver, written):
    """Whether the draft's layer 0 reads, for every attended position, the key written for it."""
    read = slots_read(workers, "draft", resolver, 0, 1, 10)
    try:
        got = read_keys(workers, read)
    except SlotError:
        return False
    return torch.equal(got, written[read.attended])


def test_frozen_kv_mtp_is_broken_by_the_legacy_resolver_only():
    workers = build_workers("hybrid_swa", SpeculativeAlgorithm.FROZEN_KV_MTP, size=64, size_swa=16)
    ids = _request_past_the_swa_pool(workers)
    target_pool, draft = workers.target.token_to_kv_pool, workers.draft
    layer = draft.source_layer(0)
    assert draft.layer_is_sliding(0) and target_pool.is_swa_layer(layer)
    written = torch.randn(10, *target_pool.get_key_buffer(layer).shape[1:])
    # The target writes its KV as SGLang's forward does: a sliding layer at the translated SWA slots.
    target_pool.set_kv_buffer(layer, KVWriteLoc(ids, swa_loc=target_pool.translate_loc_from_full_to_swa(ids)),
                              written, written.clone())
    broken = {name for name in RESOLVERS if not _reads_right_keys(workers, name, written)}
    assert broken == {"legacy"}
    answer = workshop.resolvers_that_break("FROZEN_KV_MTP")
    assert set(answer) == broken
    assert "no translation" in answer["legacy"] and "full-pool slot ids" in answer["legacy"]


def test_eagle_is_broken_by_the_naive_resolver_only():
    workers = build_workers("hybrid_swa", SpeculativeAlgorithm.EAGLE, size=64, size_swa=16)
    ids = _request_past_the_swa_pool(workers)
    own = workers.draft.token_to_kv_pool.get_key_buffer(0)
    written = torch.randn(10, *own.shape[1:])
    own[ids] = written  # an EAGLE draft writes its own pool at the allocator's full ids
    broken = {name for name in RESOLVERS if not _reads_right_keys(workers, name, written)}
    assert broken == {"naive"}
    answer = workshop.resolvers_that_break("EAGLE")
    assert set(answer) == broken and "#25103" in answer["naive"]


# -- 04 ------------------------------------------------------------------------------------------


def test_guard_fires_then_unified_attention_fixes_it():
    d = raw("gemma3-27b")
    types = layer_types("gemma3-27b")
    sliding = [i for i, t in enumerate(types) if t == "sliding"]
    W = d["kinds"]["sliding"]["window"]["value"]
    message, fixed = workshop.guard_then_fix("gemma3-27b", "decode")
    assert f"layer {sliding[0]} " in message and f"sliding_window_size={W - 1}" in message
    assert "paged_attention_ragged" in message and "SGLANG_USE_AITER_UNIFIED_ATTN=1" in message
    assert f"{len(sliding)} layers refused" in message
    assert fixed.env == {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"} and fixed.error is None
    assert [p.layer for p in fixed.layers] == list(range(len(types)))
    for p in fixed.layers:
        assert p.kernel == "unified_attention" and p.guard is None
        # SGLang passes (sws - 1, 0) with sws = W - 1; a full layer passes (-1, -1).
        assert p.window_arg == ((W - 2, 0) if p.layer in sliding else (-1, -1)), p.layer


def test_no_guard_to_fire_on_a_hybrid_pool_model():
    # Gemma-4 has an SWAKVPool, so every mode is forced onto unified_attention: nothing to fix.
    message, plan = workshop.guard_then_fix("gemma4-31b", "decode")
    assert message is None and plan.error is None


def test_bad_inputs_raise_with_the_value():
    with pytest.raises(ValueError, match="0"):
        workshop.swa_pool_saving("gpt-oss-20b", 0)
    with pytest.raises(ValueError, match="no-such-model"):
        workshop.swa_pool_saving("no-such-model")
    with pytest.raises(ValueError, match="None"):
        workshop.keys_if_passed_unconverted(None)
    with pytest.raises(ValueError, match="-1.0"):
        workshop.headline_floor_us(8192, -1.0)


def _attend_by_hand(q, k, v, keys, scale):
    """One decode query over positions 0..L-1 with GQA, attending the last ``keys`` positions, in float64."""
    L, hkv = k.shape[0], k.shape[1]
    group = q.shape[0] // hkv
    out = []
    for h in range(q.shape[0]):
        kh, vh = k[L - keys:, h // group].double(), v[L - keys:, h // group].double()
        weights = torch.softmax(kh @ q[h].double() * scale, dim=0)
        out.append(weights @ vh)
    return torch.stack(out)


def test_one_key_short_sites_match_facts_and_random_inputs():
    W = random.Random().randint(3, 9)
    answer = workshop.attended_keys_per_site(W)
    unified = {name for name in SITES if name.endswith(".unified")}
    # SGLang's aiter_backend.py: unified paths get (sws - 1, 0) -> W - 1 keys; CK prefill (sws, -1) -> W; paged decode and
    # the legacy verify take no window -> the whole context.
    assert {s for s, n in answer.items() if n == W - 1} == unified
    assert answer["extend.ck"] == W
    assert answer["decode.paged"] > W and answer["verify.legacy"] > W
    assert workshop.one_key_short_sites(W) == [s for s in SITES if s in unified]

    # The decode site on random data, against attention computed by hand over the last W - 1 keys.
    site = SITES["decode.unified"]
    backend = site_path(site)
    L = W + 7
    made = synthetic_batch([1], [L], page_size=16 if backend.kv_layout == "block_table" else 1,
                           garbage=1e4, window_keys=W, generator=torch.Generator().manual_seed(random.randint(0, 9999)))
    out = backend.run(made.batch, site.window_arg(W - 1)).out[0].double()
    by_hand = _attend_by_hand(made.batch.q[0], made.keys[0], made.values[0], W - 1, made.batch.sm_scale)
    assert (out - by_hand).abs().max() < 1e-4
    assert (out - _attend_by_hand(made.batch.q[0], made.keys[0], made.values[0], W, made.batch.sm_scale)
            ).abs().max() > 1e-3


@pytest.mark.parametrize("model, env", [("gemma4-31b", {}), ("gemma3-27b", {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})])
def test_one_key_short_layers_are_the_sliding_layers(model, env):
    sliding = [i for i, t in enumerate(layer_types(model)) if t == "sliding"]
    assert workshop.one_key_short_layers(model, "decode", env=env) == sliding


# -- 05 ------------------------------------------------------------------------------------------


def test_decode_bytes_gemma4_by_hand():
    d = raw("gemma4-31b")
    types = layer_types("gemma4-31b")
    ctx = 128 * 1024
    W = d["kinds"]["sliding"]["window"]["value"]
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    answer = workshop.decode_kv_bytes("gemma4-31b", ctx)
    assert answer["sliding_layers"] == types.count("sliding") * per["sliding"] * W
    assert answer["full_layers"] == types.count("full") * per["full"] * ctx
    assert answer["without_window"] == sum(per[t] for t in types) * ctx
    # 50 x 16 x 512 x 2 x 1024 = 800 MiB; 10 x 4 x 1024 x 2 x 128k = 10 GiB: the full layers dominate.
    assert answer["sliding_layers"] == 800 * 2**20 and answer["full_layers"] == 10 * 2**30


def test_headline_floor_follows_the_window_not_the_context():
    tbs = random.Random().uniform(1.0, 6.0)

    def by_hand(ctx):  # K and V, batch 32, 8 kv heads, head dim 128, bf16, window 4096
        return 2 * 32 * 8 * min(ctx, 4096) * 128 * 2 / (tbs * 1e12) * 1e6

    for ctx in (2048, 8192, 131072):
        assert workshop.headline_floor_us(ctx, tbs) == pytest.approx(by_hand(ctx), rel=1e-12)
    assert workshop.headline_floor_us(8192, tbs) == workshop.headline_floor_us(131072, tbs)
    with pytest.raises(UsageError, match="copy bandwidth"):
        workshop.headline_floor_us(8192, 0.0)
