"""The float64 reference against dense SDPA with an explicit mask built here, independently."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.reference import reference_attention


def clean_kv(batch):
    """Every request's K and V by position, copied before any slot is poisoned."""
    slots = [batch.request_slots(b).long() for b in range(batch.batch_size)]
    return [batch.k_buffer[s].clone() for s in slots], [batch.v_buffer[s].clone() for s in slots]


def dense_oracle(batch, clean, keys, tree_masks=None):
    """Per request: every position's clean K/V, mask = causal & (q - k < keys) & tree, float64 SDPA."""
    group = batch.q.shape[1] // batch.k_buffer.shape[1]
    outs = []
    for b, (k_clean, v_clean) in enumerate(zip(*clean)):
        lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
        seq_len, q_len = k_clean.shape[0], hi - lo
        q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        k_pos = torch.arange(seq_len)[None, :]
        mask = k_pos <= q_pos
        if keys is not None:
            mask &= (q_pos - k_pos) < keys
        if tree_masks is not None:
            mask &= tree_masks[b]
        q = batch.q[lo:hi].double().transpose(0, 1)
        k = k_clean.double().repeat_interleave(group, dim=1).transpose(0, 1)
        v = v_clean.double().repeat_interleave(group, dim=1).transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=batch.sm_scale).transpose(0, 1))
    return torch.cat(outs)


CASES = [
    # q_lens, seq_lens, hq, hkv, page, keys
    ([5], [5], 2, 2, 1, None),
    ([7, 1, 3], [7, 20, 12], 4, 2, 1, 4),
    ([1, 1], [33, 17], 8, 1, 16, 1),
    ([4, 9], [40, 9], 6, 3, 16, 8),
    ([3], [50], 4, 4, 16, 64),
]


@pytest.mark.parametrize("q_lens,seq_lens,hq,hkv,page,keys", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_matches_dense_sdpa(q_lens, seq_lens, hq, hkv, page, keys, seed):
    gen = torch.Generator().manual_seed(seed)
    batch = random_paged_batch(q_lens, seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=16, page_size=page,
                               dtype=torch.float64, generator=gen)
    clean = clean_kv(batch)
    poison_unattended(batch, keys)
    out = reference_attention(batch, keys).out
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, dense_oracle(batch, clean, keys), rtol=1e-12, atol=1e-12)
    if page > 1:  # the paged layout the block-table kernels read is well formed
        table = batch.block_table()
        assert table.shape[0] == len(q_lens)


def test_freed_slots_hold_nan_and_would_leak_if_read():
    batch = random_paged_batch([1], [30], window_keys=4, garbage=math.nan, dtype=torch.float64, head_dim=16)
    freed = torch.arange(30) < 26  # positions 0..25 left the window of the query at 29
    slots = batch.request_slots(0).long()
    assert torch.isnan(batch.k_buffer[slots[freed]]).all() and torch.isfinite(batch.k_buffer[slots[~freed]]).all()
    assert torch.isnan(reference_attention(batch, None).out).all()  # no window: the garbage is read
    assert torch.isfinite(reference_attention(batch, 4).out).all()


def test_tree_masks():
    gen = torch.Generator().manual_seed(3)
    parents = [-1, 0, 0, 1, 1]  # a small draft tree over a 10-token prefix
    q_len, prefix = len(parents), 10
    trees = []
    for _ in range(2):
        tree = torch.ones(q_len, prefix + q_len, dtype=torch.bool)
        anc = torch.eye(q_len, dtype=torch.bool)
        for i, p in enumerate(parents):
            if p >= 0:
                anc[i] |= anc[p]
        tree[:, prefix:] = anc
        trees.append(tree)
    for keys in (None, 3, 8):
        batch = random_paged_batch([q_len] * 2, [prefix + q_len] * 2, num_q_heads=4, num_kv_heads=2, head_dim=16,
                                   tree_masks=trees, dtype=torch.float64, generator=gen)
        clean = clean_kv(batch)
        poison_unattended(batch, keys)
        out = reference_attention(batch, keys).out
        torch.testing.assert_close(out, dense_oracle(batch, clean, keys, trees), rtol=1e-12, atol=1e-12)


def test_window_changes_the_answer():
    batch = random_paged_batch([1], [12], head_dim=16, dtype=torch.float64)
    full, windowed = reference_attention(batch, None).out, reference_attention(batch, 3).out
    assert (full - windowed).abs().max() > 1e-3


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_window_is_refused(bad):
    batch = random_paged_batch([1], [4], head_dim=16)
    with pytest.raises(ValueError):
        reference_attention(batch, bad)
