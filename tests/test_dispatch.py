"""plan(): SGLang aiter routing per mode, layer kind, pool resolution, environment and topk; guards; explain."""

from __future__ import annotations

import dataclasses

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from swa_kit.engine import routing
from swa_kit.measure.explain import explain, layer_ranges
from swa_kit.attention.batch import random_paged_batch
from swa_kit.cli import main
from swa_kit.models.configs import MODELS_DIR, load_model, parse_hf_config
from swa_kit.models.configs import LayerKind
from swa_kit.models.drafts import default_draft_layout, with_window
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.window import to_keys
from swa_kit.engine.workers import build_workers

GEMMA4 = load_model("gemma4-31b")
SWS = 1023  # Gemma-4: sliding_window 1024 keys -> sliding_window_size 1023


def by_kind(p: routing.Plan, kind: str) -> list[routing.LayerPlan]:
    return [e for e in p.layers if e.kind == kind]


@pytest.mark.parametrize("mode,spec", [("prefill", "none"), ("extend", "none"), ("decode", "none"),
                                       ("verify", "frozen_kv_mtp"), ("verify", "eagle")])
def test_gemma4_target_routes_everything_through_unified(mode, spec):
    p = routing.plan(GEMMA4, mode, spec=spec)
    assert p.pool.use_sliding_window_kv_pool and p.pool.use_triton_unified_attention
    assert len(p.layers) == 60 and len(by_kind(p, "sliding")) == 50
    for e in by_kind(p, "sliding"):
        assert e.kernel == "unified_attention" and e.window_arg == (SWS - 1, 0)
        assert e.page_table == "swa" == e.buffer and e.guard is None
        assert e.effective_keys == to_keys("aiter_unified", (SWS - 1, 0)) == 1023 and "1 short" in e.note
    for e in by_kind(p, "full"):
        assert e.window_arg == (-1, -1) and e.page_table == "full" and e.effective_keys is None


def test_gemma3_default_decode_fires_the_seed_guard():
    with pytest.raises(DispatchGuardError) as info:
        routing.plan("gemma3-27b", "decode")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "layer 0" in message and "sliding_window_size=1023" in message
    assert "SGLANG_USE_AITER_UNIFIED_ATTN=1" in message and "different attention backend" in message
    loose = routing.plan("gemma3-27b", "decode", strict=False)
    assert {e.path for e in loose.layers} == {"aiter_emulated_paged_ragged"}
    assert all(e.guard for e in by_kind(loose, "sliding")) and not any(e.guard for e in by_kind(loose, "full"))


