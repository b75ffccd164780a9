"""aiter's own Triton unified_attention kernels in Triton's CPU interpreter, against the float64 reference."""

from __future__ import annotations

import pytest
import torch

from swa_kit.attention.aiter import triton_kernels
from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError, WindowConventionError
from swa_kit.window import from_keys

_INTERPRETER = triton_kernels.interpreter_status()
pytestmark = pytest.mark.skipif(not _INTERPRETER[0], reason=_INTERPRETER[1])


def paged_batch(q_lens, seq_lens, *, hq=4, hkv=2, d=64, page_size=16, dtype=torch.float32):
    """A fresh random batch whose requests own shuffled whole pages; two spare pages hold unread random data."""
    return random_paged_batch(q_lens, seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page_size,
                              spare_pages=2, dtype=dtype, generator=torch.Generator().manual_seed(torch.seed()))


def check(batch, keys, tol=2e-5):
    result = run_path("aiter_triton_unified", batch, from_keys("aiter_unified", keys))
    expected = reference_attention(batch, keys).out
    assert result.tier == "aiter-triton-interpreter" and result.path == "aiter_triton_unified"
    assert result.device == "cpu"
    err = (result.out.double() - expected).abs().max().item()
    assert err < tol, f"keys={keys}: max error {err}"
    return result


CASES = [
    # (q_lens, seq_lens, hq, hkv, d, page_size): prefill, extend, decode, GQA 1/2/4, page sizes 1 and 16
    ([37, 20], [37, 20], 4, 2, 64, 16),
    ([5, 3], [41, 23], 4, 1, 64, 16),
    ([1, 1, 1], [40, 17, 3], 4, 2, 64, 16),
    ([6, 2], [30, 9], 2, 2, 128, 1),
    ([1, 1], [26, 5], 4, 2, 64, 1),
    ([4], [35], 8, 2, 128, 16),
]


@pytest.mark.parametrize("q_lens,seq_lens,hq,hkv,d,ps", CASES)
@pytest.mark.parametrize("keys", [1, 5, 64, None])
def test_matches_reference(q_lens, seq_lens, hq, hkv, d, ps, keys):
    check(paged_batch(q_lens, seq_lens, hq=hq, hkv=hkv, d=d, page_size=ps), keys)


def test_head_dim_256_decode_and_extend():
    check(paged_batch([1, 3], [20, 18], hq=2, hkv=1, d=256, page_size=16), 7)


def test_forced_3d_split_kv_matches_reference():
    batch = paged_batch([1, 1], [45, 30], hq=4, hkv=2, d=64, page_size=16)
    q, out = batch.q, torch.empty_like(batch.q)
    k, v = batch.paged_kv()
    plan = triton_kernels.unified_attention(
        q, k, v, out, batch.qo_indptr.int(), 1, batch.seq_lens.int(), 48, batch.sm_scale, (-1, -1),
        batch.block_table(), kernel="3d",
    )
    assert plan["kernel"] == "3d" and plan["NUM_SEGMENTS_PER_SEQ"] == 16
    assert (out.double() - reference_attention(batch, None).out).abs().max() < 2e-5


def test_sglang_argument_attends_one_key_short():
    """SGLang passes (sliding_window_size - 1, 0) = (W - 2, 0) to unified_attention: W - 1 keys."""
    w = 6
    batch = paged_batch([4, 1], [30, 25], page_size=16)
    sws = w - 1  # RadixAttention.sliding_window_size for a layer meant to attend w keys
    out = run_path("aiter_triton_unified", batch, (sws - 1, 0)).out.double()
    assert (out - reference_attention(batch, w - 1).out).abs().max() < 2e-5
    assert (out - reference_attention(batch, w).out).abs().max() > 1e-3


