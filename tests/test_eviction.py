"""Out-of-window SWA eviction and the request table, checked against Window.attends as the oracle."""

from __future__ import annotations

import random

import pytest
import torch

from swa_kit.errors import LayerMappingError, PoolExhaustedError, PoolUsageError, SlotError
from swa_kit.engine.eviction import RequestTable, swa_keep_from
from swa_kit.engine.pools import (
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    SWAKVPool,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from swa_kit.window import Window

F32 = torch.float32


def table(page_size: int = 1, size: int = 128, size_swa: int = 64, rows: int = 4, ctx: int = 96) -> RequestTable:
    pool = SWAKVPool(size, size_swa, page_size, F32, 1, 2, swa_attention_layer_ids=[0, 2],
                     full_attention_layer_ids=[1], device="cpu")
    alloc = SWATokenToKVPoolAllocator(size, size_swa, page_size, F32, "cpu", pool, need_sort=False)
    return RequestTable(ReqToTokenPool(rows, ctx, "cpu"), alloc)


def swa_live(t: RequestTable, rid) -> torch.Tensor:
    return t.token_to_kv_pool_allocator.translate_loc_from_full_to_swa(t.get_kv_indices(rid)) > 0


def test_keep_from_matches_the_window_and_sglang_formulas():
    for _ in range(200):
        keys, kv_len, ps = random.randint(1, 40), random.randint(0, 100), random.choice([1, 2, 4, 16])
        drafts = random.randint(0, min(kv_len, 5))
        q = kv_len - drafts
        exact = swa_keep_from(kv_len, Window(keys), ps, num_draft_tokens=drafts)
        assert exact == Window(keys).first_key(q) == max(0, q - (keys - 1))  # SGLang: pre_len - sliding_window_size
        slack = swa_keep_from(kv_len, keys, ps, page_slack=True, num_draft_tokens=drafts)
        assert slack == max(0, q - -(-max(keys - 1, ps) // ps) * ps) and slack <= exact
    assert swa_keep_from(50, None) == 0
    with pytest.raises(PoolUsageError, match="num_draft_tokens"):
        swa_keep_from(3, 4, num_draft_tokens=4)


@pytest.mark.parametrize("page_size", [1, 2, 4])
@pytest.mark.parametrize("page_slack", [False, True])
def test_eviction_frees_exactly_what_no_pending_query_reads(page_size: int, page_slack: bool):
    rng = random.Random(random.getrandbits(32))
    for _ in range(6):
        keys = rng.randint(1, 12)
        w = Window(keys)
        t = table(page_size)
        t.prefill({"r": rng.randint(1, 20)})
        cursor, q_prev = 0, 0
        for _ in range(rng.randint(5, 40)):
            t.decode(["r"])
            # commits only move forward: the oldest pending query never goes back
            drafts = rng.randint(0, min(3, t.seq_len("r") - q_prev))
            q_prev = t.seq_len("r") - drafts
            before = swa_live(t, "r").clone()
            freed = t.evict(w, page_slack=page_slack, num_draft_tokens=drafts).get("r")
            after = swa_live(t, "r")
            n = t.seq_len("r")
            q = n - drafts
            positions = torch.arange(n)
            read = torch.zeros(n, dtype=torch.bool)
            for qq in range(q, n + 1):  # every pending query: the drafts' and the next token's
                read |= w.attends(qq, positions)
            assert bool(after[read].all()), "a token inside the window lost its SWA slot"
            keep = swa_keep_from(n, w, page_size, page_slack=page_slack, num_draft_tokens=drafts)
            cursor = max(cursor, keep // page_size * page_size)
            expect_dead = positions < cursor
            assert torch.equal(~after, expect_dead), (keys, n, drafts)
            if freed is not None:
                assert torch.equal(before & ~after, (positions >= freed.start) & (positions < freed.end))
                assert freed.full_slots.tolist() == t.get_kv_indices("r")[freed.start:freed.end].tolist()
                assert bool((freed.swa_slots > 0).all())
            else:
                assert torch.equal(before, after)


def test_protected_prefix_and_interval():
    t = table(4)
    t.prefill({"a": 16}, cache_protected_len={"a": 8})
    for _ in range(20):
        t.decode(["a"])
    res = t.evict(4)["a"]
    assert (res.start, res.end) == (8, 32)  # keep_from = 36 - 3 = 33, floored to 32; never below 8
    live = swa_live(t, "a")
    assert bool(live[:8].all()) and not bool(live[8:32].any()) and bool(live[32:].all())
    t.decode(["a"])
    assert t.evict(4, eviction_interval=4) == {}  # only 1 more token past the cursor
    with pytest.raises(PoolUsageError, match="page-aligned"):
        t.prefill({"b": 8}, cache_protected_len={"b": 3})


def test_translated_ids_read_the_dummy_after_eviction():
    t = table(1)
    t.prefill({"a": 6})
    t.evict(Window(2))  # next query at 6 reads 5, 6: positions 0..4 go
    assert t.get_kv_indices("a", 0).tolist() == [0, 0, 0, 0, 0, 6]
    assert t.get_kv_indices("a", 1).tolist() == [1, 2, 3, 4, 5, 6]  # full layer: full ids, untouched
    with pytest.raises(LayerMappingError):
        t.get_kv_indices("a", 7)


@pytest.mark.parametrize("page_size", [1, 4])
def test_finish_gives_everything_back(page_size: int):
    t = table(page_size)
    alloc = t.token_to_kv_pool_allocator
    start = (alloc.full_available_size(), alloc.swa_available_size(), t.req_to_token_pool.available_size())
    t.prefill({"a": 13, "b": 7}, cache_protected_len={"a": 4 if page_size == 4 else 3})
    for _ in range(9):
        t.decode(["a", "b"])
        t.evict(3)
    t.finish("a")
    t.finish("b")
    assert (alloc.full_available_size(), alloc.swa_available_size(), t.req_to_token_pool.available_size()) == start
    assert alloc.full_to_swa_index_mapping[:-1].abs().sum() == 0
    with pytest.raises(PoolUsageError, match="no live request"):
        t.finish("a")


def test_exhaustion_names_sizes_and_leaves_state_alone():
    t = table(1, size=32, size_swa=8)
    t.prefill({"a": 6})
    with pytest.raises(PoolExhaustedError, match=r"asked for 4 token\(s\); full pool has 26, SWA pool has 2 free"):
        t.prefill({"b": 4})
    assert "b" not in t and t.req_to_token_pool.available_size() == 3
    t.evict(2)
    t.prefill({"b": 4})  # eviction made room on the SWA side
    tp = table(4, size=32, size_swa=8)
    tp.prefill({"a": 5})
    with pytest.raises(PoolExhaustedError, match=r"1 new page\(s\) of 4"):
        tp.extend({"a": 4})
    with pytest.raises(PoolExhaustedError, match="request row"):
        table(1, rows=1).prefill({"x": 1, "y": 1})


def test_request_table_bad_input():
    t = table(1, ctx=8)
    t.prefill({"a": 4})
    with pytest.raises(PoolUsageError, match="max_context_len"):
        t.extend({"a": 5})
    with pytest.raises(PoolUsageError, match="already live"):
        t.prefill({"a": 1})
    with pytest.raises(PoolUsageError, match="no live request"):
        t.decode(["zz"])
    with pytest.raises(PoolUsageError, match="int >= 0"):
        t.extend({"a": -1})
    ids = t.get_kv_indices("a")
    t.finish("a")
    with pytest.raises(SlotError, match="not allocated"):
        t.token_to_kv_pool_allocator.free(ids)


@pytest.mark.parametrize("make", [
    lambda: TokenToKVPoolAllocator(32, F32, "cpu", None, need_sort=False),
    lambda: PagedTokenToKVPoolAllocator(32, 4, F32, "cpu", None, need_sort=False),
])
def test_request_table_over_single_pools(make):
    alloc = make()
    t = RequestTable(ReqToTokenPool(3, 32, "cpu"), alloc)
    got = t.prefill({"a": 5, "b": 2})
    t.decode(["a", "b"])
    assert t.get_kv_indices("a")[:5].tolist() == got["a"].tolist()
    with pytest.raises(PoolUsageError, match="no SWA pool"):
        t.evict(2)
    t.finish("a")
    t.finish("b")
    assert alloc.available_size() == 32
