"""The float64 reference against dense SDPA with an explicit mask built here, independently."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from swa_kit.attention.reference import reference_attention
from swa_kit.probe import synthetic_batch


def dense_oracle(made, keys, tree_masks=None):
    """Per request: every position's clean K/V, mask = causal & (q - k < keys) & tree, float64 SDPA."""
    batch = made.batch
    group = batch.q.shape[1] // batch.k_buffer.shape[1]
    outs = []
    for b in range(batch.batch_size):
        lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
        seq_len, q_len = made.keys[b].shape[0], hi - lo
        q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        k_pos = torch.arange(seq_len)[None, :]
        mask = k_pos <= q_pos
        if keys is not None:
            mask &= (q_pos - k_pos) < keys
        if tree_masks is not None:
            mask &= tree_masks[b]
        q = batch.q[lo:hi].double().transpose(0, 1)
        k = made.keys[b].double().repeat_interleave(group, dim=1).transpose(0, 1)
        v = made.values[b].double().repeat_interleave(group, dim=1).transpose(0, 1)
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
    made = synthetic_batch(q_lens, seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=16, page_size=page,
                           window_keys=keys, garbage=math.nan, dtype=torch.float64, generator=gen)
    out = reference_attention(made.batch, keys).out
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, dense_oracle(made, keys), rtol=1e-12, atol=1e-12)
    if page > 1:  # the paged layout the block-table kernels read is well formed
        table = made.batch.block_table()
        assert table.shape[0] == len(q_lens)


def test_freed_slots_hold_nan_and_would_leak_if_read():
    made = synthetic_batch([1], [30], window_keys=4, garbage=math.nan, dtype=torch.float64, head_dim=16)
    freed = made.freed[0]
    assert freed.sum() == 26  # positions 0..25 left the window of the query at 29
    slots = made.batch.request_slots(0)[freed].long()
    assert torch.isnan(made.batch.k_buffer[slots]).all()
    assert torch.isnan(reference_attention(made.batch, None).out).all()  # no window: the garbage is read
    assert torch.isfinite(reference_attention(made.batch, 4).out).all()


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
        made = synthetic_batch([q_len] * 2, [prefix + q_len] * 2, num_q_heads=4, num_kv_heads=2, head_dim=16,
                               window_keys=keys, garbage=math.nan, tree_masks=trees, dtype=torch.float64,
                               generator=gen)
        out = reference_attention(made.batch, keys).out
        torch.testing.assert_close(out, dense_oracle(made, keys, trees), rtol=1e-12, atol=1e-12)


def test_window_changes_the_answer():
    made = synthetic_batch([1], [12], head_dim=16, dtype=torch.float64)
    full, windowed = reference_attention(made.batch, None).out, reference_attention(made.batch, 3).out
    assert (full - windowed).abs().max() > 1e-3


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_window_is_refused(bad):
    made = synthetic_batch([1], [4], head_dim=16)
    with pytest.raises(ValueError):
        reference_attention(made.batch, bad)
