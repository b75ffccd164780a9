"""AttentionBatch: the one contract every path reads, and the bad inputs it refuses before any kernel runs."""

from __future__ import annotations

import pytest
import torch

from swa_kit.attention.batch import AttentionBatch
from swa_kit.errors import SlotError, UsageError


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
