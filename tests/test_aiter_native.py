"""Native aiter call sites: SGLang's arguments built for a batch, and checked against the wheel's source.

The contract test reads the installed amd-aiter source with ``ast`` (aiter is never imported)
and fails if the kit passes an argument the called function does not have.
"""

from __future__ import annotations

import pytest
import torch

from swa_kit.attention.aiter import native
from swa_kit.attention.aiter.loader import aiter_package_dir, native_status
from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.errors import PathUnavailableError, WindowConventionError


def batch_of(q_lens, seq_lens, *, hq=8, hkv=2, d=64, page_size=1, dtype=torch.bfloat16):
    """A random batch in shuffled pages after the dummy page 0, with no spare page (the buffer sizes below)."""
    return random_paged_batch(q_lens, seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page_size,
                              spare_pages=0, dtype=dtype, generator=torch.Generator().manual_seed(torch.seed()))


def test_unified_args_layout():
    batch = batch_of([3, 1], [40, 17], page_size=16)
    a = native.unified_attention_args(batch, (4, 0))
    assert a["k"].shape == (6, 16, 2, 64) and a["v"].shape == (6, 16, 2, 64)
    assert a["k"].data_ptr() == batch.k_buffer.data_ptr()  # a view of the pool, no copy
    pages = [(batch.request_slots(b)[::16] // 16).tolist() for b in range(2)]  # each request's pages, in order
    assert sorted(pages[0] + pages[1]) == [1, 2, 3, 4, 5]
    assert a["block_table"].dtype == torch.int32 and a["block_table"].tolist() == [pages[0], pages[1] + [0]]
    assert a["cu_seqlens_q"].tolist() == [0, 3, 4] and a["cu_seqlens_q"].dtype == torch.int32
    assert a["seqused_k"].tolist() == [40, 17] and a["seqused_k"].dtype == torch.int32
    assert a["max_seqlen_q"] == 3 and a["max_seqlen_k"] == 3 * 16  # page_table.shape[1] * page_size
    assert a["out"].shape == batch.q.shape and a["out"].dtype == torch.bfloat16
    assert a["causal"] is True and a["window_size"] == (4, 0) and a["softcap"] == 0.0
    assert a["q_descale"] is None and a["sinks"] is None


def test_mha_batch_prefill_args_layout():
    batch = batch_of([5, 2], [5, 9])
    args, kwargs = native.mha_batch_prefill_args(batch, (3, -1))
    q, k, v, qo, kv_indptr, indices, max_q, max_k = args
    assert q.shape == (7, 8, 64) and k.shape == (15, 2, 64) and v.shape == (15, 2, 64)
    assert [t.dtype for t in (qo, kv_indptr, indices)] == [torch.int32] * 3
    assert qo.tolist() == [0, 5, 7] and kv_indptr.tolist() == [0, 5, 14]
    assert indices.tolist() == batch.kv_indices.tolist() and sorted(indices.tolist()) == list(range(1, 15))
    assert (max_q, max_k) == (5, 9)
    assert kwargs == dict(
        causal=True, logits_soft_cap=0.0, alibi_slopes=None, return_lse=False, return_attn_probs=False,
        window_size=(3, -1),
    )


def test_paged_ragged_args_layout():
    batch = batch_of([1, 1, 1], [300, 5, 600])
    args = native.paged_attention_ragged_args(batch)
    assert len(args) == 19
    out, workspace, q, k, v, scale, indptr, indices, last, block, parts = args[:11]
    assert out.shape == (3, 8, 64) and out.dtype == torch.bfloat16
    assert k.shape == (906, 1, 2, 64) and v.shape == (906, 1, 2, 64) and q.shape == (3, 8, 64)
    assert scale == pytest.approx(1 / 8) and block == 1 and parts == 3  # ceil(600 / 256)
    assert last.tolist() == [1, 1, 1] and last.dtype == torch.int32 and indptr.tolist() == [0, 300, 305, 905]
    assert workspace.dtype == torch.uint8 and workspace.numel() == 3 * 8 * 3 * 64 * 4 + 2 * 3 * 8 * 3 * 4
    assert args[11:15] == (None, "auto", "NHD", 0.0) and args[17:] == (None, 256)
    assert args[15].tolist() == [1.0] and args[16].tolist() == [1.0]
    assert native.paged_attention_ragged_args(batch, scale=0.5)[5] == 0.5


def test_builders_refuse_what_sglang_never_passes():
    with pytest.raises(PathUnavailableError, match="page size 1"):
        native.mha_batch_prefill_args(batch_of([2], [20], page_size=16), (-1, -1))
    with pytest.raises(PathUnavailableError, match="block_size 1"):
        native.paged_attention_ragged_args(batch_of([1], [20], page_size=16))
    with pytest.raises(PathUnavailableError, match="one query"):
        native.paged_attention_ragged_args(batch_of([2], [20]))
    with pytest.raises(WindowConventionError):
        native.unified_attention_args(batch_of([1], [4]), (3, 5))
    with pytest.raises(WindowConventionError):
        native.mha_batch_prefill_args(batch_of([1], [4]), 3)


def test_unavailable_here_with_a_reason():
    ok, reason = native_status()
    if torch.version.hip is None:
        assert not ok and reason.startswith("needs ROCm")
    for name in ("aiter_native_unified", "aiter_native_mha_batch_prefill", "aiter_native_paged_ragged"):
        path = get_path(name)
        assert path.tier == "aiter-native" and path.devices == frozenset({"rocm"})
        if not ok:
            with pytest.raises(PathUnavailableError, match="cannot run here"):
                run_path(name, batch_of([1], [4]), None if name.endswith("ragged") else (-1, -1))
    assert not get_path("aiter_native_paged_ragged").honours_window


# ---- the contract: every argument the kit passes exists in the installed wheel's function ----

needs_wheel = pytest.mark.skipif(aiter_package_dir() is None, reason="amd-aiter is not installed")


def calls():
    """(op, positional count, keywords) for each call the kit makes, built from real batches."""
    unified = native.unified_attention_args(batch_of([2], [30], page_size=16), (7, 0))
    args, kwargs = native.mha_batch_prefill_args(batch_of([3], [9]), (4, -1))
    ragged = native.paged_attention_ragged_args(batch_of([1], [9]))
    return [
        ("unified_attention", 0, list(unified)),
        ("mha_batch_prefill_func", len(args), list(kwargs)),
        ("paged_attention_ragged", len(ragged), []),
    ]


@needs_wheel
@pytest.mark.parametrize("op,n_positional,keywords", calls(), ids=lambda x: x if isinstance(x, str) else "")
def test_contract_with_installed_wheel(op, n_positional, keywords):
    problems = native.signature_problems(native.op_source(op), op, n_positional, keywords)
    assert problems == []


@needs_wheel
def test_sglang_only_kwargs_really_are_absent_from_the_pinned_wheel():
    """SGLang 0.5.23 passes these to mha_batch_prefill_func; the pinned wheel's function rejects them."""
    for op, extra in native.SGLANG_ONLY_KWARGS.items():
        problems = native.signature_problems(native.op_source(op), op, 8, list(extra))
        assert len(problems) == len(extra) and all("no parameter" in p for p in problems)


FAKE = '''
def paged_attention_ragged(out, workspace, query, *, scale=1.0):
    pass

def unified_attention(q, k, v, /, out, window_size=(-1, -1), **extra):
    pass

def strict(a, b, c=0, *, d, e=1):
    pass
'''


def test_contract_check_catches_a_wrong_call():
    check = native.signature_problems
    assert check(FAKE, "paged_attention_ragged", 3, ["scale"]) == []
    assert "4 positional arguments passed, it takes 3" in check(FAKE, "paged_attention_ragged", 4, [])[0]
    assert "no parameter 'window_size'" in check(FAKE, "paged_attention_ragged", 3, ["window_size"])[0]
    assert check(FAKE, "unified_attention", 3, ["out", "anything"]) == []  # **extra takes any keyword
    assert check(FAKE, "strict", 1, ["a", "b", "d"])[0].endswith("'a' passed both positionally and as a keyword")
    assert check(FAKE, "strict", 2, []) == ["strict: required parameter 'd' not passed"]
    assert check(FAKE, "missing", 0, []) == ["missing: not defined in this source"]


@needs_wheel
def test_contract_fails_against_a_wheel_without_the_argument():
    """The real sources, with one parameter renamed, must fail the same check."""
    source = native.op_source("unified_attention").replace("    window_size,\n", "    window,\n", 1)
    assert "window_size" not in source.split("def unified_attention(")[1].split(")")[0]
    problems = native.signature_problems(source, "unified_attention", 0, calls()[0][2])
    assert any("no parameter 'window_size'" in p for p in problems)
