"""The workshop's reference solutions (swa_kit.lessons.workshop) against independent computations.

Oracles: hand arithmetic from the config.json of data/models, each API's window value for W keys
written out literally, masks built from each API's own rule, KV written into real pools and read
back, and attention computed by hand on fresh random inputs. No check re-calls the solution's
own chain of functions.
"""

from __future__ import annotations

import json
from pathlib import Path
import random

import numpy as np
import pytest
import torch

from swa_kit.engine import routing
from swa_kit.launch.inputs import Launch
from swa_kit.measure import audit, trace
from swa_kit.sglang_versions import BEFORE_38756, SGLANG_VERSION
from swa_kit.lessons.workshop import debugging, dispatch, drafts, engines, kernels, pools, story, windows
from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.models.configs import MODELS_DIR
from swa_kit.engine.call_sites import SITES, site_path
from swa_kit.errors import SlotError, UsageError
from swa_kit.engine.pools import KVWriteLoc
from swa_kit.engine.resolver import RESOLVERS, read_keys, slots_read
from swa_kit.resources import data_path
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.engine.workers import request_ids_past_swa_buffer

# -- independent helpers -------------------------------------------------------------------------


def assert_unreadable(verdict, *named: str) -> None:
    """A check that could not read the answer says so, as a verdict, naming what it accepts."""
    assert verdict.ok is False and "I could not read" in verdict.message, verdict
    for text in named:
        assert text in verdict.message, (text, verdict.message)


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
# (the sources are named in swa_kit/window.py). Used to count keys without the kit's converters.
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
    "attention_gym": lambda v: lambda q, k: k <= q and q - k <= v,  # its sliding-window mask_mod
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
                "aiter_unified": (W - 1, 0), "aiter_v1": W, "flex": W, "flash_attn_4": (W - 1, 0),
                "attention_gym": W - 1}
    answer = windows.window_everywhere("gemma3-27b")
    assert answer == expected
    for convention, value in answer.items():
        assert keys_seen(convention, value) == W, convention


@pytest.mark.parametrize("held_in", ["hf", "sglang"])
def test_unconverted_values_attend_one_key_off(held_in):
    W = random.Random().randint(2, 3000)
    held = W if held_in == "hf" else W - 1
    answer = windows.keys_if_passed_unconverted(W, held_in)
    for convention, keys in answer.items():
        value = (held, 0) if convention in ("flash_attn", "aiter_ck", "aiter_unified", "flash_attn_4") else held
        assert keys == keys_seen(convention, value), (convention, W)
    counting_w = {"hf", "aiter_v1", "flex"}
    shift = {name: (0 if name in counting_w else 1) - (0 if held_in == "hf" else 1) for name in answer}
    assert answer == {name: W + shift[name] for name in answer}


def test_window_of_one_held_in_sglang_turns_paged_v1_off():
    answer = windows.keys_if_passed_unconverted(1, "sglang")
    assert answer["aiter_v1"] is None  # 0 is paged_attention_v1's "no window"
    assert isinstance(answer["hf"], str) and isinstance(answer["flex"], str)  # 0 keys: refused, not clamped
    assert answer["sglang"] == answer["flashinfer"] == 1


def test_check_window_everywhere():
    W = raw("gemma3-27b")["kinds"]["sliding"]["window"]["value"]
    by_hand = {"hf": W, "sglang": W - 1, "flash_attn": [W - 1, 0], "aiter_ck": [W - 1, 0], "flashinfer": W - 1,
               "aiter_unified": [W - 1, 0], "aiter_v1": W, "flex": W, "flash_attn_4": [W - 1, 0],
               "attention_gym": W - 1}  # lists accepted
    assert windows.check_window_everywhere(...).ok is None
    assert windows.check_window_everywhere(by_hand).ok is True
    name = random.choice(list(by_hand))
    off = {**by_hand, name: W if by_hand[name] == W - 1 else W - 1}
    verdict = windows.check_window_everywhere(off)
    assert verdict.ok is False and f"1 of {len(by_hand)} wrong" in verdict.message and repr(name) in verdict.message
    assert_unreadable(windows.check_window_everywhere({"hf": W}), "missing 'sglang'")
    assert windows.check_window_everywhere({k.upper(): v for k, v in by_hand.items()}).ok is True