def test_gemma3_way_out_unified_env():
    p = routing.plan("gemma3-27b", "decode", env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    assert not p.pool.use_sliding_window_kv_pool and p.pool.use_triton_unified_attention
    for e in by_kind(p, "sliding"):
        assert e.site == "decode.unified" and e.page_table == "full" == e.buffer and e.window_arg == (1022, 0)


def test_gemma3_prefill_uses_ck_with_sws_minus_one():
    p = routing.plan("gemma3-27b", "prefill")
    e = by_kind(p, "sliding")[0]
    assert e.kernel == "mha_batch_prefill_func" and e.window_arg == (SWS, -1) and e.effective_keys == 1024
    assert e.note is None


@pytest.mark.parametrize("topk,env", [(4, {}), (1, {"SGLANG_AITER_UNIFIED_VERIFY": "0"})])
def test_legacy_verify_on_swa_pool_is_refused(topk, env):
    p = routing.plan(GEMMA4, "verify", spec="eagle", topk=topk, env=env, strict=False)
    assert not p.pool.use_unified_verify
    for e in by_kind(p, "sliding"):
        assert e.site == "verify.legacy" and e.page_table == "full" and e.buffer == "swa"
        assert "does not pass it" in e.guard and "untranslated full-pool slot ids" in e.guard
        assert "the fixed resolver" not in e.guard  # already in force: the call site is what lacks the page table
    assert not any(e.guard for e in by_kind(p, "full"))
    with pytest.raises(DispatchGuardError, match="topk=1"):
        p.check()


def test_frozen_kv_draft_resolvers():
    fixed = routing.plan(GEMMA4, "draft_decode", spec="frozen_kv_mtp")
    assert [e.layer for e in fixed.layers] == [58, 59] and fixed.pool.use_sliding_window_kv_pool
    legacy = routing.plan(GEMMA4, "draft_decode", spec="frozen_kv_mtp", resolver="legacy", strict=False)
    guard = legacy.layer(58).guard
    assert "paged decode" in guard and "untranslated full-pool slot ids" in guard
    forced = routing.plan(GEMMA4, "draft_decode", spec="frozen_kv_mtp", resolver="legacy", strict=False,
                           env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    assert "untranslated" in forced.layer(58).guard and "takes no window" not in forced.layer(58).guard


def test_eagle_draft_naive_resolver_is_the_25103_bug():
    # An EAGLE-3 head with --speculative-draft-window-size 1023: one sliding layer in the draft's own full pool.
    full = GEMMA4.kinds["full"]
    one_layer = dataclasses.replace(GEMMA4, name="gemma4-eagle-head", architecture="LlamaForCausalLMEagle",
                                    kinds={"full": LayerKind("full", "full", full.num_q_heads, full.num_kv_heads,
                                                             full.head_dim, full.v_head_dim)},
                                    layer_types=("full",), sglang_hybrid_swa_pool=False)
    head = with_window(one_layer, 1023)
    naive = routing.plan(GEMMA4, "draft_decode", spec="eagle", resolver="naive", strict=False, draft_model=head)
    assert "#25103" in naive.layer(0).guard and naive.layer(0).buffer == "full"
    fixed = routing.plan(GEMMA4, "draft_decode", spec="eagle", strict=False, draft_model=head)
    assert fixed.layer(0).sglang_guard and "paged decode" in fixed.layer(0).guard  # SGLang's own guard fires
    ok = routing.plan(GEMMA4, "draft_decode", spec="eagle", env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"},
                       draft_model=head)
    assert ok.layer(0).page_table == "full" == ok.layer(0).buffer
    # Without a draft config SGLang's draft worker reads the target's own config: every target layer, in the
    # draft's own SWA pool (Gemma-4 is hybrid-SWA), which the fixed resolver returns.
    plain = routing.plan(GEMMA4, "draft_decode", spec="eagle")
    assert len(plain.layers) == GEMMA4.num_layers and all(e.sglang_guard is None for e in plain.layers)
    assert {e.page_table for e in plain.layers if e.kind == "sliding"} == {"swa"}


def test_draft_extend_site_and_env():
    p = routing.plan(GEMMA4, "draft_extend", spec="frozen_kv_mtp")
    assert p.layers[0].site == "draft_extend.unified"
    off = routing.plan(GEMMA4, "draft_extend", spec="frozen_kv_mtp", env={"SGLANG_AITER_UNIFIED_DRAFT_EXTEND": "0"})
    assert off.layers[0].site == "extend.unified"


def test_chunked_layers_are_refused():
    p = routing.plan("llama4-scout", "decode", strict=False)
    assert all("chunked" in e.guard for e in by_kind(p, "chunked"))


def test_window_of_one_key_reaches_sglang_as_no_window():
    # sliding_window 1 -> sliding_window_size 0, which RadixAttention stores as -1 (`sws or -1`): no window at all.
    raw = json.loads((MODELS_DIR / "gemma4-31b.json").read_text())["hf_config"]
    raw["text_config"]["sliding_window"] = 1
    one = parse_hf_config(raw)
    assert one.kinds["sliding"].window.keys == 1 and one.kinds["sliding"].sliding_window_size == -1
    p = routing.plan(one, "decode", strict=False)
    entry = p.layers[0]
    assert entry.window_arg == (-1, -1) and entry.sglang_guard is None
    assert "stores as -1" in entry.judgement and "attends the whole context" in entry.judgement


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="bogus"), "unknown mode"), (dict(mode="decode", spec="medusa"), "speculative algorithm"),
    (dict(mode="verify"), "speculative decoding"), (dict(mode="decode", topk=0), "topk"),
    (dict(mode="decode", env={"FOO": "1"}), "'FOO' is not one the aiter backend's routing .* reads; accepted: SGLANG"),
    (dict(mode="decode", env={"SGLANG_USE_AITER_UNIFIED_ATTN": "yes"}), "reads this boolean as one of"),
    (dict(mode="decode", env={"SGLANG_AITER_KV_CACHE_LAYOUT": "5d"}), "'nhd' or 'vectorized_5d'"),
    (dict(mode="decode", backend="fa3"), "the planner routes aiter, triton"),
    (dict(mode="decode", sglang_version="0.4"), "SGLang version"),
    (dict(mode="verify", spec="frozen_kv_mtp", topk=2), "single chain"),
    (dict(mode="decode", resolver="x"), "resolver"),
])
def test_bad_inputs(kwargs, match):
    with pytest.raises(UsageError, match=match):  # a kit error that is also a ValueError
        routing.plan(GEMMA4, **kwargs)


