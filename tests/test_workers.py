"""SpeculativeAlgorithm predicates and the target/draft wiring SGLang uses."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from swa_kit.models.configs import load_model
from swa_kit.errors import ModelConfigError
from swa_kit.engine.resolver import is_swa_pool
from swa_kit.window import Window
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.engine.workers import FROZEN_KV_DUMMY_POOL_SIZE, MODEL_KINDS, WorkerLayout, build_workers

A = SpeculativeAlgorithm

# SGLang 0.5.23 speculative/spec_info.py: is_eagle() is EAGLE, EAGLE3 and FROZEN_KV_MTP (not STANDALONE).
EAGLE_LIKE = {A.EAGLE, A.EAGLE3, A.FROZEN_KV_MTP}


@pytest.mark.parametrize("algo", list(A))
def test_predicates(algo):
    assert algo.is_eagle() == (algo in EAGLE_LIKE)
    assert algo.is_none() == (algo is A.NONE) == (not algo.is_some()) == (not algo.is_speculative())
    assert algo.is_frozen_kv_mtp() == (algo.name == "FROZEN_KV_MTP")
    assert algo.is_eagle3() == (algo.name == "EAGLE3")
    assert algo.is_standalone() == (algo.name == "STANDALONE")
    # DFLASH and DSPARK keep their own draft KV (SGLang 0.5.23 arg_groups/fields/spec.py, kv_cache_configurator.py);
    # FROZEN_KV_MTP reads the target's
    assert algo.draft_owns_kv() == (algo in {A.EAGLE, A.EAGLE3, A.STANDALONE, A.DFLASH, A.DSPARK})
    assert A.from_string(algo.name.lower()) is algo


def test_from_string_none_aliases_and_bad():
    assert A.from_string(None) is A.NONE
    assert A.from_string("nextn") is A.from_string("MTP") is A.EAGLE  # NEXTN: SGLang's own alias of EAGLE
    with pytest.raises(ModelConfigError, match="unknown speculative algorithm 'MEDUSA'.*EAGLE3"):
        A.from_string("MEDUSA")
    with pytest.raises(ModelConfigError, match="unknown speculative algorithm 'LOOKAHEAD'"):
        A.from_string("LOOKAHEAD")


@pytest.mark.parametrize("algo", ["NGRAM", "dflash", A.NGRAM])
def test_workers_the_kit_does_not_mirror_are_refused_by_name(algo):
    name = getattr(algo, "name", str(algo)).upper()
    with pytest.raises(ModelConfigError, match=f"does not mirror {name}'s workers.*frozen_kv_mtp"):
        build_workers("hybrid_swa", algo)


@pytest.mark.parametrize("model", list(MODEL_KINDS))
def test_no_draft_without_speculation(model):
    w = build_workers(model, A.NONE)
    assert w.draft is None and w.target.is_draft_worker is False
    with pytest.raises(ModelConfigError, match="no 'draft' worker"):
        w.runner("draft")
    assert is_swa_pool(w.target.token_to_kv_pool) == MODEL_KINDS[model].hybrid_pool
    assert w.target.token_to_kv_pool_allocator.get_kvcache() is w.target.token_to_kv_pool


@pytest.mark.parametrize("model", list(MODEL_KINDS))
@pytest.mark.parametrize("algo", [A.EAGLE, A.EAGLE3, A.STANDALONE])
def test_eagle_family_draft_shares_bookkeeping_and_owns_a_plain_pool(model, algo):
    w = build_workers(model, algo, size=48)
    t, d = w.target, w.draft
    assert d.is_draft_worker and d.spec_algorithm is algo and t.spec_algorithm is algo
    assert d.req_to_token_pool is t.req_to_token_pool
    assert d.token_to_kv_pool_allocator is t.token_to_kv_pool_allocator
    assert d.token_to_kv_pool is not t.token_to_kv_pool and not is_swa_pool(d.token_to_kv_pool)
    assert d.kv_pool_read is d.token_to_kv_pool and d.writes_kv
    # addressed with the target's full-pool ids, so it spans the full id space
    assert d.token_to_kv_pool.get_key_buffer(0).shape[0] >= 48
    assert w.pool_name(d, d.token_to_kv_pool) == "own_pool"


@pytest.mark.parametrize("model", ["hybrid_swa", "windowed_one_pool"])
def test_frozen_kv_draft_reads_target_and_owns_a_dummy(model):
    w = build_workers(model, A.FROZEN_KV_MTP)
    t, d = w.target, w.draft
    assert d.req_to_token_pool is t.req_to_token_pool
    assert d.token_to_kv_pool_allocator is t.token_to_kv_pool_allocator
    assert d.token_to_kv_pool.get_key_buffer(0).shape[0] == FROZEN_KV_DUMMY_POOL_SIZE + 1  # size + page_size
    assert not d.writes_kv and d.kv_pool_read is t.token_to_kv_pool
    # borrows the target's last layer of its kind
    layers = MODEL_KINDS[model].layer_types
    for draft_layer, kind in enumerate(MODEL_KINDS[model].draft_layer_types):
        src = d.source_layer(draft_layer)
        assert layers[src] == kind and kind not in layers[src + 1:]


def test_frozen_kv_needs_a_target_layer_of_each_kind():
    with pytest.raises(ModelConfigError, match="borrow KV"):
        build_workers(WorkerLayout("x", ("full",) * 3, 4, False, ("sliding",)), A.FROZEN_KV_MTP)


def test_real_model_layout():
    spec = load_model("gemma4-31b")
    w = build_workers(spec, "FROZEN_KV_MTP", size=32, size_swa=8)
    pool = w.target.token_to_kv_pool
    assert pool.swa_layer_nums == 50 and pool.full_layer_nums == 10
    assert w.draft.source_layer(0) == 58  # last sliding layer of the target
    assert w.target.layout.window_keys == 1024
    scout = WorkerLayout.from_model(load_model("llama4-scout"))
    assert scout.window_keys == 8192 and scout.layer_types[3] == "full"
    assert not WorkerLayout.from_model(load_model("gemma3-27b")).hybrid_pool


def test_bad_layouts_and_inputs():
    with pytest.raises(ModelConfigError, match="unknown model kind"):
        build_workers("hybrid")
    with pytest.raises(ModelConfigError, match="'full' or 'sliding'"):
        WorkerLayout("x", ("chunked",), 4, True)
    with pytest.raises(ModelConfigError, match="window_keys"):
        WorkerLayout("x", ("sliding",), None, True)
    with pytest.raises(ModelConfigError, match="needs at least one sliding"):
        WorkerLayout("x", ("full",), None, True, ("full",))
    w = build_workers("hybrid_swa", "EAGLE")
    with pytest.raises(ModelConfigError, match="layers 0..0"):
        w.draft.source_layer(3)


@pytest.mark.parametrize("chunk, shown", [(8, "[4, 8]"), (None, "[None, 4]")])
def test_a_model_with_two_bounds_in_its_swa_pool_is_refused(chunk, shown):
    # A sliding kind and a chunked kind both live in the SWA pool; the kit's pools hold one bound. A chunked kind
    # with no chunk_size (built by hand) once made the message's sort fail with a TypeError.
    spec = load_model("llama4-scout")
    chunked = next(name for name, kind in spec.kinds.items() if kind.attention == "chunked")
    sliding = replace(spec.kinds[chunked], name="sliding", attention="sliding", window=Window(4), chunk_size=None)
    kinds = {**spec.kinds, chunked: replace(spec.kinds[chunked], chunk_size=chunk), "sliding": sliding}
    two = replace(spec, kinds=kinds, layer_types=spec.layer_types + ("sliding",))
    with pytest.raises(ModelConfigError, match=re.escape(f"take one window, the model has {shown}")):
        WorkerLayout.from_model(two)
