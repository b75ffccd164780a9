"""AttentionBatch: the one contract every path reads, its builders, and the bad inputs refused before any kernel
runs."""

from __future__ import annotations

import math

import pytest
import torch

from swa_kit.attention.batch import AttentionBatch, indptr, poison_unattended, random_paged_batch
from swa_kit.errors import SlotError, UsageError
from swa_kit.engine.pools import KVWriteLoc
from swa_kit.engine.workers import request_ids_past_swa_buffer


def _batch(**change):
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    args = dict(q=torch.randn(3, 4, 8, generator=gen), k_buffer=torch.randn(48, 2, 8, generator=gen),
                v_buffer=torch.randn(48, 2, 8, generator=gen), qo_indptr=torch.tensor([0, 1, 3]),
                kv_indptr=torch.tensor([0, 16, 32]), kv_indices=torch.arange(16, 48), sm_scale=0.3, page_size=16)
    args.update(change)
    return AttentionBatch(**args)


def test_lengths_positions_and_block_table():
    batch = _batch()
    assert batch.q_lens.tolist() == [1, 2] and batch.seq_lens.tolist() == [16, 16]
    assert batch.query_positions(1).tolist() == [14, 15]  # queries sit at the end of their keys
    assert batch.block_table().tolist() == [[1], [2]]
    k, _ = batch.paged_kv()
    assert torch.equal(k[2, 5], batch.k_buffer[37])


@pytest.mark.parametrize("change, match", [
    (dict(q=torch.randn(3, 3, 8)), "not a multiple of KV heads"),
    (dict(q=torch.randn(3, 4, 4)), "head_dim 4 != key head_dim 8"),
    (dict(qo_indptr=torch.tensor([0, 3])), "1 requests but kv_indptr has 2"),
    (dict(qo_indptr=torch.tensor([0, 1, 2])), "ends at 2 but q holds 3"),
    (dict(q=torch.randn(18, 4, 8), qo_indptr=torch.tensor([0, 1, 18])), "q_len 17 must be in 1..seq_len"),
    (dict(tree_masks=[torch.ones(1, 16, dtype=torch.bool), torch.ones(2, 15, dtype=torch.bool)]), "request 1"),
    (dict(q=torch.randn(3, 8)), "must be \\[tokens, heads, head_dim\\]"),
])
def test_inconsistent_shapes_are_refused(change, match):
    with pytest.raises(UsageError, match=match):
        _batch(**change)


def test_full_pool_ids_against_an_swa_buffer_are_refused():
    with pytest.raises(SlotError, match="slot 48, outside the layer's buffer of 48 slots.*translate_loc_from_full"):
        _batch(kv_indices=torch.arange(17, 49))


def test_slots_that_are_not_whole_aligned_pages_are_refused_for_block_tables():
    batch = _batch(kv_indices=torch.cat([torch.arange(16, 32), torch.arange(33, 49) % 48]))
    with pytest.raises(SlotError, match="request 1: slots are not whole aligned pages of 16"):
        batch.block_table()


# -- builders ------------------------------------------------------------------------------------------


def test_indptr():
    assert indptr([3, 1, 4]).tolist() == [0, 3, 4, 8] and indptr([3, 1, 4]).dtype == torch.int32
    assert indptr(torch.tensor([2, 5]), dtype=torch.int64).tolist() == [0, 2, 7]
    assert indptr([]).tolist() == [0]


def test_from_lengths_builds_the_indptrs_and_refuses_a_wrong_slot_count():
    q, k = torch.randn(3, 4, 16), torch.randn(40, 2, 16)
    batch = AttentionBatch.from_lengths(q, k, k.clone(), [1, 2], [5, 9], torch.arange(1, 15))
    assert batch.qo_indptr.tolist() == [0, 1, 3] and batch.kv_indptr.tolist() == [0, 5, 14]
    assert batch.sm_scale == 0.25 and batch.request_slots(1).tolist() == list(range(6, 15))
    with pytest.raises(UsageError, match="kv_indices holds 13 slots but seq_lens \\[5, 9\\] add up to 14"):
        AttentionBatch.from_lengths(q, k, k.clone(), [1, 2], [5, 9], torch.arange(1, 14))