def test_run_layer_uses_sglang_argument_and_refuses_guarded_routes():
    entry = routing.plan(GEMMA4, "decode").layer(0)
    batch = random_paged_batch([1], [8], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=16)
    small = routing.LayerPlan(**{**entry.__dict__, "window_arg": (3, 0), "intended_keys": 5})
    result = routing.run_layer(small, batch)
    assert result.path == "aiter_triton_unified" and "window_arg=(3, 0)" in result.notes[-1]
    from swa_kit.attention.reference import reference_attention
    torch.testing.assert_close(result.out.double(), reference_attention(batch, 4).out, rtol=2e-4, atol=2e-4)
    guarded = routing.plan("gemma3-27b", "decode", strict=False).layer(0)
    with pytest.raises(DispatchGuardError):
        routing.run_layer(guarded, batch)


def test_explain_table_and_json(capsys):
    p = routing.plan("gemma3-27b", "decode", strict=False)
    text = explain(p)
    assert "SGLang raises:" in text and "0-4,6-10,12-16" in text and "paged_attention_ragged" in text
    assert "RAISES" in text and "WRONG KEYS" in text
    data = json.loads(explain(p, as_json=True))
    assert data["error"] and len(data["layers"]) == 62
    assert layer_ranges([0, 1, 2, 4]) == "0-2,4 (4 layers)"


def test_each_verdict_carries_its_ways_out_as_a_list():
    """JSON keeps the one-line messages and, beside each, its ways out as a list: no prose to split."""
    for layer in routing.plan("gemma3-27b", "decode", strict=False).to_json()["layers"]:
        for key in ("sglang_guard", "judgement"):
            message, ways = layer[key], layer[f"{key}_ways_out"]
            assert isinstance(ways, list) and all(isinstance(w, str) and "Ways out" not in w for w in ways)
            assert (message is None and ways == []) or (ways and message.endswith("Ways out: " + "; or ".join(ways)))
        assert layer["kind"] != "sliding" or (layer["sglang_guard_ways_out"] and layer["judgement_ways_out"])


