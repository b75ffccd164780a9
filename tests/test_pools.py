"""Pools and allocators: exact SGLang 0.5.23 allocation order (read off its code), buffers, bad input.

Expected slot lists below come from reading ``srt/mem_cache/allocator/{token,paged,swa}.py``:
page-1 allocators hand out from the front and append frees at the back; paged ones prepend
freed pages (sorted by ``torch.unique`` in ``free``, as given in ``free_page_ids``); with
``need_sort`` frees are staged and sorted in only when an allocation runs short.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
import torch

from swa_kit.errors import LayerMappingError, PoolUsageError, SlotError
from swa_kit.engine.pools import (
    KVWriteLoc,
    MHATokenToKVPool,
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    SWAKVPool,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
    get_num_new_pages,
)

F32 = torch.float32


def T(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def swa(size: int = 16, size_swa: int = 8, page_size: int = 1, need_sort: bool = False, **kw):
    pool = SWAKVPool(size, size_swa, page_size, F32, 2, 4, swa_attention_layer_ids=[0, 2],
                     full_attention_layer_ids=[1], device="cpu", **kw)
    return pool, SWATokenToKVPoolAllocator(size, size_swa, page_size, F32, "cpu", pool, need_sort)


# -- ReqToTokenPool ---------------------------------------------------------------------------------------------------

def test_req_to_token_pool_rows_from_the_tail_and_padding_row():
    p = ReqToTokenPool(size=4, max_context_len=8, device="cpu")
    assert p.req_to_token.shape == (5, 8) and p.req_to_token.dtype == torch.int32
    assert p.alloc_rows(2) == [3, 4]
    assert p.alloc_rows(1) == [2]
    assert p.alloc_rows(2) is None and p.available_size() == 1
    p.free_rows([4])
    assert p.alloc_rows(1) == [4]  # freed rows are appended, and rows come from the tail
    with pytest.raises(SlotError, match="padding row"):
        p.free_rows([0])
    with pytest.raises(SlotError, match="not allocated"):
        p.free_rows([1])
    with pytest.raises(SlotError, match="out of range"):
        p.free_rows([9])
    with pytest.raises(SlotError, match="not allocated"):
        p.free_rows([2, 2])


# -- page-1 allocator -------------------------------------------------------------------------------------------------

def test_token_allocator_order_and_none():
    a = TokenToKVPoolAllocator(8, F32, "cpu", None, need_sort=False)
    assert a.alloc(3).tolist() == [1, 2, 3]
    assert a.alloc(2).tolist() == [4, 5]
    a.free(T(2))
    assert a.available_size() == 4
    assert a.alloc(4).tolist() == [6, 7, 8, 2]
    assert a.alloc(1) is None and a.available_size() == 0


def test_token_allocator_need_sort_merges_only_when_short():
    a = TokenToKVPoolAllocator(8, F32, "cpu", None, need_sort=True)
    assert a.alloc(3).tolist() == [1, 2, 3]
    a.free(T(3, 1))
    assert a.available_size() == 7
    assert a.alloc(5).tolist() == [4, 5, 6, 7, 8]  # enough without the staged frees: no merge
    assert a.alloc(2).tolist() == [1, 3]  # short: staged frees sorted in


@pytest.mark.parametrize("bad, match", [(T(0), "dummy"), (T(9), "out of range"), (T(4), "not allocated"),
                                        (T(1, 1), "twice")])
def test_token_allocator_bad_free(bad, match):
    a = TokenToKVPoolAllocator(8, F32, "cpu", None, need_sort=False)
    a.alloc(3)
    with pytest.raises(SlotError, match=match):
        a.free(bad)
    assert a.available_size() == 5  # nothing changed


def test_token_allocator_double_free():
    a = TokenToKVPoolAllocator(8, F32, "cpu", None, need_sort=False)
    ids = a.alloc(2)
    a.free(ids)
    with pytest.raises(SlotError, match="already freed"):
        a.free(ids[:1])


# -- paged allocator --------------------------------------------------------------------------------------------------

def test_paged_alloc_and_free_prepends_pages():
    a = PagedTokenToKVPoolAllocator(16, 4, F32, "cpu", None, need_sort=False)
    assert a.alloc(8).tolist() == list(range(4, 12))  # pages 1, 2
    a.free(T(5))  # any slot frees its whole page
    assert a.free_pages.tolist() == [1, 3, 4]
    assert a.alloc(4).tolist() == [4, 5, 6, 7]
    with pytest.raises(PoolUsageError, match="multiple of page_size"):
        a.alloc(3)
    a.free(T(11, 9, 5))  # pages 2 and 1, sorted by unique, then put in front
    assert a.free_pages.tolist() == [1, 2, 3, 4]


def test_paged_alloc_extend_and_decode_order():
    a = PagedTokenToKVPoolAllocator(16, 4, F32, "cpu", None, need_sort=False)
    out = a.alloc_extend(T(0, 0), T(0, 0), T(5, 3), T(5, 3), T(-1, -1), 8)
    # request 0: page 1 whole + 1 token on page 2; request 1: page 3
    assert out.tolist() == [4, 5, 6, 7, 8, 12, 13, 14]
    assert a.alloc_decode(T(6, 4), T(6, 4), T(8, 14)).tolist() == [9, 15]
    assert a.alloc_decode(T(7, 5), T(7, 5), T(9, 15)).tolist() == [10, 16]  # request 1 opens page 4
    # prefix 7 ends mid-page: continue at last_loc + 1, then a new page (none left)
    assert a.alloc_extend(T(7), T(7), T(10), T(10), T(10), 3) is None
    assert a.alloc_extend(T(7), T(7), T(8), T(8), T(10), 1).tolist() == [11]


def test_paged_extend_mixed_prefixes_take_pages_in_batch_order():
    a = PagedTokenToKVPoolAllocator(40, 4, F32, "cpu", None, need_sort=False)
    first = a.alloc_extend(T(0, 0), T(0, 0), T(2, 4), T(2, 4), T(-1, -1), 6)
    assert first.tolist() == [4, 5, 8, 9, 10, 11]
    out = a.alloc_extend(T(2, 4), T(2, 4), T(11, 9), T(11, 9), T(5, 11), 14)
    # request 0: 6, 7 on its page 1, then page 3 whole, then 3 tokens of page 4; request 1: page 5 + 1 token of 6
    assert out.tolist() == [6, 7, 12, 13, 14, 15, 16, 17, 18, 20, 21, 22, 23, 24]


def test_paged_need_sort_stages_frees():
    a = PagedTokenToKVPoolAllocator(16, 4, F32, "cpu", None, need_sort=True)
    a.alloc(16)
    a.free(T(12))
    a.free(T(4))
    assert a.available_size() == 8 and a.free_pages.numel() == 0
    assert a.alloc(4).tolist() == [4, 5, 6, 7]  # merged and sorted: page 1 first


def test_paged_bad_last_loc_and_frees():
    a = PagedTokenToKVPoolAllocator(16, 4, F32, "cpu", None, need_sort=False)
    out = a.alloc_extend(T(0), T(0), T(2), T(2), T(-1), 2)
    with pytest.raises(SlotError, match="offset"):
        a.alloc_extend(T(2), T(2), T(3), T(3), T(4), 1)  # last token is at 5, not 4
    a.free(out)
    with pytest.raises(SlotError, match="not allocated"):
        a.alloc_decode(T(3), T(3), T(5))  # its page was freed: would hand out someone else's slot
    with pytest.raises(SlotError, match="dummy"):
        a.free(T(2))
    with pytest.raises(SlotError, match="not allocated"):
        a.free_page_ids(T(1))
    with pytest.raises(PoolUsageError, match="extend_num_tokens"):
        a.alloc_extend(T(0), T(0), T(2), T(2), T(-1), 3)


def test_get_num_new_pages():
    assert get_num_new_pages(T(5, 3, 8), 4, T(0, 2, 4)) == 2 + 0 + 1
    assert get_num_new_pages(T(5, 4, 9), 4, decode=True) == 2


# -- KV buffers -------------------------------------------------------------------------------------------------------

class Layer:
    def __init__(self, layer_id: int) -> None:
        self.layer_id = layer_id


def test_mha_pool_shapes_and_writes():
    pool = MHATokenToKVPool(size=8, page_size=4, dtype=F32, head_num=2, head_dim=3, layer_num=2, device="cpu",
                            v_head_dim=5)
    assert pool.get_key_buffer(1).shape == (12, 2, 3) and pool.get_value_buffer(1).shape == (12, 2, 5)
    k, v = torch.randn(2, 2, 3), torch.randn(2, 2, 5)
    pool.set_kv_buffer(Layer(1), T(4, 9), k, v)
    assert torch.equal(pool.get_kv_buffer(1)[0][T(4, 9)], k) and torch.equal(pool.get_value_buffer(1)[T(4, 9)], v)
    assert pool.get_key_buffer(0).abs().sum() == 0
    with pytest.raises(LayerMappingError, match="layer 2"):
        pool.get_key_buffer(2)
    with pytest.raises(SlotError, match="out of range"):
        pool.set_kv_buffer(0, T(12), k[:1], v[:1])
    with pytest.raises(PoolUsageError, match=r"V \[n, 2, 5\]"):
        pool.set_kv_buffer(0, T(4, 9), k, k)


def test_swa_pool_layers_mapping_and_head_shapes():
    pool = SWAKVPool(32, 8, 4, F32, head_num=4, head_dim=16, swa_attention_layer_ids=[0, 1, 3],
                     full_attention_layer_ids=[2, 5], device="cpu", swa_head_num=2, swa_head_dim=8)
    assert pool.layers_mapping == {2: (0, False), 5: (1, False), 0: (0, True), 1: (1, True), 3: (2, True)}
    assert (pool.swa_layer_nums, pool.full_layer_nums) == (3, 2)
    assert pool.get_key_buffer(2).shape == (36, 4, 16)  # full side: head_num / head_dim
    assert pool.get_key_buffer(3).shape == (12, 2, 8)  # sliding side: swa_head_num / swa_head_dim
    assert pool.get_value_buffer(3).shape == (12, 2, 16)  # V falls back to head_dim, as SGLang's does
    assert pool.get_key_buffer(3) is pool.swa_kv_pool.get_key_buffer(2)
    with pytest.raises(LayerMappingError, match="layer 4 is not in"):
        pool.get_value_buffer(4)
    with pytest.raises(LayerMappingError, match="distinct"):
        SWAKVPool(8, 8, 1, F32, 1, 1, [0, 1], [1], "cpu")
    with pytest.raises(PoolUsageError, match="no mapping yet"):
        pool.translate_loc_from_full_to_swa(T(1))


def test_swa_pool_set_kv_buffer_takes_the_translated_loc():
    pool, a = swa(16, 4)
    full = a.alloc(3)
    a.free_swa(full[:1])
    full2 = a.alloc(2)
    swa_loc = pool.translate_loc_from_full_to_swa(full2)
    assert full2.tolist() == [4, 5] and swa_loc.tolist() == [4, 1]
    k, v = torch.randn(2, 2, 4), torch.randn(2, 2, 4)
    pool.set_kv_buffer(Layer(2), KVWriteLoc(full2, swa_loc=swa_loc), k, v)
    assert torch.equal(pool.get_key_buffer(2)[swa_loc], k)
    assert torch.equal(pool.swa_kv_pool.get_value_buffer(1)[swa_loc], v)
    pool.set_kv_buffer(1, full2, k, v)  # a full layer takes the bare full loc
    assert torch.equal(pool.get_key_buffer(1)[full2], k)
    with pytest.raises(PoolUsageError, match="sliding layer"):
        pool.set_kv_buffer(0, full2, k, v)
    assert torch.equal(pool.translate_loc_for_layer(0, full2), swa_loc)
    assert torch.equal(pool.translate_loc_for_layer(Layer(1), full2), full2)


# -- SWA allocator ----------------------------------------------------------------------------------------------------

def test_swa_allocator_mapping_sentinel_and_order_page1():
    pool, a = swa(8, 4)
    m = a.full_to_swa_index_mapping
    assert m.shape == (8 + 1 + 1,) and m[-1] == -1 and m[:-1].abs().sum() == 0
    assert pool.full_to_swa_index_mapping is m and a.get_kvcache() is pool
    assert a.alloc(3).tolist() == [1, 2, 3] and m[1:4].tolist() == [1, 2, 3]
    a.free_swa(T(1, 2))
    assert m[1:4].tolist() == [0, 0, 3] and a.swa_attn_allocator.free_pages.tolist() == [4, 1, 2]
    assert (a.full_available_size(), a.swa_available_size(), a.available_size()) == (5, 3, 3)
    assert a.alloc(2).tolist() == [4, 5] and m[4:6].tolist() == [4, 1]
    assert a.translate_loc_from_full_to_swa(T(5, -1, 1)).tolist() == [1, -1, 0]
    assert a.alloc(2) is None  # the SWA side has 1 left
    a.free(T(3, 4))
    assert a.full_attn_allocator.free_pages.tolist()[-2:] == [3, 4]


def test_swa_allocator_paged_extend_decode_free_swa():
    _pool, a = swa(32, 16, 4)
    out = a.alloc_extend(T(0, 0), T(0, 0), T(5, 3), T(5, 3), T(-1, -1), 8)
    assert out.tolist() == [4, 5, 6, 7, 8, 12, 13, 14]
    assert a.translate_loc_from_full_to_swa(out).tolist() == [4, 5, 6, 7, 8, 12, 13, 14]
    assert a.alloc_decode(T(6, 4), T(6, 4), T(8, 14)).tolist() == [9, 15]
    a.free_swa_segment(out[:4], start_pos=0)  # request 0's first page
    assert a.swa_attn_allocator.free_pages.tolist() == [1, 4]
    assert a.full_to_swa_index_mapping[4:10].tolist() == [0, 0, 0, 0, 8, 9]
    # the next request's pages differ now: full page 4 pairs with SWA page 1
    nxt = a.alloc_extend(T(0), T(0), T(2), T(2), T(-1), 2)
    assert nxt.tolist() == [16, 17] and a.translate_loc_from_full_to_swa(nxt).tolist() == [4, 5]
    with pytest.raises(SlotError, match="no live SWA"):
        a.free(out[:4])
    a.free_full(out[:4])
    with pytest.raises(SlotError, match="still holds SWA"):
        a.free_full(nxt)
    a.free_swa(T(17))  # non-segment free_swa: the whole SWA page of that slot
    assert a.full_to_swa_index_mapping[16:18].tolist() == [0, 0] and a.swa_attn_allocator.free_pages[0] == 1
    with pytest.raises(PoolUsageError, match="alloc_extend"):
        a.alloc(4)


def test_swa_allocator_decode_fails_without_leaking_the_full_side():
    _pool, a = swa(32, 8, 4)  # SWA side: 2 pages
    a.alloc_extend(T(0, 0), T(0, 0), T(4, 4), T(4, 4), T(-1, -1), 8)
    full_before = a.full_available_size()
    assert a.alloc_decode(T(5, 5), T(5, 5), T(7, 11)) is None
    assert a.full_available_size() == full_before


def test_swa_free_group_releases_in_enqueue_order():
    _pool, a = swa(64, 32, 4)
    out = a.alloc_extend(T(0, 0), T(0, 0), T(8, 8), T(8, 8), T(-1, -1), 16)
    assert a.swa_attn_allocator.free_pages.tolist() == [5, 6, 7, 8]
    a.free_group_begin()
    a.free_swa_segment(out[:4], start_pos=0)
    a.free_swa_segment(out[8:12], start_pos=0)
    assert a.swa_attn_allocator.free_pages.tolist() == [5, 6, 7, 8]  # held until the group ends
    a.free_group_end()
    assert a.swa_attn_allocator.free_pages.tolist() == [1, 3, 5, 6, 7, 8]
    with pytest.raises(SlotError, match="no live SWA"):
        a.free_swa_segment(out[:4], start_pos=0)


def test_swa_allocator_bad_segment_and_dummy():
    _pool, a = swa(32, 16, 4)
    out = a.alloc_extend(T(0), T(0), T(8), T(8), T(-1), 8)
    with pytest.raises(PoolUsageError, match="not a multiple"):
        a.free_swa_segment(out[2:], start_pos=2)
    with pytest.raises(SlotError, match="contiguous"):
        a.free_swa_segment(T(4, 8, 5, 9), start_pos=0)
    with pytest.raises(SlotError, match="dummy"):
        a.free(T(0))
    with pytest.raises(SlotError, match="out of range"):
        a.free(T(36))
    with pytest.raises(SlotError, match="out of range"):
        a.translate_loc_from_full_to_swa(T(37))


def test_pools_accept_a_device_argument():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    pool = SWAKVPool(16, 8, 4, F32, 1, 2, [0], [1], device=dev)
    a = SWATokenToKVPoolAllocator(16, 8, 4, F32, dev, pool, need_sort=False)
    out = a.alloc_extend(T(0).to(dev), T(0), T(3).to(dev), T(3), T(-1).to(dev), 3)
    assert out.device.type == torch.device(dev).type and pool.get_key_buffer(0).device.type == out.device.type


# -- segment frees (SGLang's free_segments / free_full_segments) ------------------------------------------------------

def interleaved_rows(alloc, page_size: int, lens: list[int], rng) -> list[list[int]]:
    """Rows of several requests grown token by token in random turn, so each row's pages are scattered."""
    rows: list[list[int]] = [[] for _ in lens]
    todo = [i for i, n in enumerate(lens) for _ in range(n)]
    rng.shuffle(todo)
    for i in todo:
        n = len(rows[i]) + 1
        if page_size == 1:
            out = alloc.alloc(1)
        else:
            last = rows[i][-1] if rows[i] else -1
            out = alloc.alloc_extend(T(n - 1), T(n - 1), T(n), T(n), T(last), 1)
        rows[i].append(int(out[0]))
    return rows


