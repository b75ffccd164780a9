"""swa_kit.window: round trips through every convention, each API's value for W keys, invalid input, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swa_kit.cli import main
from swa_kit.errors import WindowConventionError
from swa_kit.window import (
    CONVENTIONS,
    Window,
    attends,
    check_keys,
    convert,
    from_keys,
    get_convention,
    naive_reads,
    parse_value,
    to_keys,
)

PAIRS = {"flash_attn", "aiter_ck", "aiter_unified", "flash_attn_4"}
NAMES = ["hf", "sglang", "flash_attn", "aiter_ck", "flashinfer", "aiter_unified", "aiter_v1", "flex", "flash_attn_4",
         "attention_gym"]
keys_st = st.none() | st.integers(1, 1 << 20)


def test_the_ten_conventions_are_known():
    assert list(CONVENTIONS) == NAMES


# ---- round trips ----

@pytest.mark.parametrize("name", NAMES)
@given(keys=keys_st)
def test_keys_native_keys(name, keys):
    assert to_keys(name, from_keys(name, keys)) == keys
    assert Window.from_convention(name, Window(keys).to(name)) == Window(keys)


def native_values(name):
    """Every valid native value of a convention, in its canonical spelling."""
    conv = get_convention(name)
    if name in PAIRS:
        return st.just(conv.off) | st.builds(lambda left: (left, 0), st.integers(0, 1 << 20))
    if name in ("sglang", "flashinfer"):
        return st.integers(-1, 1 << 20)
    if name == "attention_gym":
        return st.none() | st.integers(0, 1 << 20)
    return st.just(conv.off) | st.integers(1, 1 << 20)  # hf / flex (None off), aiter_v1 (0 off)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_native_keys_native(name, data):
    value = data.draw(native_values(name))
    assert from_keys(name, to_keys(name, value)) == value


@pytest.mark.parametrize("name", ["flash_attn", "aiter_ck", "aiter_unified"])
@given(left=st.integers(0, 1 << 20))
def test_right_minus_one_is_causal_and_normalises_to_zero(name, left):
    # SGLang passes (sws, -1) to CK prefill with causal=True: the right bound is the causal one.
    assert to_keys(name, (left, -1)) == left + 1
    assert from_keys(name, to_keys(name, (left, -1))) == (left, 0)


@given(src=st.sampled_from(NAMES), dst=st.sampled_from(NAMES), keys=keys_st)
def test_convert_between_any_two_conventions(src, dst, keys):
    assert convert(from_keys(src, keys), src, dst) == from_keys(dst, keys)


@given(w=st.integers(0, 64), length=st.integers(1, 96))
def test_attention_gym_bound_against_its_mask_rule(w, length):
    """attention-gym's sliding-window mask keeps q - kv <= w (causal): w + 1 keys, both ways through the converter."""
    q, kv = torch.arange(length)[:, None], torch.arange(length)[None, :]
    gym_mask = (q >= kv) & (q - kv <= w)  # the rule as attention-gym writes it, independent of the kit
    keys = to_keys("attention_gym", w)
    assert keys == w + 1 and from_keys("attention_gym", keys) == w
    assert torch.equal(Window(keys).attends(q, kv), gym_mask)


@pytest.mark.parametrize("bad", [-1, 1.5, "8", True])
def test_attention_gym_refuses_what_is_not_a_distance(bad):
    with pytest.raises(WindowConventionError, match="q - kv"):
        to_keys("attention_gym", bad)


def test_sglang_none_is_stored_as_minus_one():
    assert to_keys("sglang", None) is None and from_keys("sglang", None) == -1


def test_lists_work_like_tuples():
    assert to_keys("flash_attn", [1023, 0]) == 1024


def test_numpy_and_torch_ints_are_accepted():
    assert to_keys("sglang", np.int64(1023)) == 1024
    assert Window(np.int32(5)).keys == 5 and type(Window(np.int32(5)).keys) is int


# ---- what each API wants for W keys (the table in swa_kit/window.py, with its sources) ----

@pytest.mark.parametrize("keys", [128, 1024, 4096])  # GPT-OSS, Gemma-3/4, Mistral-style
def test_table_values(keys):
    w = Window(keys)
    assert w.to("hf") == keys
    assert w.to("sglang") == keys - 1
    assert w.to("flash_attn") == (keys - 1, 0)
    assert w.to("aiter_ck") == (keys - 1, 0)
    assert w.to("flashinfer") == keys - 1
    assert w.to("aiter_unified") == (keys - 1, 0)
    assert w.to("aiter_v1") == keys
    assert w.to("flex") == keys
    assert w.to("flash_attn_4") == (keys - 1, 0)