def test_cli_explain(capsys):
    assert main(["explain", "--model", "gemma4-31b", "--mode", "decode", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    layer = data["layers"][0]
    assert data["error"] is None
    assert {k: layer[k] for k in ("layer", "kind", "path", "window_arg", "page_table", "guard")} == {
        "layer": 0, "kind": "sliding", "path": "aiter_triton_unified", "window_arg": [1022, 0],
        "page_table": "swa", "guard": None}
    assert main(["explain", "--model", "gemma3-27b", "--mode", "decode", "--json"]) == 3
    refused = json.loads(capsys.readouterr().out)
    assert "SGLANG_USE_AITER_UNIFIED_ATTN=1" in refused["error"] and refused["layers"][0]["guard"]
    assert main(["explain", "--model", "gemma3-27b", "--mode", "decode",
                 "--env", "SGLANG_USE_AITER_UNIFIED_ATTN=1"]) == 0
    assert "decode" in capsys.readouterr().out
    assert main(["explain", "--model", "gemma3-27b", "--mode", "decode", "--env", "NOPE"]) == 2
    assert main(["explain", "--model", "gemma3-27b", "--mode", "verify"]) == 2


# -- planning for a given model runner (the kit's or a foreign one, read by duck typing) ------------------


def _foreign_frozen_draft():
    """A runner that is no kit class: an SGLang-like FROZEN_KV MTP draft over a target's SWA pool."""
    swa_pool = SimpleNamespace(swa_layer_nums=50, translate_loc_from_full_to_swa=lambda ids: ids)
    return SimpleNamespace(
        token_to_kv_pool=SimpleNamespace(size=64),  # the 64-token dummy pool: not an SWA pool
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: swa_pool),
        is_draft_worker=True,
        spec_algorithm=SimpleNamespace(name="FROZEN_KV_MTP", is_frozen_kv_mtp=lambda: True),
    )


def test_plan_for_the_kits_own_runner_matches_the_built_one():
    runner = build_workers(load_model("gemma4-31b"), "frozen_kv_mtp").draft
    given = routing.plan("gemma4-31b", "draft_decode", model_runner=runner)
    built = routing.plan("gemma4-31b", "draft_decode", spec="frozen_kv_mtp", worker="draft")
    assert [(e.layer, e.path, e.window_arg, e.page_table) for e in given.layers] == \
        [(e.layer, e.path, e.window_arg, e.page_table) for e in built.layers]


def test_plan_reads_a_foreign_runner_by_duck_typing():
    runner = _foreign_frozen_draft()
    fixed = routing.plan("gemma4-31b", "draft_decode", model_runner=runner)
    assert {e.page_table for e in fixed.layers if e.kind == "sliding"} == {"swa"}
    # The pre-fix resolver looks only at the active (dummy) pool: the guard refuses the route.
    with pytest.raises(DispatchGuardError, match="untranslated full-pool slot ids"):
        routing.plan("gemma4-31b", "draft_decode", model_runner=runner, resolver="legacy")


def test_plan_refuses_a_role_that_contradicts_the_runner():
    with pytest.raises(UsageError, match="worker='target' contradicts the model runner, which is worker 'draft'"):
        routing.plan("gemma4-31b", "decode", model_runner=_foreign_frozen_draft(), worker="target")
    with pytest.raises(UsageError, match="spec='eagle' contradicts"):
        routing.plan("gemma4-31b", "draft_decode", model_runner=_foreign_frozen_draft(), spec="eagle")


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gemma4-31b", "mimo-v2-flash"])
def test_hybrid_switch_off_takes_the_paged_decode_and_sglangs_guard(name):
    """--disable-hybrid-swa-memory: no SWA pool, so nothing forces unified_attention and decode is paged.

    Oracle: SGLang's _reject_paged_decode_sliding_window raises for exactly the layers with sliding_window_size > -1,
    read from the model's own layer kinds; and the routes equal those of the same model declared pool-less.
    """
    model = load_model(name)
    on = routing.plan(model, "decode", strict=False)
    off = routing.plan(model, "decode", strict=False, hybrid_swa_memory=False)
    assert on.pool.swa_pool_resolved and not on.guards
    assert not off.pool.swa_pool_resolved and not off.pool.use_triton_unified_attention
    assert off.pool.hybrid_pool_disabled
    raising = {i for i in range(model.num_layers) if model.layer_kind(i).sliding_window_size > -1}
    assert raising and {e.layer for e in off.layers if e.sglang_verdict} == raising
    pool_less = routing.plan(replace(model, sglang_hybrid_swa_pool=False), "decode", strict=False)
    route = lambda e: (e.layer, e.kernel, e.window_arg, e.buffer, e.page_table, e.effective_keys)  # noqa: E731
    assert [route(e) for e in off.layers] == [route(e) for e in pool_less.layers]
    assert {e.kernel for e in off.layers} == {"paged_attention_ragged"} and {e.buffer for e in off.layers} == {"full"}
    verdict = next(e.sglang_verdict for e in off.layers if e.sglang_verdict)
    assert "hybrid SWA memory is off" in verdict.problem and len(verdict.ways_out) == 3
    assert verdict.ways_out[0].startswith("drop --disable-hybrid-swa-memory")
    assert all("one key short" in way for way in verdict.ways_out)  # each names what it still costs
    with pytest.raises(DispatchGuardError, match="_reject_paged_decode_sliding_window"):
        routing.plan(model, "decode", hybrid_swa_memory=False)
    # The second way out, taken: unified_attention on the one full pool, one key short, and SGLang runs it.
    unified = routing.plan(model, "decode", hybrid_swa_memory=False, env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    for e in by_kind(unified, "sliding"):
        assert e.kernel == "unified_attention" and e.page_table == e.buffer == "full"
        assert e.effective_keys == e.intended_keys - 1 and e.sglang_verdict is None


def test_hybrid_switch_off_reaches_a_hybrid_swa_draft():
    """The draft's ModelConfig comes from the same server args: a MiMoV2MTP draft loses its SWA pool too."""
    target = load_model("mimo-v2-flash")
    draft, _ = default_draft_layout(target, True)
    assert draft.sglang_hybrid_swa_pool
    on = routing.plan(target, "draft_decode", spec="eagle", strict=False, draft_model=draft)
    off = routing.plan(target, "draft_decode", spec="eagle", strict=False, draft_model=draft, hybrid_swa_memory=False)
    assert on.pool.own_swa_pool and not off.pool.own_swa_pool and off.pool.hybrid_pool_disabled
    assert {e.buffer for e in off.layers} == {"full"}
    windowed = [e for e in off.layers if e.sliding_window_size > -1]
    assert windowed and all(e.sglang_verdict for e in windowed)
