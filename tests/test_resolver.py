"""The three SWA-pool resolvers, the decision table, and each failure reproduced on real pools."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swa_kit.cli import main
from swa_kit.errors import SlotError, UsageError
from swa_kit.engine.resolver import (
    NO_TRANSLATION,
    RESOLVERS,
    SWA_POOL_CLASS,
    WRONG_TRANSLATION,
    decision_table,
    is_swa_pool,
    legacy_resolve_swa_kv_pool,
    naive_resolve_swa_kv_pool,
    read_keys,
    resolve_swa_kv_pool,
    slots_read,
    uses_sliding_window_kv_pool,
    with_hybrid_draft_pool,
)
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.engine.workers import MODEL_KINDS, build_workers

A = SpeculativeAlgorithm
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")


def expected_returns(role: str, algorithm: str, model: str, resolver: str) -> str:
    """Written from SGLang 0.5.23's ``_resolve_swa_kv_pool`` (PR #38756), independently of swa_kit.engine.resolver."""
    if model != "hybrid_swa":
        return "none"  # no SWA pool anywhere
    if role == "target":
        return "target_swa_pool"  # its active pool is the SWA pool: every resolver finds it
    if resolver == "legacy":
        return "none"  # a draft's active pool is never the SWA pool
    if resolver == "naive":
        return "target_swa_pool"  # the shared allocator serves the target's SWA pool
    return "target_swa_pool" if algorithm == "FROZEN_KV_MTP" else "none"


def expected_wanted(role: str, algorithm: str, model: str) -> str:
    reads_target = role == "target" or algorithm == "FROZEN_KV_MTP"
    return "target_swa_pool" if model == "hybrid_swa" and reads_target else "none"


def test_decision_table_against_hand_expectation():
    rows = decision_table()
    # 3 models x (5 target rows + 4 draft rows) x 3 resolvers
    assert len(rows) == 3 * 9 * 3
    keys = {(r["role"], r["algorithm"], r["model"], r["resolver"]) for r in rows}
    assert len(keys) == len(rows)
    for r in rows:
        returns = expected_returns(r["role"], r["algorithm"], r["model"], r["resolver"])
        wanted = expected_wanted(r["role"], r["algorithm"], r["model"])
        assert (r["returns"], r["wanted"]) == (returns, wanted), r
        assert r["correct"] == (returns == wanted)
        if r["correct"]:
            assert r["consequence"] == ""
        elif wanted == "none":
            assert r["consequence"] == WRONG_TRANSLATION
        else:
            assert r["consequence"] == NO_TRANSLATION
    wrong = {(r["role"], r["algorithm"], r["resolver"]) for r in rows if not r["correct"]}
    assert wrong == {("draft", a, "naive") for a in EAGLE_FAMILY} | {("draft", "FROZEN_KV_MTP", "legacy")}
    assert all(r["correct"] for r in rows if r["resolver"] == "fixed")