def test_check_unconverted_against_each_apis_rule():
    pairs = ("flash_attn", "aiter_ck", "aiter_unified", "flash_attn_4")
    by_hand = {c: keys_seen(c, (1024, 0) if c in pairs else 1024) for c in API_RULES}
    assert windows.check_unconverted(...).ok is None
    assert windows.check_unconverted(by_hand).ok is True
    assert sorted(set(by_hand.values())) == [1024, 1025]  # the config value passed as is: never one short
    name = random.choice(list(by_hand))
    assert windows.check_unconverted({**by_hand, name: by_hand[name] + 1}).ok is False
    assert_unreadable(windows.check_unconverted([1024]), "exactly the keys")


def _tree_columns_by_hand(token, parents, prefix, window):
    """Draft token i sits at prefix + depth(i); it sees committed keys and its ancestors (itself included)
    within the window, never a sibling."""
    def depth(i):
        return 0 if parents[i] < 0 else 1 + depth(parents[i])

    pos = prefix + depth(token)
    chain, i = [], token
    while i >= 0:
        chain.append(i)
        i = parents[i]
    committed = [j for j in range(prefix) if pos - j < window]
    return committed + sorted(prefix + a for a in chain if pos - (prefix + depth(a)) < window)


def test_tree_keys_by_hand():
    rng = random.Random()
    parents = windows.TREE["parents"]
    for token in range(len(parents)):
        prefix, window = rng.randint(1, 12), rng.randint(1, 6)
        assert windows.tree_keys_seen(token, parents, prefix, window) == \
            _tree_columns_by_hand(token, parents, prefix, window), (token, prefix, window)
    token = 3
    truth = _tree_columns_by_hand(token, parents, windows.TREE["prefix"], windows.TREE["window"])
    assert windows.check_tree_keys(...).ok is None
    assert windows.check_tree_keys(list(reversed(truth))).ok is True
    sibling = windows.TREE["prefix"] + 4  # token 4 shares token 3's parent: never attended
    assert windows.check_tree_keys(sorted(truth[1:] + [sibling])).ok is False
    assert_unreadable(windows.check_tree_keys("7, 8"), "list of whole numbers")
    assert windows.check_tree_keys(np.array(truth)).ok is True
    with pytest.raises(UsageError, match="99"):
        windows.tree_keys_seen(99)


def test_memory_rows_by_hand():
    ctx = 128 * 1024
    rows = {r["model"]: r for r in story.memory_rows(("gemma3-27b", "gemma4-31b"), ctx)}
    # SGLang 0.5.23's model overrides set disable_hybrid_swa_memory for Gemma-2/3: one pool, nothing saved.
    assert rows["gemma3-27b"]["sglang_hybrid_pool"] is False and rows["gemma3-27b"]["saved_pct_sglang_default"] == 0.0
    # Gemma-4: 10 full layers of 81,920 / 10 B, 50 sliding of 819,200 / 50 B per token, window 1024 keys.
    full, swa, W = 81_920, 819_200, raw("gemma4-31b")["kinds"]["sliding"]["window"]["value"]
    assert rows["gemma4-31b"]["saved_pct_sglang_default"] == round(100 * 0.2 * swa / (full + swa), 1)
    assert rows["gemma4-31b"]["saved_pct_min_per_request_128k"] == \
        round(100 * swa * (ctx - W) / ((full + swa) * ctx), 1)
    assert (rows["gemma4-31b"]["sliding_layers"], rows["gemma4-31b"]["full_layers"]) == \
        (layer_types("gemma4-31b").count("sliding"), layer_types("gemma4-31b").count("full"))


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
    answer = pools.swa_pool_saving("gpt-oss-20b", ctx)
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
        assert pools.swa_pool_saving("gpt-oss-20b", ctx).saved_bytes == saved, ctx


def test_slots_held_by_hand_and_by_the_allocators_free_lists():
    from swa_kit.engine.workers import MODEL_KINDS, build_workers, run_decode

    window = 4  # the notebook's tiny hybrid model: sliding layers attend 4 keys
    assert MODEL_KINDS["hybrid_swa"].window_keys == window
    rng = random.Random()
    prompt, steps = rng.randint(1, 10), rng.randint(0, 12)
    assert pools.slots_held(prompt, steps) == {"full": prompt + steps, "swa": min(window, prompt + steps)}
    workers = build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=24)
    run_decode(workers, **pools.DECODE_RUN)
    allocator = workers.target.token_to_kv_pool_allocator
    held = {"full": 40 - allocator.full_available_size(), "swa": 12 - allocator.swa_available_size()}
    assert pools.slots_held() == held == {"full": sum(pools.DECODE_RUN.values()), "swa": window}
    assert pools.check_slots_held(..., 4).ok is None
    assert pools.check_slots_held(held["full"], held["swa"]).ok is True
    assert pools.check_slots_held(held["full"], held["full"]).ok is False
    assert_unreadable(pools.check_slots_held(16, "4"), "'4'", "without quotes")
    assert pools.check_slots_held(np.int64(held["full"]), torch.tensor(held["swa"])).ok is True