def test_gemma_1024_is_the_same_window_everywhere():
    # sglang 1023 == hf 1024 == flash_attn (1023, 0) == aiter_v1 1024 == flashinfer 1023
    assert to_keys("sglang", 1023) == to_keys("hf", 1024) == to_keys("flash_attn", (1023, 0)) \
        == to_keys("aiter_v1", 1024) == to_keys("flashinfer", 1023) == to_keys("flash_attn_4", (1023, 0)) == 1024


@given(left=st.integers(0, 64))
def test_aiter_unified_kernel_sliding_window_is_one_plus_left(left):
    # The Triton kernel sets SLIDING_WINDOW = 1 + left and keeps q - k < SLIDING_WINDOW.
    sliding_window = 1 + left
    w = Window.from_convention("aiter_unified", (left, 0))
    assert w.keys == sliding_window
    q = torch.arange(3 * sliding_window)[:, None]
    k = torch.arange(3 * sliding_window)[None, :]
    assert torch.equal(w.attends(q, k), (k <= q) & (q - k < sliding_window))


def test_off_sentinels():
    assert {n: from_keys(n, None) for n in NAMES} == {
        "hf": None, "sglang": -1, "flash_attn": (-1, -1), "aiter_ck": (-1, -1), "flashinfer": -1,
        "aiter_unified": (-1, -1), "aiter_v1": 0, "flex": None, "flash_attn_4": (None, None), "attention_gym": None,
    }


# ---- Window.attends / first_key against a loop ----

@given(keys=keys_st, q=st.integers(0, 300), k=st.integers(0, 300))
def test_attends_is_the_keys_most_recent_positions(keys, q, k):
    recent = range(q + 1) if keys is None else range(max(0, q - keys + 1), q + 1)
    assert bool(Window(keys).attends(q, k)) == (k in recent)
    assert Window(keys).first_key(q) == recent[0]


def test_attends_broadcasts_on_numpy_and_torch():
    w = Window(3)
    grid = w.attends(np.arange(5)[:, None], np.arange(5)[None, :])
    assert grid.sum(axis=1).tolist() == [1, 2, 3, 3, 3]
    assert torch.equal(w.attends(torch.arange(5)[:, None], torch.arange(5)[None, :]), torch.from_numpy(grid))


def test_the_window_rule_takes_its_window_from_a_tensor_and_checks_a_number():
    q, k = torch.arange(9)[:, None], torch.arange(9)[None, :]
    assert torch.equal(attends(q, k, torch.tensor(4)), Window(4).attends(q, k))
    assert torch.equal(attends(q, k, None), Window(None).attends(q, k))
    for bad in (0, -3, True, 4.0):
        with pytest.raises(WindowConventionError, match=f"invalid window value {bad!r}"):
            attends(q, k, bad)


# ---- invalid values: WindowConventionError naming the value and the convention ----

BAD = [
    ("keys", 0), ("keys", -1), ("keys", True), ("keys", 1.0), ("keys", "8"),
    ("hf", 0), ("hf", -5), ("hf", False), ("hf", 1024.0), ("hf", "1024"),
    ("sglang", -2), ("sglang", True), ("sglang", 1023.0),
    ("flashinfer", -2), ("flashinfer", None), ("flashinfer", 2.5),
    ("aiter_v1", -1), ("aiter_v1", None), ("aiter_v1", 0.0), ("aiter_v1", True),
    ("flex", 0), ("flex", -1), ("flex", 3.0),
    ("flash_attn", (-2, 0)), ("flash_attn", (1023, 1)), ("flash_attn", (1023, None)), ("flash_attn", 1023),
    ("flash_attn", (1023.0, 0)), ("flash_attn", (-1.0, 0)), ("flash_attn", (True, 0)), ("flash_attn", (5, 0.0)),
    ("flash_attn", (5, False)), ("flash_attn", (1, 2, 3)),
    ("aiter_ck", (3, 1)), ("aiter_unified", (-3, 0)), ("aiter_unified", (4, -2)),
    ("flash_attn_4", (5, -1)), ("flash_attn_4", None), ("flash_attn_4", (-1.0, 0)),
]


