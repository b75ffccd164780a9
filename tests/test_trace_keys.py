"""Keys a traced kernel call attends, read from its window argument as the kernel's own mask counts them."""

from __future__ import annotations

import pytest

from swa_kit.launch.inputs import Launch
from swa_kit.measure.audit import audit
from swa_kit.measure.bugs import finding_classes
from swa_kit.measure.trace import TraceRecord, traced_keys

SHUFFLED = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}


def _gluon_mask_keys(context_length: int, sliding_window: int) -> int:
    """aiter pa_decode_gluon.py paged_attention_decode_sliding_window, brute force: key k is kept when
    context_length - sliding_window + 1 <= k < context_length (SGLang passes seq_lens, which count the query)."""
    return sum(context_length - sliding_window + 1 <= k < context_length for k in range(context_length))


@pytest.mark.parametrize("window", [2, 7, 128, 1023])
def test_gluon_int_window_is_read_through_its_mask(window):
    assert traced_keys("pa_decode_gluon", window) == _gluon_mask_keys(4096, window) == window - 1
    assert traced_keys("pa_decode_gluon", 0) is None  # full layers: sliding_window 0, no mask


def test_other_window_forms():
    assert traced_keys("unified_attention", [1022, 0]) == 1023 and traced_keys("unified_attention", [-1, -1]) is None
    assert traced_keys("extend_attention_fwd", 127) == 128  # q <= k + 127
    assert traced_keys("paged_attention_ragged", None) is None  # no window parameter: the whole context
    for kernel, arg in (("unified_attention", 5), ("pa_decode_gluon", [True, 0]), ("pa_decode_gluon", True),
                        ("pa_decode_gluon", "127"), ("mha_batch_prefill_func", {"left": 3})):
        assert traced_keys(kernel, arg) == "unread", (kernel, arg)


def _gluon_record(window: int) -> TraceRecord:
    return TraceRecord(layer=0, sliding_window_size=127, kernel="pa_decode_gluon", window_arg=window,
                       page_table_shape=[1, 64], page_table="swa", mode="decode", method="forward_decode", pid=1)


def test_a_traced_gluon_window_is_ranked_by_the_keys_it_attends():
    launch = Launch.from_inputs(model="gpt-oss-20b", env=SHUFFLED)
    assert [f.severity for f in audit(launch, [_gluon_record(127)]).findings if f.where.startswith("trace")] == \
        ["info"]  # as planned: sliding_window = sws
    # sws + 1 (= W): the kernel keeps W - 1 = 127 of 128 keys, one short; not an unreadable window
    off = [f for f in audit(launch, [_gluon_record(128)]).findings if f.where.startswith("trace")]
    assert [(f.severity, f.title) for f in off] == [("one-short", "the server attends 127 of 128 keys where the plan "
                                                                  "differs (one key short)")]
    assert finding_classes(off[0]) == frozenset({"one-key-short"})  # the corpus's class, as the route finding's


def test_the_shuffled_decode_is_two_keys_short_not_one():
    """SGLang passes sliding_window = sws = W - 1 (aiter_utils.py); the mask keeps W - 2: a finding of wrong keys."""
    from swa_kit.measure.audit import _route_rows
    report = audit(Launch.from_inputs(model="gpt-oss-20b", env=SHUFFLED))
    gap = [f for f in report.findings if "126 of 128" in f.title]
    assert [(f.severity, f.title) for f in gap] == [("wrong", "sliding layers attend 126 of 128 keys (2 keys short)")]
    assert finding_classes(gap[0]) == frozenset()  # neither one-key-short nor a window dropped
    decode = [r for r in _route_rows(report) if (r["mode"], r["kind"]) == ("decode", "sliding")]
    assert [r["kit"] for r in decode] == ["2 KEYS SHORT"]