def test_check_hybrid_saving_by_hand():
    d = raw("gpt-oss-20b")
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    types = layer_types("gpt-oss-20b")
    full, swa = types.count("full") * per["full"], types.count("sliding") * per["sliding"]
    ctx, W = 128 * 1024, d["kinds"]["sliding"]["window"]["value"]
    minimum = 100 * swa * (ctx - W) / ((full + swa) * ctx)
    default = 100 * 0.2 * swa / (full + swa)
    assert pools.check_hybrid_saving(..., 10).ok is None
    assert pools.check_hybrid_saving(minimum, default).ok is True
    swapped = pools.check_hybrid_saving(default, minimum)
    assert swapped.ok is False and "minimum" in swapped.message
    assert pools.check_hybrid_saving(minimum, minimum).ok is False  # the default is not the minimum
    assert_unreadable(pools.check_hybrid_saving("50", 10), "'50'")


# -- 03 ------------------------------------------------------------------------------------------


def _reads_right_keys(workers, resolver, written):
    """Whether the draft's layer 0 reads, for every attended position, the key written for it."""
    read = slots_read(workers, "draft", resolver, 0, 1, 10)
    try:
        got = read_keys(workers, read)
    except SlotError:
        return False
    return torch.equal(got, written[read.attended])


def test_frozen_kv_mtp_is_broken_by_the_legacy_resolver_only():
    workers, ids = request_ids_past_swa_buffer(SpeculativeAlgorithm.FROZEN_KV_MTP)
    target_pool, draft = workers.target.token_to_kv_pool, workers.draft
    layer = draft.source_layer(0)
    assert draft.layer_is_sliding(0) and target_pool.is_swa_layer(layer)
    written = torch.randn(10, *target_pool.get_key_buffer(layer).shape[1:])
    # The target writes its KV as SGLang's forward does: a sliding layer at the translated SWA slots.
    target_pool.set_kv_buffer(layer, KVWriteLoc(ids, swa_loc=target_pool.translate_loc_from_full_to_swa(ids)),
                              written, written.clone())
    broken = {name for name in RESOLVERS if not _reads_right_keys(workers, name, written)}
    assert broken == {"legacy"}
    answer = drafts.resolvers_that_break("FROZEN_KV_MTP")
    assert set(answer) == broken
    assert "no translation" in answer["legacy"] and "full-pool slot ids" in answer["legacy"]


def test_eagle_is_broken_by_the_naive_resolver_only():
    workers, ids = request_ids_past_swa_buffer(SpeculativeAlgorithm.EAGLE)
    own = workers.draft.token_to_kv_pool.get_key_buffer(0)
    written = torch.randn(10, *own.shape[1:])
    own[ids] = written  # an EAGLE draft writes its own pool at the allocator's full ids
    broken = {name for name in RESOLVERS if not _reads_right_keys(workers, name, written)}
    assert broken == {"naive"}
    answer = drafts.resolvers_that_break("EAGLE")
    assert set(answer) == broken and "#25103" in answer["naive"]


# -- 04 ------------------------------------------------------------------------------------------


def test_guard_fires_then_unified_attention_fixes_it():
    d = raw("gemma3-27b")
    types = layer_types("gemma3-27b")
    sliding = [i for i, t in enumerate(types) if t == "sliding"]
    W = d["kinds"]["sliding"]["window"]["value"]
    message, fixed = dispatch.guard_then_fix("gemma3-27b", "decode")
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
    message, plan = dispatch.guard_then_fix("gemma4-31b", "decode")
    assert message is None and plan.error is None