def page_aligned_runs(row: list[int], page_size: int, rng) -> list[tuple[torch.Tensor, int]]:
    """``row`` cut at random page boundaries into ``(slots, start_pos)`` runs, in row order."""
    bounds = sorted(rng.sample(range(page_size, len(row), page_size), k=rng.randint(0, (len(row) - 1) // page_size)))
    edges = [0, *bounds, len(row)]
    return [(torch.tensor(row[a:b], dtype=torch.int64), a) for a, b in pairwise(edges)]


def pages_of(run: list[int], page_size: int) -> list[int]:
    """The pages a row run covers, in row order, each once (written out by hand: no allocator code)."""
    seen: list[int] = []
    for slot in run:
        if slot // page_size not in seen:
            seen.append(slot // page_size)
    return seen


@pytest.mark.parametrize("page_size", [1, 4])
def test_free_segments_frees_each_run_in_order(page_size: int):
    rng = random.Random()
    for _ in range(10):
        size = page_size * 64
        a = (TokenToKVPoolAllocator(size, F32, "cpu") if page_size == 1
             else PagedTokenToKVPoolAllocator(size, page_size, F32, "cpu"))
        rows = interleaved_rows(a, page_size, [rng.randint(1, 30), rng.randint(1, 30)], rng)
        before = a.free_pages.tolist()
        runs = page_aligned_runs(rows[0], page_size, rng)
        a.free_segments(runs)
        freed = [pages_of(r.tolist(), page_size) for r, _ in runs]
        if page_size == 1:  # a page-1 free appends at the back, run after run
            expected = before + [p for pages in freed for p in pages]
        else:  # a paged free puts its pages in front, so the last run ends up first
            expected = [p for pages in reversed(freed) for p in pages] + before
        assert a.free_pages.tolist() == expected
        held = pages_of(rows[1], page_size)
        assert torch.nonzero(a.ledger.live).reshape(-1).tolist() == sorted(held)
        assert a.available_size() == size - len(held) * page_size


@pytest.mark.parametrize("page_size", [1, 4])
def test_free_segments_refuses_runs_that_share_a_page_or_go_backwards(page_size: int):
    a = (TokenToKVPoolAllocator(32, F32, "cpu") if page_size == 1
         else PagedTokenToKVPoolAllocator(32, page_size, F32, "cpu"))
    row = a.alloc(12) if page_size == 1 else a.alloc_extend(T(0), T(0), T(10), T(10), T(-1), 10)
    left = a.available_size()
    back = [(row[page_size:], page_size), (row[:page_size], 0)]
    with pytest.raises(PoolUsageError, match="row order"):
        a.free_segments(back)
    if page_size > 1:  # a run ending mid-page and one starting on that page share it
        with pytest.raises(PoolUsageError, match="each page in one run"):
            a.free_full_segments([(row[:6], 0), (row[6:], 6)])
        with pytest.raises(PoolUsageError, match="not a multiple"):
            a.free_full_segment(row[2:], start_pos=2)
    assert a.available_size() == left  # refused before anything was freed
    a.free_segments([(row[:0], 0), (row, 0), (row[:0], 99)])  # empty runs are skipped
    assert a.available_size() == 32


@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_swa_free_full_segments_then_free_segments_give_back_a_finished_row(page_size: int):
    """A finished request whose middle was evicted: the dead middle goes back full-side only, the rest both sides."""
    rng = random.Random()
    for _ in range(10):
        _pool, a = swa(page_size * 70, page_size * 64, page_size)
        rows = interleaved_rows(a, page_size, [rng.randint(4, 40), rng.randint(1, 20)], rng)
        row, n = rows[0], len(rows[0])
        lo = page_size * rng.randint(0, n // page_size // 2)  # the protected prefix
        hi = max(lo, page_size * rng.randint(lo // page_size, n // page_size))  # the eviction cursor
        full_before, swa_before = a.full_attn_allocator.free_pages.tolist(), a.swa_attn_allocator.free_pages.tolist()
        swa_of = a.full_to_swa_index_mapping[T(*row)].tolist()
        a.free_swa_segment(T(*row[lo:hi]), start_pos=lo)  # out-of-window eviction
        dead, alive = [(T(*row[lo:hi]), lo)], [(T(*row[:lo]), 0), (T(*row[hi:]), hi)]
        a.free_full_segments(dead)
        a.free_segments(alive)
        # a paged free prepends its pages (page 1 appends): evicted SWA pages first, then run 1, then run 2
        full_runs = [pages_of(row[lo:hi], page_size), pages_of(row[:lo], page_size), pages_of(row[hi:], page_size)]
        swa_runs = [pages_of(swa_of[lo:hi], page_size), pages_of(swa_of[:lo], page_size),
                    pages_of(swa_of[hi:], page_size)]
        for sub, runs, before in ((a.full_attn_allocator, full_runs, full_before),
                                  (a.swa_attn_allocator, swa_runs, swa_before)):
            if page_size == 1:
                expected = before + [p for pages in runs for p in pages]
            else:
                expected = [p for pages in reversed(runs) for p in pages] + before
            assert sub.free_pages.tolist() == expected
        assert a.full_to_swa_index_mapping[T(*row)].abs().sum() == 0
        other = T(*rows[1])
        assert bool((a.full_to_swa_index_mapping[other] > 0).all())  # the other request keeps both sides
        assert a.full_available_size() == page_size * 70 - len(pages_of(rows[1], page_size)) * page_size


def test_swa_segment_frees_refuse_the_wrong_side():
    _pool, a = swa(64, 32, 4)
    row = a.alloc_extend(T(0), T(0), T(12), T(12), T(-1), 12)
    a.free_swa_segment(row[4:8], start_pos=4)
    sizes = (a.full_available_size(), a.swa_available_size())
    with pytest.raises(SlotError, match="still holds SWA slot"):
        a.free_full_segments([(row[:4], 0)])  # its SWA side is live: free_segments frees both
    with pytest.raises(SlotError, match="no live SWA"):
        a.free_segments([(row[4:8], 4)])  # evicted already: free_full_segments frees the full side
    assert (a.full_available_size(), a.swa_available_size()) == sizes