@pytest.mark.parametrize("name, value", BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_invalid_values_raise_naming_value_and_convention(name, value):
    with pytest.raises(WindowConventionError) as info:
        check_keys(value) if name == "keys" else to_keys(name, value)
    message = str(info.value)
    assert message.startswith(f"{name}: ") and repr(value) in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("keys", [0, -1, True, 2.0])
def test_from_keys_rejects_bad_keys(name, keys):
    with pytest.raises(WindowConventionError, match=repr(keys).replace(".", r"\.")):
        from_keys(name, keys)


def test_fa4_reads_minus_one_as_no_window():
    # SGLang 0.5.23's FlashAttention 4 (_resolve_causal_local_window): causal, left + right < 0 is no window.
    assert to_keys("flash_attn_4", (-1, -1)) is None and to_keys("flash_attn_4", (-1, 0)) is None
    assert to_keys("flash_attn_4", (None, None)) is None and to_keys("flash_attn_4", (0, 0)) == 1


@pytest.mark.parametrize("name", ["HF", "sglang ", "fa2", None, ["hf"]])
def test_unknown_convention(name):
    with pytest.raises(WindowConventionError, match="unknown window convention") as info:
        to_keys(name, 5)
    assert repr(name) in str(info.value) and "flash_attn_4" in str(info.value)


# ---- swa-kit window ----

def test_cli_json_has_every_convention(capsys):
    assert main(["window", "--from", "sglang", "1023", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "keys": 1024, "hf": 1024, "sglang": 1023, "flash_attn": [1023, 0], "aiter_ck": [1023, 0],
        "flashinfer": 1023, "aiter_unified": [1023, 0], "aiter_v1": 1024, "flex": 1024, "flash_attn_4": [1023, 0],
        "attention_gym": 1023,
    }


@pytest.mark.parametrize("src, text", [("hf", "128"), ("flash_attn", "127,0"), ("flash_attn_4", "(127, 0)"),
                                      ("aiter_v1", "128"), ("flashinfer", "127")])
def test_cli_reads_every_spelling(capsys, src, text):
    assert main(["window", "--from", src, text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["keys"] == 128


def test_cli_off(capsys):
    assert main(["window", "--from", "sglang", "-1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keys"] is None and out["flash_attn_4"] == [None, None] and out["aiter_v1"] == 0


def test_cli_table(capsys):
    assert main(["window", "--from", "hf", "1024"]) == 0
    out = capsys.readouterr().out
    assert "1024 keys" in out and "aiter_unified" in out and "[1023, 0]" in out


@pytest.mark.parametrize("argv, needle", [
    (["window", "--from", "hf", "0"], "hf: invalid window value 0"),
    (["window", "--from", "hf", "1.5"], "1.5"),
    (["window", "--from", "flash_attn", "1023,1"], "right = 1"),
    (["window", "--from", "flash_attn_4", "(5, -1)"], "flash_attn_4"),
    (["window", "--from", "hf", "banana"], "'banana'"),
])
def test_cli_bad_value_exits_2_with_one_line(capsys, argv, needle):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and needle in captured.err and captured.err.count("\n") == 1


def test_cli_unknown_convention_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["window", "--from", "fa2", "5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "fa2" in err and err.count("\n") == 1


# --- parse_value: a window as typed on a command line ------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("4095", 4095), (" -1 ", -1), ("none", None), ("None", None), ("NULL", None), ("4095,0", (4095, 0)),
    ("(4095, 0)", (4095, 0)), ("[4095, 0]", (4095, 0)), ("-1,-1", (-1, -1)), ("(None, None)", (None, None)),
    ("null, 0", (None, 0)), ("1.5", 1.5),
])
def test_parse_value_reads_every_spelling(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


@pytest.mark.parametrize("text", ["banana", "", "(1, ", "import os", "4095 0"])
def test_parse_value_rejects_what_is_no_value(text):
    with pytest.raises(WindowConventionError, match="cannot read window value") as error:
        parse_value(text)
    assert repr(text) in str(error.value) and isinstance(error.value, ValueError)


# --- naive_reads: the number you hold, handed to every API unconverted ------------------------------------------

def test_naive_reads_from_hf_attend_one_more_where_w_minus_one_is_meant():
    reads = {r.convention: r for r in naive_reads(1024, "hf")}
    assert set(reads) == set(CONVENTIONS)
    for name in ("sglang", "flash_attn", "aiter_ck", "flashinfer", "aiter_unified", "flash_attn_4"):
        assert reads[name].keys == 1025 and reads[name].delta == 1
    for name in ("hf", "aiter_v1", "flex"):
        assert reads[name].keys == 1024 and reads[name].delta == 0
    assert reads["sglang"].wanted == 1023 and reads["flash_attn"].passed == (1024, 0)


def test_naive_reads_from_sglang_one_less_and_v1_zero_is_off():
    reads = {r.convention: r for r in naive_reads(128, "sglang")}
    assert reads["aiter_v1"].delta == -1 and reads["hf"].keys == 127 and reads["sglang"].delta == 0
    ones = {r.convention: r for r in naive_reads(1, "sglang")}
    assert ones["aiter_v1"].keys is None and ones["aiter_v1"].error is None  # 0 means "off" there
    assert ones["hf"].error and "0" in ones["hf"].error and ones["hf"].delta is None


def test_naive_reads_need_a_window():
    with pytest.raises(WindowConventionError):
        naive_reads(None)  # type: ignore[arg-type]
    with pytest.raises(WindowConventionError):
        naive_reads(0)