def test_bad_inputs_raise_with_the_value():
    with pytest.raises(ValueError, match="0"):
        pools.swa_pool_saving("gpt-oss-20b", 0)
    with pytest.raises(ValueError, match="no-such-model"):
        pools.swa_pool_saving("no-such-model")
    with pytest.raises(ValueError, match="None"):
        windows.keys_if_passed_unconverted(None)
    with pytest.raises(ValueError, match="-1.0"):
        kernels.headline_floor_us(8192, -1.0)


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
    answer = dispatch.attended_keys_per_site(W)
    unified = {name for name in SITES if name.endswith(".unified")}
    # SGLang's aiter call sites: unified paths get (sws - 1, 0) -> W - 1 keys; CK prefill (sws, -1) -> W; paged decode
    # and the legacy verify take no window -> the whole context.
    assert {s for s, n in answer.items() if n == W - 1} == unified
    assert answer["extend.ck"] == W
    assert answer["decode.paged"] > W and answer["verify.legacy"] > W
    assert dispatch.one_key_short_sites(W) == [s for s in SITES if s in unified]

    # The decode site on random data, against attention computed by hand over the last W - 1 keys.
    site = SITES["decode.unified"]
    path = site_path(site)
    L = W + 7
    batch = random_paged_batch([1], [L], page_size=16 if path.kv_layout == "block_table" else 1,
                               generator=torch.Generator().manual_seed(random.randint(0, 9999)))
    slots = batch.request_slots(0).long()
    keys, values = batch.k_buffer[slots].clone(), batch.v_buffer[slots].clone()  # before the freed slots are poisoned
    poison_unattended(batch, W, fill=1e4)
    out = path.run(batch, site.window_arg(W - 1)).out[0].double()
    by_hand = _attend_by_hand(batch.q[0], keys, values, W - 1, batch.sm_scale)
    assert (out - by_hand).abs().max() < 1e-4
    assert (out - _attend_by_hand(batch.q[0], keys, values, W, batch.sm_scale)).abs().max() > 1e-3


@pytest.mark.parametrize("model, env", [("gemma4-31b", {}), ("gemma3-27b", {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})])
def test_one_key_short_layers_are_the_sliding_layers(model, env):
    sliding = [i for i, t in enumerate(layer_types(model)) if t == "sliding"]
    assert dispatch.one_key_short_layers(model, "decode", env=env) == sliding


# -- 05 ------------------------------------------------------------------------------------------


def test_decode_bytes_gemma4_by_hand():
    d = raw("gemma4-31b")
    types = layer_types("gemma4-31b")
    ctx = 128 * 1024
    W = d["kinds"]["sliding"]["window"]["value"]
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    answer = kernels.decode_kv_bytes("gemma4-31b", ctx)
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
        assert kernels.headline_floor_us(ctx, tbs) == pytest.approx(by_hand(ctx), rel=1e-12)
    assert kernels.headline_floor_us(8192, tbs) == kernels.headline_floor_us(131072, tbs)
    with pytest.raises(UsageError, match="copy bandwidth"):
        kernels.headline_floor_us(8192, 0.0)


# -- 00: the story -------------------------------------------------------------------------------


def test_story_memory_by_hand():
    d = raw("gemma4-31b")
    types = layer_types("gemma4-31b")
    per = {kind: per_token_bytes(d["kinds"][kind]) for kind in d["kinds"]}
    full, swa = types.count("full") * per["full"], types.count("sliding") * per["sliding"]
    memory = story.story_memory("gemma4-31b")
    assert memory["one_pool_bytes_per_token"] == full + swa
    assert memory["default_bytes_per_token"] == pytest.approx(full + 0.8 * swa)
    # 10 x 4 x 1024 x 2 = 81,920 B full; 50 x 16 x 512 x 2 = 819,200 B sliding: saves 0.2 x 819200 / 901120
    assert (full, swa) == (81_920, 819_200)
    assert memory["default_saved_fraction"] == pytest.approx(0.2 * 819_200 / 901_120)
    ctx = 128 * 1024
    assert memory["minimum_request_bytes"] == full * ctx + swa * d["kinds"]["sliding"]["window"]["value"]
    ratio = random.Random().uniform(0.05, 1.0)
    sized = story.story_memory("gemma4-31b", ratio=ratio)["default_bytes_per_token"]
    assert abs(sized - (full + ratio * swa)) <= 0.5, ratio  # the sizing reports whole bytes (rounded)
    with pytest.raises(UsageError, match="1.5"):
        story.story_memory("gemma4-31b", ratio=1.5)


def test_check_default_saving():
    truth = 100 * 0.2 * 819_200 / 901_120
    assert story.check_default_saving(...).ok is None
    assert story.check_default_saving(round(truth, 1)).ok is True
    minimum = story.check_default_saving(90)
    assert minimum.ok is False and "per-request minimum" in minimum.message
    assert story.check_default_saving(truth + 5).ok is False
    assert_unreadable(story.check_default_saving("18"), "'18'")
    assert_unreadable(story.check_default_saving(float("nan")), "nan")
    assert story.check_default_saving(np.float32(truth)).ok is True