def test_cli_resolve_json_and_table(capsys):
    assert main(["resolve", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == json.loads(json.dumps(decision_table()))
    assert {"role", "algorithm", "model", "resolver", "returns", "correct", "consequence"} <= set(rows[0])
    assert main(["resolve", "--wrong"]) == 0
    out = capsys.readouterr().out
    assert out.count("False") == 4 and "FROZEN_KV_MTP" in out and "True" not in out


# Duck-typed stand-ins: the resolvers must not care whose classes these are.
class FakeSWA:
    def __init__(self, swa_layer_nums=2):
        self.swa_layer_nums = swa_layer_nums

    def translate_loc_from_full_to_swa(self, ids):
        return ids


def _runner(active_swa, alloc_swa, draft, algo, has_flag=True):
    active = FakeSWA() if active_swa else SimpleNamespace(size=64)
    kv = FakeSWA() if alloc_swa else SimpleNamespace(size=64)
    runner = SimpleNamespace(token_to_kv_pool=active, spec_algorithm=algo,
                             token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: kv))
    if has_flag:
        runner.is_draft_worker = draft
    return runner, active, kv


@given(active_swa=st.booleans(), alloc_swa=st.booleans(), draft=st.booleans(), algo=st.sampled_from(list(A)),
       has_flag=st.booleans())
def test_resolvers_on_duck_typed_runners(active_swa, alloc_swa, draft, algo, has_flag):
    runner, active, kv = _runner(active_swa, alloc_swa, draft, algo, has_flag)
    is_draft = draft and has_flag  # a missing is_draft_worker reads as False
    # SGLang 0.5.23's _resolve_swa_kv_pool, rule by rule
    if active_swa:
        fixed = active
    elif is_draft and not algo.is_frozen_kv_mtp():
        fixed = None
    else:
        fixed = kv if alloc_swa else None
    assert resolve_swa_kv_pool(runner) is fixed
    assert legacy_resolve_swa_kv_pool(runner) is (active if active_swa else None)
    assert naive_resolve_swa_kv_pool(runner) is (kv if alloc_swa else None)


def test_swa_pool_recognised_by_what_it_offers():
    assert is_swa_pool(FakeSWA())
    assert not is_swa_pool(SimpleNamespace(swa_layer_nums=3))  # no translate
    assert not is_swa_pool(SimpleNamespace(translate_loc_from_full_to_swa=lambda x: x))
    assert not is_swa_pool(SimpleNamespace(swa_layer_nums=1, translate_loc_from_full_to_swa=5))
    assert not uses_sliding_window_kv_pool(None)
    assert not uses_sliding_window_kv_pool(FakeSWA(swa_layer_nums=0))
    assert uses_sliding_window_kv_pool(FakeSWA(swa_layer_nums=1))


# ---- failures on real pools ----------------------------------------------------------------------------

def _admit(workers, req_idx: int, n: int) -> torch.Tensor:
    ids = workers.target.token_to_kv_pool_allocator.alloc(n)
    workers.target.req_to_token_pool.req_to_token[req_idx, :n] = ids.to(torch.int32)
    return ids


def _evict_out_of_window(workers, req_idx: int, seq_len: int) -> None:
    keys = workers.target.layout.window_keys
    old = workers.target.req_to_token_pool.req_to_token[req_idx, : seq_len - keys].to(torch.int64)
    if old.numel():
        workers.target.token_to_kv_pool_allocator.free_swa(old)


def _hybrid(algo, **kw):
    w = build_workers("hybrid_swa", algo, size=64, size_swa=16, **kw)
    # request 0 fills most of the SWA pool and leaves its window; request 1 then gets full ids > size_swa
    _admit(w, 0, 14)
    _evict_out_of_window(w, 0, 14)
    return w


def _fill(buffer: torch.Tensor) -> None:
    buffer.copy_(torch.randn_like(buffer))


def test_frozen_kv_draft_under_legacy_reads_out_of_bounds():
    w = _hybrid(A.FROZEN_KV_MTP)
    n = random.randint(8, 12)  # the SWA side has 12 free slots left
    _admit(w, 1, n)
    target_layer = w.draft.source_layer(0)
    _fill(w.target.token_to_kv_pool.get_key_buffer(target_layer))
    legacy = slots_read(w, "draft", "legacy", 0, 1, n)
    fixed = slots_read(w, "draft", "fixed", 0, 1, n)
    assert legacy.pool == fixed.pool == "target_swa_pool" and legacy.buffer_rows == 17
    assert not legacy.translated and fixed.translated and fixed.ok and not legacy.ok
    assert not bool(legacy.in_bounds[legacy.attended].all())  # full ids > 16 index a 17-row SWA buffer
    with pytest.raises(SlotError, match="out of bounds"):
        read_keys(w, legacy)
    # the fixed resolver reads exactly what the target's own sliding layer reads
    target = slots_read(w, "target", "fixed", target_layer, 1, n)
    assert torch.equal(read_keys(w, fixed), read_keys(w, target))


def test_frozen_kv_draft_under_legacy_reads_wrong_slots_in_bounds():
    # While full and SWA ids happen to coincide the legacy read is right by accident. A long request whose old
    # SWA slots were evicted (its full slots kept) shifts the two id streams apart for good; once the full ids
    # wrap round, they are small enough to stay in bounds and still name the wrong SWA rows: no error at all.
    w = build_workers("hybrid_swa", A.FROZEN_KV_MTP, size=64, size_swa=32, max_requests=3)
    rng = random.Random()
    allocator = w.target.token_to_kv_pool_allocator
    _admit(w, 0, 10)
    _evict_out_of_window(w, 0, 10)
    found = False
    for _ in range(40):
        n = rng.randint(5, 12)
        _admit(w, 1, n)
        legacy = slots_read(w, "draft", "legacy", 0, 1, n)
        fixed = slots_read(w, "draft", "fixed", 0, 1, n)
        assert fixed.ok and torch.equal(fixed.read_ids, legacy.right_ids)
        if bool(legacy.in_bounds.all()) and not legacy.ok:
            read_keys(w, legacy)  # no error: wrong rows, silently
            found = True
            break
        _evict_out_of_window(w, 1, n)
        ids = w.target.req_to_token_pool.req_to_token[1, :n].to(torch.int64)
        allocator.free_swa(ids[-w.target.layout.window_keys:])  # the request finishes: its window, then
        allocator.free_full(ids)  # every full slot
    assert found


@pytest.mark.parametrize("algo", [A.EAGLE, A.EAGLE3, A.STANDALONE])
def test_eagle_draft_under_naive_translates_its_own_ids(algo):
    w = _hybrid(algo)
    n = random.randint(6, 12)
    full_ids = _admit(w, 1, n)
    own = w.draft.token_to_kv_pool.get_key_buffer(0)
    _fill(own)
    naive = slots_read(w, "draft", "naive", 0, 1, n)
    fixed = slots_read(w, "draft", "fixed", 0, 1, n)
    legacy = slots_read(w, "draft", "legacy", 0, 1, n)
    assert naive.pool == "own_pool" and naive.translated and not naive.ok
    assert fixed.ok and legacy.ok and not fixed.translated
    # the draft wrote its KV at the full ids; the naive read lands elsewhere
    written = own[full_ids[naive.attended]]
    assert torch.equal(read_keys(w, fixed), written)
    assert not torch.equal(read_keys(w, naive), written)


@pytest.mark.parametrize("model", ["windowed_one_pool", "no_window"])
@pytest.mark.parametrize("resolver", list(RESOLVERS))
def test_one_pool_models_never_translate(model, resolver):
    for algo in (A.EAGLE, A.FROZEN_KV_MTP) if MODEL_KINDS[model].window_keys else (A.EAGLE,):
        w = build_workers(model, algo)
        _admit(w, 0, 9)
        for role in ("target", "draft"):
            read = slots_read(w, role, resolver, 0, 0, 9)
            assert not read.translated and read.ok and torch.equal(read.read_ids, read.full_ids)


def test_window_limits_what_counts():
    w = _hybrid(A.NONE)
    _admit(w, 1, 10)
    read = slots_read(w, "target", "fixed", 0, 1, 10)
    assert read.attended.tolist() == [False] * 6 + [True] * 4
    full = slots_read(w, "target", "fixed", 2, 1, 10)  # layer 2 is a full layer
    assert not full.sliding and bool(full.attended.all()) and not full.translated


def test_bad_resolver_name():
    w = build_workers("hybrid_swa", A.EAGLE)
    with pytest.raises(UsageError, match="unknown resolver 'smart'"):
        slots_read(w, "draft", "smart", 0, 0, 1)


def test_hybrid_swa_draft_owns_its_swa_pool():
    from swa_kit.engine.resolver import hybrid_draft_table

    rows = hybrid_draft_table()
    assert len(rows) == 3 * 3  # EAGLE, EAGLE3, STANDALONE x three resolvers
    for r in rows:
        # Rule 1 (the active pool is an SWA pool) returns the draft's own pool under legacy and fixed;
        # naive returns the target's pool instead.
        expected = "target_swa_pool" if r["resolver"] == "naive" else "own_pool"
        assert (r["returns"], r["wanted"], r["correct"]) == (expected, "own_pool", expected == "own_pool"), r
    workers = with_hybrid_draft_pool(build_workers("hybrid_swa", "eagle"), ("sliding", "full"))
    own = workers.draft.token_to_kv_pool
    assert is_swa_pool(own) and own.swa_layer_nums == 1 and own is not workers.target.token_to_kv_pool
    assert RESOLVERS["fixed"](workers.draft) is own
    assert RESOLVERS["naive"](workers.draft) is workers.target.token_to_kv_pool


# ---- each backend's own predicate ----------------------------------------------------------------------

class BaseOnlySWA:
    """Offers only what SGLang's ``BaseSWAKVPool`` declares (DeepSeekV4TokenToKVPool's shape): no swa_layer_nums."""

    def translate_loc_from_full_to_swa(self, ids):
        return ids


@given(active=st.sampled_from(["none", "base", "concrete"]), alloc=st.sampled_from(["none", "base", "concrete"]),
       draft=st.booleans(), algo=st.sampled_from(list(A)), backend=st.sampled_from(list(SWA_POOL_CLASS)))
def test_each_backend_applies_its_own_predicate(active, alloc, draft, algo, backend):
    make = {"none": lambda: SimpleNamespace(size=64), "base": BaseOnlySWA, "concrete": FakeSWA}
    active_pool, kv = make[active](), make[alloc]()
    runner = SimpleNamespace(token_to_kv_pool=active_pool, spec_algorithm=algo, is_draft_worker=draft,
                             token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: kv))
    # SGLang 0.5.23: FlashInfer isinstance-checks BaseSWAKVPool, aiter and trtllm_mha the concrete SWAKVPool
    accepted = {"concrete", "base"} if backend == "flashinfer" else {"concrete"}
    if active in accepted:
        expected = active_pool
    elif draft and not algo.is_frozen_kv_mtp():
        expected = None
    else:
        expected = kv if alloc in accepted else None
    assert resolve_swa_kv_pool(runner, backend) is expected
    assert is_swa_pool(BaseOnlySWA(), backend) == (backend == "flashinfer")


