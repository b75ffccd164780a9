"""Emulated aiter CK/HIP ops against the float64 reference: the window they honour, or ignore."""

from __future__ import annotations

import pytest
import torch

from swa_kit.attention.aiter import emulated
from swa_kit.attention.aiter.native import mha_batch_prefill_args, paged_attention_ragged_args
from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError
from swa_kit.window import from_keys


def token_batch(q_lens, seq_lens, *, hq=4, hkv=2, d=32, dtype=torch.float32):
    """A fresh random page-size-1 batch with scattered slots; 7 spare slots hold unread random data."""
    return random_paged_batch(q_lens, seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, spare_pages=7,
                              dtype=dtype, generator=torch.Generator().manual_seed(torch.seed()))


def max_err(result, expected):
    return (result.out.double() - expected.out).abs().max().item()


@pytest.mark.parametrize("layer_keys", [1, 3, 8, None])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 1), (8, 2)])
def test_paged_ragged_ignores_the_window(layer_keys, hq, hkv):
    batch = token_batch([1, 1, 1], [20, 9, 1], hq=hq, hkv=hkv)
    window_arg = None if layer_keys is None else from_keys("sglang", layer_keys)
    result = run_path("aiter_emulated_paged_ragged", batch, window_arg)
    assert result.tier == "emulated" and result.path == "aiter_emulated_paged_ragged"
    assert max_err(result, reference_attention(batch, None)) < 1e-5
    if layer_keys is not None:
        assert any("NOT applied" in note for note in result.notes)
        if layer_keys < 20:  # request 0 has more keys than the window: full attention differs
            windowed = reference_attention(batch, layer_keys).out
            assert (result.out[0].double() - windowed[0]).abs().max() > 1e-3


@pytest.mark.parametrize("keys", [1, 4, 40, None])
@pytest.mark.parametrize("q_lens,seq_lens", [([12, 5], [12, 5]), ([3, 1], [25, 11]), ([1, 1], [9, 30])])
def test_mha_batch_prefill_honours_the_window(keys, q_lens, seq_lens):
    batch = token_batch(q_lens, seq_lens, hq=6, hkv=2)
    result = run_path("aiter_emulated_mha_batch_prefill", batch, from_keys("aiter_ck", keys))
    assert result.tier == "emulated"
    assert max_err(result, reference_attention(batch, keys)) < 1e-5


@pytest.mark.parametrize("keys", [1, 5, 16])
def test_sglang_ck_argument_attends_w_keys(keys):
    """SGLang passes (sliding_window_size, -1) with causal=True to the CK prefill: W keys, as meant."""
    batch = token_batch([6], [20])
    sws = keys - 1
    result = run_path("aiter_emulated_mha_batch_prefill", batch, (sws, -1))
    assert max_err(result, reference_attention(batch, keys)) < 1e-5


def test_mha_batch_prefill_lse_softcap_and_non_causal():
    batch = token_batch([4], [4], hq=2, hkv=2, d=16)
    args, kwargs = mha_batch_prefill_args(batch, (-1, -1))
    out, lse = emulated.mha_batch_prefill_func(*args, **{**kwargs, "return_lse": True})
    s = torch.einsum("qhd,khd->hqk", batch.q.double(), batch.k_buffer[batch.kv_indices].double()) / 4.0
    s = s.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    assert (lse.double() - torch.logsumexp(s, -1).T).abs().max() < 1e-5
    full = emulated.mha_batch_prefill_func(*args, **{**kwargs, "causal": False})
    k, v = batch.k_buffer[batch.kv_indices].double(), batch.v_buffer[batch.kv_indices].double()
    dense = torch.softmax(torch.einsum("qhd,khd->hqk", batch.q.double(), k) / 4.0, -1)
    assert (full.double() - torch.einsum("hqk,khd->qhd", dense, v)).abs().max() < 1e-5
    capped = emulated.mha_batch_prefill_func(*args, **{**kwargs, "logits_soft_cap": 0.5})
    sc = 0.5 * torch.tanh(torch.einsum("qhd,khd->hqk", batch.q.double(), k) / 4.0 / 0.5)
    sc = sc.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    assert (capped.double() - torch.einsum("hqk,khd->qhd", torch.softmax(sc, -1), v)).abs().max() < 1e-5


def test_paged_ragged_reads_pages_and_last_page_lens():
    """Page size 4, two pages per request, last page partly filled: keys 0..(4 + last - 1)."""
    hkv, d = 2, 16
    key_cache, value_cache = torch.randn(6, 4, hkv, d), torch.randn(6, 4, hkv, d)
    query = torch.randn(2, 2, d)
    indptr, pages, last = torch.tensor([0, 2, 4]), torch.tensor([5, 1, 2, 3]), torch.tensor([3, 1])
    out = torch.empty(2, 2, d)
    one = torch.ones(1)
    emulated.paged_attention_ragged(
        out, None, query, key_cache, value_cache, 0.25, indptr, pages, last, 4, 1, None, "auto", "NHD", 0.0, one, one
    )
    for b, (p, n) in enumerate([([5, 1], 7), ([2, 3], 5)]):
        k = key_cache[p].reshape(-1, hkv, d)[:n].double()
        v = value_cache[p].reshape(-1, hkv, d)[:n].double()
        w = torch.softmax(torch.einsum("hd,khd->hk", query[b].double(), k) * 0.25, -1)
        assert (out[b].double() - torch.einsum("hk,khd->hd", w, v)).abs().max() < 1e-5


def test_bad_inputs_raise():
    decode = token_batch([1], [5])
    args = list(paged_attention_ragged_args(decode))
    for index, value, match in [(13, "HND", "layout"), (12, "fp8_e4m3", "fp8"), (11, torch.ones(4), "alibi")]:
        bad = list(args)
        bad[index] = value
        with pytest.raises(PathUnavailableError, match=match):
            emulated.paged_attention_ragged(*bad)
    with pytest.raises(PathUnavailableError, match="one query"):
        run_path("aiter_emulated_paged_ragged", token_batch([2], [5]), None)
    prefill = token_batch([3], [5])
    p_args, p_kwargs = mha_batch_prefill_args(prefill, (-1, -1))
    for extra, match in [({"dropout_p": 0.1}, "dropout"), ({"return_attn_probs": True}, "attn_probs")]:
        with pytest.raises(PathUnavailableError, match=match):
            emulated.mha_batch_prefill_func(*p_args, **{**p_kwargs, **extra})
    with pytest.raises(ValueError):
        run_path("aiter_emulated_mha_batch_prefill", prefill, (2, 1))  # right > 0 looks ahead


def test_declarations():
    ragged, prefill = get_path("aiter_emulated_paged_ragged"), get_path("aiter_emulated_mha_batch_prefill")
    assert not ragged.honours_window and ragged.convention is None and ragged.tier == "emulated"
    assert prefill.honours_window and prefill.convention == "aiter_ck" and prefill.tier == "emulated"