def test_check_triage():
    costs = {"draft": "acceptance", "target": "output", "verify": "output"}  # the rule, written out independently
    right = {case: costs[route] for case, route in story.TRIAGE_CASES.items()}
    assert story.check_triage(...).ok is None
    assert story.check_triage(right).ok is True
    flipped = dict(right)
    case = random.choice(list(flipped))
    flipped[case] = "output" if flipped[case] == "acceptance" else "acceptance"
    verdict = story.check_triage(flipped)
    assert verdict.ok is False and f"1 of {len(right)} wrong" in verdict.message and case in verdict.message
    assert_unreadable(story.check_triage({"something": "output"}), "TRIAGE_CASES")
    assert story.check_triage({case: cost.upper() for case, cost in right.items()}).ok is True
    assert_unreadable(story.check_triage({**right, case: "speed"}), "'acceptance'", "'output'")
    with pytest.raises(UsageError, match="'verifier'"):
        story.triage("verifier")


def test_triage_cases_put_both_seed_bugs_on_the_draft():
    """The PR's FROZEN_KV MTP case, by the audit before PR #38756: the draft's sliding routes read the SWA buffer
    with the full page table (untranslated ids), and its decode reaches the windowless paged decode."""
    before = audit.audit(Launch.from_inputs(model="gemma4-31b", sglang_version=BEFORE_38756,
                                            server_args=story.SEED_LAUNCH["server_args"]))
    wrong = {(w, m): [e for e in plan.layers if e.kind == "sliding" and e.kit_verdict]
             for (w, m), plan in before.decisions.routes.items()}
    assert {key for key, entries in wrong.items() if entries} == {("draft", "draft_extend"), ("draft", "draft_decode")}
    decode = wrong[("draft", "draft_decode")][0]
    assert decode.kernel == "paged_attention_ragged" and decode.page_table == "full" and decode.buffer == "swa"
    seed = [c for c in story.TRIAGE_CASES if "PR #38756" in c]
    assert len(seed) == 2 and {story.TRIAGE_CASES[c] for c in seed} == {"draft"}
    # the verify case is a target route only speculation reaches: the plan's EAGLE topk 4 verify
    verify = routing.plan("gemma4-31b", "verify", spec="eagle", topk=4, strict=False)
    assert all(e.kernel == "extend_attention_fwd" and e.judgement for e in verify.layers if e.kind == "sliding")
    assert "verify" in story.TRIAGE_CASES.values() and story.triage("verify") == "output"


def test_pr_fixed_rows_are_the_audits_routes():
    rows = story.pr_fixed_rows()
    assert {(r["worker"], r["mode"]) for r in rows} == {("draft", "draft_extend"), ("draft", "draft_decode")}
    for version, tag in ((BEFORE_38756, "before"), (SGLANG_VERSION, "after")):
        routes = audit.to_json(audit.audit(Launch.from_inputs(model="gemma4-31b", sglang_version=version,
                                                              server_args=story.SEED_LAUNCH["server_args"])))
        for row in rows:
            (route,) = [r for r in routes["routes"]
                        if (r["worker"], r["mode"], r["kind"]) == (row["worker"], row["mode"], "sliding")]
            assert all(row[f"{f}_{tag}"] == route[f] for f in ("kernel", "page_table", "keys", "kit")), (row, route)
    # after the PR the draft takes the unified route: right pool, one key short like every unified call site
    assert all(r["kit_before"] == "WRONG KEYS" and r["kit_after"] == "ONE KEY SHORT" for r in rows)


def test_triage_rule_holds_on_the_tiny_model():
    """The oracle: run the tiny model. Draft-side bugs never change the output (or stop the run); target-side
    bugs do."""
    from swa_kit.lessons.tiny_model import load_models
    from swa_kit.lessons.speculative import DEMO_PROMPTS, greedy_decode, guard_experiment, resolver_rows

    models = load_models()
    prompts = [models.cfg.encode(p) for p in DEMO_PROMPTS[:2]]
    plain = greedy_decode(models, prompts, 48)
    rows, _ = resolver_rows(models, prompts, 48, plain)
    broken = {("eagle", "naive"), ("frozen_kv_mtp", "legacy")}
    draft_bugs = [r for r in rows if (r["algorithm"], r["resolver"]) in broken]
    assert len(draft_bugs) == 2
    fixed = {r["algorithm"]: r for r in rows if r["resolver"] == "fixed"}
    for r in draft_bugs:
        assert r["error"] is not None or (r["agreement_with_plain"] == 1.0
                                          and r["acceptance_rate"] < fixed[r["algorithm"]]["acceptance_rate"]), r
    assert guard_experiment(models, prompts, 48, plain)["agreement_with_plain"] < 1.0
    assert {story.TRIAGE_CASES[c] for c in story.TRIAGE_CASES if "resolver" in c} == {"draft"}
    assert {story.triage(w) for w in ("draft", "target", "verify")} == {"acceptance", "output"}