def test_from_pools_reads_back_what_each_layer_wrote():
    # Request 1's full ids run past the SWA buffer; a second request sits in row 3.
    workers, ids = request_ids_past_swa_buffer("NONE")
    target = workers.target
    pool, req_to_token_pool = target.token_to_kv_pool, target.req_to_token_pool
    more = target.token_to_kv_pool_allocator.alloc(2)
    req_to_token_pool.req_to_token[3, :2] = more.to(torch.int32)
    full_ids = torch.cat([ids, more]).to(torch.int64)
    sliding, full = target.layout.swa_attention_layer_ids[0], target.layout.full_attention_layer_ids[0]
    k, v = torch.randn(12, 2, 8), torch.randn(12, 2, 8)
    write = KVWriteLoc(full_ids, swa_loc=pool.translate_loc_from_full_to_swa(full_ids))
    for layer in (sliding, full):  # as SGLang's forward writes: sliding layers at the translated SWA slots
        pool.set_kv_buffer(layer, write, k, v)
    q = torch.randn(2, 4, 8)
    for layer, swa_kv_pool in ((sliding, pool), (full, None)):
        batch = AttentionBatch.from_pools(q, pool, layer, req_to_token_pool, [1, 3], [1, 1], [10, 2],
                                          swa_kv_pool=swa_kv_pool)
        assert batch.k_buffer.data_ptr() == pool.get_key_buffer(layer).data_ptr()  # the pool's own buffer
        slots = batch.kv_indices.long()
        assert torch.equal(batch.k_buffer[slots], k) and torch.equal(batch.v_buffer[slots], v)
    with pytest.raises(SlotError, match="outside the layer's buffer of 17 slots"):  # untranslated full ids
        AttentionBatch.from_pools(q, pool, sliding, req_to_token_pool, [1, 3], [1, 1], [10, 2])
    with pytest.raises(UsageError, match="1 req_pool_indices but 2 seq_lens"):
        AttentionBatch.from_pools(q, pool, full, req_to_token_pool, [1], [1, 1], [10, 2])


def test_random_paged_batch_layout_and_garbage():
    batch = random_paged_batch([2, 1], [20, 35], page_size=16, spare_pages=2, window_keys=4, garbage=-7.0,
                               generator=torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,)))))
    assert batch.k_buffer.shape == ((1 + 2 + 3 + 2) * 16, 2, 64) and batch.sm_scale == 64 ** -0.5
    assert batch.q_lens.tolist() == [2, 1] and batch.seq_lens.tolist() == [20, 35]
    table = batch.block_table()  # whole aligned pages, or it raises
    pages = table[0, :2].tolist() + table[1].tolist()
    assert len(set(pages)) == 5 and 0 not in pages
    # Request 1's query sits at position 34: positions 0..30 left its 4-key window and hold garbage.
    slots = batch.request_slots(1).long()
    assert (batch.k_buffer[slots[:31]] == -7.0).all() and (batch.v_buffer[slots[:31]] == -7.0).all()
    assert (batch.k_buffer[slots[31:]] != -7.0).all()
    owned = torch.zeros(batch.k_buffer.shape[0], dtype=torch.bool)
    owned[batch.kv_indices.long()] = True
    assert (batch.k_buffer[~owned] == -7.0).all()  # the dummy page, the spare pages, the page tails


@pytest.mark.parametrize("trees", [False, True])
def test_poison_unattended_fills_exactly_the_slots_no_query_attends(trees):
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    q_lens, seq_lens, keys = [3, 1, 5], [20, 7, 5], 4
    masks = [torch.rand(q, s, generator=gen) < 0.6 for q, s in zip(q_lens, seq_lens)] if trees else None
    batch = random_paged_batch(q_lens, seq_lens, page_size=4, head_dim=8, tree_masks=masks, generator=gen)
    before = batch.k_buffer.clone()
    filled = poison_unattended(batch, keys)
    attended = set()  # by brute force: query i of request b sits at seq_len - q_len + i
    for b, (q_len, seq_len) in enumerate(zip(q_lens, seq_lens)):
        slots = batch.request_slots(b).tolist()
        for i in range(q_len):
            for p in range(seq_len):
                if 0 <= seq_len - q_len + i - p < keys and (masks is None or masks[b][i, p]):
                    attended.add(slots[p])
        assert filled[b].tolist() == [s not in attended for s in slots]
    for slot in range(batch.k_buffer.shape[0]):
        if slot in attended:
            assert torch.equal(batch.k_buffer[slot], before[slot])
        else:
            assert batch.k_buffer[slot].isnan().all() and batch.v_buffer[slot].isnan().all()


def test_random_paged_batch_refuses_bad_input():
    with pytest.raises(UsageError, match="q_lens has 1 requests, seq_lens 2"):
        random_paged_batch([1], [2, 3])
    with pytest.raises(UsageError, match="window_keys=4 only chooses the slots that hold garbage"):
        random_paged_batch([1], [8], window_keys=4)
    with pytest.raises(UsageError, match="q_len 3 must be in 1..seq_len"):
        random_paged_batch([3], [2], garbage=math.nan)