def test_nan_in_freed_out_of_window_slots():
    """Measured: V = NaN in slots no query attends.

    Extend (tiles of 64 keys): a freed page inside the window-start tile is loaded, and
    0 x NaN poisons the output. Decode (tiles of one block): pages wholly before the window
    are skipped, so the output stays finite; a NaN slot sharing the window's first page poisons it.
    """
    ps, keys = 16, 8
    extend = paged_batch([4], [60], page_size=ps)
    freed = extend.request_slots(0)[:ps]  # positions 0..15, all outside every query's window
    extend.v_buffer[freed] = float("nan")
    out = run_path("aiter_triton_unified", extend, from_keys("aiter_unified", keys)).out
    assert torch.isnan(out).any()
    assert not torch.isnan(reference_attention(extend, keys).out).any()

    decode = paged_batch([1], [60], page_size=ps)
    decode.v_buffer[decode.request_slots(0)[:ps]] = float("nan")  # page 0 of the request: wholly outside
    out = run_path("aiter_triton_unified", decode, from_keys("aiter_unified", keys)).out
    assert not torch.isnan(out).any()
    assert (out.double() - reference_attention(decode, keys).out).abs().max() < 2e-5
    decode.v_buffer[decode.request_slots(0)[48]] = float("nan")  # position 48: outside, same page as 52..59
    out = run_path("aiter_triton_unified", decode, from_keys("aiter_unified", keys)).out
    assert torch.isnan(out).all()


def test_garbage_finite_out_of_window_slots_do_not_leak():
    batch = paged_batch([3], [50], page_size=16)
    batch.v_buffer[batch.request_slots(0)[:30]] = 1e4
    batch.k_buffer[batch.request_slots(0)[:30]] = 1e2
    check(batch, 10, tol=1e-4)


def test_bad_inputs_raise():
    batch = paged_batch([2], [10], page_size=16)
    with pytest.raises(WindowConventionError):
        run_path("aiter_triton_unified", batch, (3, 2))  # looks ahead
    with pytest.raises(WindowConventionError):
        run_path("aiter_triton_unified", batch, 4)  # not a pair
    tree = paged_batch([2], [10], page_size=16)
    tree.tree_masks = [torch.ones(2, 10, dtype=torch.bool)]
    with pytest.raises(PathUnavailableError, match="causal only"):
        run_path("aiter_triton_unified", tree, (-1, -1))
    as_double = paged_batch([2], [10], page_size=16, dtype=torch.float64)
    with pytest.raises(PathUnavailableError, match="supported"):
        run_path("aiter_triton_unified", as_double, (-1, -1))
    with pytest.raises(ValueError, match="kernel"):
        triton_kernels.launch_plan(
            num_tokens=1, num_seqs=1, num_query_heads=1, num_kv_heads=1, head_size=64, block_size=16,
            max_seqlen_q=1, max_seqlen_k=8, sliding_window=0, num_sms=1, kernel="4d",
        )


def test_launch_plan_follows_aiter_wrapper():
    base = dict(num_seqs=2, num_query_heads=8, num_kv_heads=2, head_size=128, block_size=16, num_sms=132)
    decode = triton_kernels.launch_plan(num_tokens=2, max_seqlen_q=1, max_seqlen_k=4096, sliding_window=0, **base)
    assert decode["kernel"] == "3d" and decode["TILE_SIZE"] == 16  # long context, no window: split-KV
    windowed = triton_kernels.launch_plan(num_tokens=2, max_seqlen_q=1, max_seqlen_k=4096, sliding_window=128, **base)
    assert windowed["kernel"] == "2d" and windowed["TILE_SIZE"] == 16 and windowed["num_stages"] == 3
    prefill = triton_kernels.launch_plan(num_tokens=600, max_seqlen_q=300, max_seqlen_k=300, sliding_window=0, **base)
    assert prefill["kernel"] == "2d" and prefill["BLOCK_M"] == 128 and prefill["BLOCK_Q"] == 32
    assert prefill["TILE_SIZE"] == 64 and prefill["num_warps"] == 4
    assert "waves_per_eu" not in prefill
    gqa32 = triton_kernels.launch_plan(
        num_tokens=3, max_seqlen_q=3, max_seqlen_k=40, sliding_window=0,
        **{**base, "num_query_heads": 64, "num_kv_heads": 2},
    )
    assert gqa32["BLOCK_M"] == 32 and gqa32["BLOCK_Q"] == 1


def test_interpreter_status_names_versions():
    ok, reason = triton_kernels.interpreter_status()
    assert ok and "CPU interpreter" in reason and "numpy" in reason


def test_path_declaration():
    path = get_path("aiter_triton_unified")
    assert path.convention == "aiter_unified" and path.honours_window
    assert path.kv_layout == "block_table" and "tree" not in path.modes


def test_interpreter_status_reports_a_broken_interpreter(monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

    monkeypatch.setattr(triton_kernels, "unified_attention", broken)
    ok, reason = triton_kernels.interpreter_status.__wrapped__()
    assert not ok and "0-dimensional" in reason and "numpy" in reason and "GPU" in reason