# == notebooks 03-05: the exercises' checks ======================================================


def test_check_resolver_breaks_against_real_reads():
    broken = {}
    for algorithm in (SpeculativeAlgorithm.FROZEN_KV_MTP, SpeculativeAlgorithm.EAGLE):
        workers, ids = request_ids_past_swa_buffer(algorithm)
        if algorithm is SpeculativeAlgorithm.EAGLE:
            own = workers.draft.token_to_kv_pool.get_key_buffer(0)
            written = torch.randn(10, *own.shape[1:])
            own[ids] = written
        else:
            pool, layer = workers.target.token_to_kv_pool, workers.draft.source_layer(0)
            written = torch.randn(10, *pool.get_key_buffer(layer).shape[1:])
            pool.set_kv_buffer(layer, KVWriteLoc(ids, swa_loc=pool.translate_loc_from_full_to_swa(ids)),
                               written, written.clone())
        (broken[algorithm.name],) = [n for n in RESOLVERS if not _reads_right_keys(workers, n, written)]
    assert drafts.check_resolver_breaks(...).ok is None
    assert drafts.check_resolver_breaks(broken).ok is True
    swapped = drafts.check_resolver_breaks({"EAGLE": broken["FROZEN_KV_MTP"], "FROZEN_KV_MTP": broken["EAGLE"]})
    assert swapped.ok is False and "EAGLE" in swapped.message and "FROZEN_KV_MTP" in swapped.message
    assert drafts.check_resolver_breaks({**broken, "EAGLE": "fixed"}).ok is False
    assert_unreadable(drafts.check_resolver_breaks({"MEDUSA": "naive"}), "MEDUSA")
    assert drafts.check_resolver_breaks({k: v.title() for k, v in broken.items()}).ok is True  # "Legacy"
    assert_unreadable(drafts.check_resolver_breaks(["legacy", "naive"]), "'EAGLE'")


def test_check_which_worker():
    right = {symptom: accepted[0] for symptom, accepted in drafts.SYMPTOMS.items()}
    assert set(right.values()) == {"draft", "target", "verify", "neither"}
    assert drafts.check_which_worker(...).ok is None
    assert drafts.check_which_worker(right).ok is True
    symptom = random.choice(list(right))
    flipped = {**right, symptom: "target" if "target" not in drafts.SYMPTOMS[symptom] else "draft"}
    verdict = drafts.check_which_worker(flipped)
    assert verdict.ok is False and f"1 of {len(right)} wrong" in verdict.message and symptom in verdict.message
    assert_unreadable(drafts.check_which_worker({"the GPU is hot": "target"}), "SYMPTOMS")
    assert drafts.check_which_worker({k: v.capitalize() for k, v in right.items()}).ok is True  # "Draft"


def test_a_fault_only_with_speculation_may_be_the_draft_or_target_verify():
    """Both routes speculation adds can read untranslated ids from an SWA buffer (the old rule marked 'verify'
    wrong): the FROZEN_KV MTP draft before PR #38756, and target verify with EAGLE topk 4 on 0.5.23."""
    (fault,) = [s for s in drafts.SYMPTOMS if "illegal memory access" in s]
    draft = routing.plan("gemma4-31b", "draft_decode", spec="frozen_kv_mtp", worker="draft", resolver="legacy",
                         strict=False)
    verify = routing.plan("gemma4-31b", "verify", spec="eagle", topk=4, strict=False)
    for plan in (draft, verify):
        assert any(e.page_table == "full" and e.buffer == "swa" for e in plan.layers if e.kind == "sliding")
    right = {symptom: accepted[0] for symptom, accepted in drafts.SYMPTOMS.items()}
    for answer in ("draft", "verify"):
        assert drafts.check_which_worker({**right, fault: answer}).ok is True
    for answer in ("target", "neither"):
        assert drafts.check_which_worker({**right, fault: answer}).ok is False
    drift = [s for s, accepted in drafts.SYMPTOMS.items() if "bf16" in s or "temperature" in s]
    assert len(drift) == 2 and all(drafts.SYMPTOMS[s] == ("neither",) for s in drift)