def test_a_base_only_pool_resolves_on_flashinfer_only():
    pool = BaseOnlySWA()
    target = SimpleNamespace(token_to_kv_pool=pool, spec_algorithm=A.NONE, is_draft_worker=False,
                             token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool))
    assert resolve_swa_kv_pool(target, "flashinfer") is pool
    assert resolve_swa_kv_pool(target, "aiter") is None and resolve_swa_kv_pool(target, "trtllm_mha") is None
    assert resolve_swa_kv_pool(target) is None  # aiter by default


def test_draft_flag_read_as_each_backend_reads_it():
    runner = SimpleNamespace(token_to_kv_pool=SimpleNamespace(size=64), spec_algorithm=A.EAGLE,
                             token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: FakeSWA()))
    assert is_swa_pool(resolve_swa_kv_pool(runner, "aiter"))  # aiter: getattr(..., False), a target
    for backend in ("trtllm_mha", "flashinfer"):
        with pytest.raises(AttributeError, match="is_draft_worker"):
            resolve_swa_kv_pool(runner, backend)


def test_unknown_backend_is_named():
    with pytest.raises(UsageError, match="no _resolve_swa_kv_pool of backend 'fa3'; SGLang 0.5.23 has one in aiter"):
        resolve_swa_kv_pool(SimpleNamespace(token_to_kv_pool=None), "fa3")