def test_guard_and_way_out_by_hand():
    types = layer_types("gemma3-27b")
    W = raw("gemma3-27b")["kinds"]["sliding"]["window"]["value"]
    truth = dispatch.guard_and_way_out("gemma3-27b")
    # The guard refuses every sliding layer; unified_attention given (sws - 1, 0) = (W - 2, 0) attends 1 + (W - 2).
    assert truth == {"refused_layers": types.count("sliding"), "intended_keys": W, "keys_after_way_out": W - 1}
    assert dispatch.check_guard_way_out(..., W - 1).ok is None
    assert dispatch.check_guard_way_out(types.count("sliding"), W - 1).ok is True
    wrong = dispatch.check_guard_way_out(types.count("sliding"), W)
    assert wrong.ok is False and "effective_keys" in wrong.message and "count" not in wrong.message
    assert dispatch.check_guard_way_out(len(types), W - 1).ok is False
    assert_unreadable(dispatch.check_guard_way_out("52", W - 1), "'52'")
    assert_unreadable(dispatch.check_guard_way_out([52], W - 1), "[52]")
    assert dispatch.check_guard_way_out(torch.tensor(types.count("sliding")), np.int32(W - 1)).ok is True
    assert dispatch.check_guard_way_out(..., ...).message.count("52") == 0  # the hint never gives it away


def test_check_one_key_short_sites():
    unified = sorted(name for name in SITES if name.endswith(".unified"))  # the sites given (sws - 1, 0)
    assert dispatch.check_one_key_short_sites(...).ok is None
    assert dispatch.check_one_key_short_sites(unified).ok is True
    missing = dispatch.check_one_key_short_sites(unified[1:] + ["extend.ck"])
    assert missing.ok is False and unified[0] in missing.message and "extend.ck" in missing.message
    assert_unreadable(dispatch.check_one_key_short_sites(["decode.fast"]), "'decode.fast'", "'decode.unified'")
    assert_unreadable(dispatch.check_one_key_short_sites("decode.unified"), "a list")
    assert_unreadable(dispatch.check_one_key_short_sites(None), "a list")
    assert_unreadable(dispatch.check_one_key_short_sites(4), "a list")
    assert dispatch.check_one_key_short_sites([s.upper() for s in unified]).ok is True


def test_what_the_window_buys_gemma4_by_hand():
    # 50 x 16 x 512 x 2 x 1024 = 800 MiB of sliding reads beside 10 x 4 x 1024 x 2 x 128k = 10 GiB of full ones
    share = 800 / (800 + 10 * 1024)
    buys = kernels.what_the_window_buys("gemma4-31b", 128 * 1024)
    assert buys["sliding_share_of_step"] == pytest.approx(share)
    assert buys["memory_saved_default"] == pytest.approx(0.2 * 819_200 / 901_120)
    assert buys["memory_saved_minimum"] == pytest.approx(1 - (800 + 10 * 1024) / (901_120 * 128 * 1024 / 2**20))
    assert buys["memory_saved_default"] > buys["sliding_share_of_step"]
    assert kernels.check_sliding_share(...).ok is None
    assert kernels.check_sliding_share(round(100 * share, 1)).ok is True
    assert kernels.check_sliding_share(100 * (1 - share)).ok is False
    assert_unreadable(kernels.check_sliding_share(True), "True")


def test_check_headline_floor_against_the_recorded_run():
    from swa_kit.measure.bench import recorded_files

    (newest,) = [p for p in recorded_files() if p.name == "h200_2026-12-01_v13.json"]  # the run the check reads
    copy_tbs = json.loads(newest.read_text())["copy_tbs"]
    by_hand = 2 * 32 * 8 * 4096 * 128 * 2 / (copy_tbs * 1e12) * 1e6  # K and V of the window, bf16
    assert kernels.check_headline_floor(...).ok is None
    assert kernels.check_headline_floor(round(by_hand, 1)).ok is True
    assert kernels.check_headline_floor(round(by_hand, 1), context=8192).ok is True
    assert kernels.check_headline_floor(by_hand * 32).ok is False  # the whole 128k context, not the window


def test_check_decode_window_against_the_recorded_trace_and_by_hand():
    # By hand: sliding_window_size = 1024 - 1; the unified call site passes (sws - 1, 0); the kernel attends
    # 1 + left. The recorded trace of SGLang's own forward_decode carries the same argument for layer 0.
    sws = 1024 - 1
    by_hand = ((sws - 1, 0), 1 + (sws - 1))
    traced = next(r for r in trace.read_records(data_path("traces", "gemma4-31b_decode_aiter_cpu.jsonl"))
                  if r.layer == 0)
    assert tuple(traced.window_arg) == by_hand[0]
    assert debugging.check_decode_window(*by_hand).ok is True
    assert debugging.check_decode_window(..., ...).ok is None
    wrong = debugging.check_decode_window((sws, 0), 1 + sws)
    assert wrong.ok is False and "1022" not in wrong.message and "1023" not in wrong.message
    assert_unreadable(debugging.check_decode_window(1022, 1023), "pair")
    assert debugging.check_decode_window(np.array(by_hand[0]), torch.tensor(by_hand[1])).ok is True


@pytest.mark.parametrize("window", [2, 5, 16, 33])
def test_first_changed_position_is_where_a_query_first_sees_the_whole_window(window):
    # A query at position p attends min(p + 1, W) keys: the two windows first differ where p + 1 = W.
    assert debugging.first_position_one_short_changes(window) == window - 1
    assert debugging.check_first_changed_position(window - 1, window).ok is True
    assert debugging.check_first_changed_position(window, window).ok is False
    assert debugging.check_first_changed_position(..., window).ok is None


def test_first_changed_position_matches_a_transformers_model():
    transformers = pytest.importorskip("transformers")
    from swa_kit.measure.key_gap import compare_window, tiny_model_from_config

    bundled = json.loads(data_path("models", "gemma3-27b.json").read_text())["hf_config"]
    model = tiny_model_from_config(transformers.AutoConfig.for_model(**bundled), window=8, seed=1)
    prompt = torch.randint(0, model.config.vocab_size, (24,), generator=torch.Generator().manual_seed(1))
    gap = compare_window(model, prompt, new_tokens=1)
    assert gap.first_changed_position == debugging.first_position_one_short_changes(8)


def test_default_launches_plan_what_the_routes_attend():
    """Notebook 04's section 5: the audit's default backend per model, held against the plan on that backend."""
    rows = {r["model"]: r for r in dispatch.default_launch_rows(("gpt-oss-120b", "gemma4-31b"))}
    assert {m: r["attention_backend"] for m, r in rows.items()} == {"gpt-oss-120b": "aiter", "gemma4-31b": "triton"}
    source = (Path(__file__).resolve().parents[1] / "notebooks" / "04_aiter_dispatch_and_guards.py").read_text()
    for model, row in rows.items():
        layer = next(e for e in routing.plan(model, "decode", backend=row["attention_backend"], strict=False).layers
                     if e.kind == "sliding")
        assert row["keys"] == f"{layer.effective_keys}/{layer.intended_keys}" and row["decode_kernel"] == layer.kernel
        assert layer.effective_keys == layer.intended_keys - 1  # neither default decodes the whole window
        assert f"{layer.effective_keys} of {layer.intended_keys}" in source  # the takeaway's numbers


def _gemma4_text() -> dict:
    return json.loads((MODELS_DIR / "gemma4-31b.json").read_text())["hf_config"]["text_config"]


def test_unified_window_args_by_hand():
    # SGLang: sliding_window_size = W - 1 and its unified call sites pass (sws - 1, 0); vLLM's ROCm backends store
    # FlashAttention's (W - 1, 0) and pass it. aiter's unified kernel attends 1 + left keys.
    window = _gemma4_text()["sliding_window"]
    sglang, vllm = (window - 2, 0), (window - 1, 0)
    truth = engines.unified_window_args()
    assert (truth["sglang"], truth["vllm"]) == (sglang, vllm)
    assert (truth["sglang_keys"], truth["vllm_keys"], truth["meant"]) == (window - 1, window, window)
    assert engines.check_unified_window_args(sglang, vllm).ok is True
    assert engines.check_unified_window_args(vllm, vllm).ok is False
    assert engines.check_unified_window_args(..., ...).ok is None
    assert_unreadable(engines.check_unified_window_args(window - 2, vllm), "pair")


def test_context_token_ratio_by_hand():
    # Per GPU at the notebook's TP 2: heads split over the ranks, K and V stored, 2 bytes (bfloat16). SGLang: full
    # cell + 0.8 (its default swa_full_tokens_ratio) x sliding cell; vLLM: the full layers only.
    text, tp = _gemma4_text(), 2
    transformers = pytest.importorskip("transformers")
    layer_types = transformers.Gemma4TextConfig(**text).layer_types  # the pattern the config leaves to its class
    full_layers = layer_types.count("full_attention")
    sliding_layers = text["num_hidden_layers"] - full_layers
    full = full_layers * (text["num_global_key_value_heads"] // tp) * 2 * text["global_head_dim"] * 2
    sliding = sliding_layers * (text["num_key_value_heads"] // tp) * 2 * text["head_dim"] * 2
    by_hand = (full + 0.8 * sliding) / full
    assert engines.context_token_ratio() == pytest.approx(by_hand)
    assert engines.check_context_token_ratio(round(by_hand, 2)).ok is True
    assert engines.check_context_token_ratio(1 + 0.8 * sliding / (full + sliding)).ok is False
    assert engines.check_context_token_ratio(...).ok is None
