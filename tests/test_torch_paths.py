"""torch SDPA and FlexAttention paths: declarations, agreement with the reference, garbage, bad inputs."""

from __future__ import annotations

import math
import os

import pytest
import torch

from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError, WindowConventionError
from swa_kit.window import from_keys


@pytest.mark.parametrize("name,convention", [("torch_sdpa", "hf"), ("flex_attention", "flex")])
def test_declarations(name, convention):
    path = get_path(name)
    assert path.tier == "torch" and path.honours_window and path.convention == convention
    assert {"prefill", "extend", "decode", "verify", "tree"} <= path.modes
    assert path.available()[0]


@pytest.mark.parametrize("name", ["torch_sdpa", "flex_attention"])
@pytest.mark.parametrize("keys", [None, 1, 3, 100])
def test_matches_reference_with_nan_in_freed_slots(name, keys):
    gen = torch.Generator().manual_seed(hash((name, keys)) % 2**31)
    batch = random_paged_batch([4, 1, 6], [9, 21, 6], num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=1,
                               window_keys=keys, garbage=math.nan, generator=gen)
    path = get_path(name)
    result = run_path(name, batch, from_keys(path.convention, keys))
    assert result.tier == "torch" and result.path == name and result.device == "cpu"
    assert torch.isfinite(result.out).all()
    torch.testing.assert_close(result.out.double(), reference_attention(batch, keys).out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["torch_sdpa", "flex_attention"])
def test_tree_mask(name):
    q_len, prefix = 4, 6
    tree = torch.ones(q_len, prefix + q_len, dtype=torch.bool)
    tree[:, prefix:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    batch = random_paged_batch([q_len], [prefix + q_len], head_dim=16, window_keys=5, garbage=math.nan,
                               tree_masks=[tree])
    out = run_path(name, batch, 5).out
    torch.testing.assert_close(out.double(), reference_attention(batch, 5).out, rtol=1e-5, atol=1e-5)


def test_flex_refuses_odd_head_dim():
    batch = random_paged_batch([1], [4], head_dim=24)
    with pytest.raises(PathUnavailableError, match="power of two"):
        run_path("flex_attention", batch, None)


@pytest.mark.parametrize("name", ["torch_sdpa", "flex_attention"])
def test_bad_window_argument(name):
    batch = random_paged_batch([1], [4], head_dim=16)
    with pytest.raises(WindowConventionError):
        run_path(name, batch, 0)


@pytest.fixture
def compiled_flex(monkeypatch):
    """torch_paths with FlexAttention compiled (forced here on CPU, as on a GPU), dynamo fresh and its recompile limit
    1: a second compile of the path is past the limit."""
    from swa_kit.attention import torch_paths

    monkeypatch.setattr(torch_paths, "_compiles_on", lambda device: True)
    monkeypatch.setattr(torch_paths, "_COMPILED", {})
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(recompile_limit=1):
            yield torch_paths
    finally:
        torch._dynamo.reset()


def _flex_runs_as(how: str, batch, keys) -> None:
    result = run_path("flex_attention", batch, from_keys("flex", keys))
    assert result.notes[:-1] == [how], (batch.seq_lens.tolist(), keys)
    torch.testing.assert_close(result.out.double(), reference_attention(batch, keys).out, rtol=1e-5, atol=1e-5)


def test_compiled_flex_names_its_eager_run_past_the_recompile_limit(compiled_flex):
    """Requests whose key spans fall in one bucket of FLEX_KEY_BUCKET keys share one compile, at any offsets: the
    offsets enter the mask as tensors, the spans are padded. A span in the next bucket is a new shape: past the limit
    torch would fall back to eager with only a warning in the log; the path makes the limit raise, runs eagerly and
    says so."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    bucket = compiled_flex.FLEX_KEY_BUCKET
    # No window, so each request's span is all of it: lengths 12-90 fill one bucket, bucket + 50 the next
    for seq_lens, how in (([30, 90], compiled_flex.COMPILED), ([12], compiled_flex.COMPILED),
                          ([bucket + 50], compiled_flex.EAGER_PAST_LIMIT)):
        batch = random_paged_batch([1] * len(seq_lens), seq_lens, num_q_heads=4, num_kv_heads=2, head_dim=16,
                                   page_size=1, garbage=math.nan, generator=gen)
        _flex_runs_as(how, batch, None)


def test_compiled_flex_shares_one_compile_across_windows(compiled_flex):
    """Requests in one bucket of keys share one compile at every window, no window included, because the window
    enters the mask as a tensor. As an int it was a constant of the compile, and the second window ran eagerly."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    for keys in (3, 40, None, 1):
        batch = random_paged_batch([1, 1], [60, 90], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=1,
                                   window_keys=keys, garbage=math.nan, generator=gen)
        _flex_runs_as(compiled_flex.COMPILED, batch, keys)


class _LimitHit(Exception):
    """Stands in for dynamo's recompile-limit exception, under whichever name a torch gives it."""


@pytest.mark.parametrize("setting,error,found", [
    ("fail_on_recompile_limit_hit", "FailOnRecompileLimitHit", True),  # both renamed
    ("fail_on_cache_limit_hit", "FailOnRecompileLimitHit", True),  # the exception renamed first
    ("fail_on_cache_limit_hit", "FailOnCacheLimitHit", True),  # neither
    ("fail_on_cache_limit_hit", None, False),  # a setting without its exception: nothing to catch
    (None, "FailOnCacheLimitHit", False),
])
def test_recompile_limit_switch_takes_the_spelling_this_torch_has(setting, error, found):
    from types import SimpleNamespace

    from swa_kit.attention.torch_paths import _recompile_limit_switch

    config = SimpleNamespace(**({setting: False} if setting else {}))
    exc = SimpleNamespace(**({error: _LimitHit} if error else {}))
    assert _recompile_limit_switch(config, exc) == ((setting, _LimitHit) if found else None)


def test_recompile_limit_switch_of_the_installed_torch_is_dynamos_own():
    from swa_kit.attention.torch_paths import _recompile_limit_switch

    setting, error = _recompile_limit_switch()
    assert getattr(torch._dynamo.config, setting) is False  # dynamo's default: fall back to eager
    assert issubclass(error, Exception) and error.__module__ == "torch._dynamo.exc"


def test_compiled_flex_without_the_switch_says_it_cannot_tell(monkeypatch):
    """A torch that cannot make the recompile limit raise: the result says it may have run eagerly."""
    from swa_kit.attention import torch_paths

    monkeypatch.setattr(torch_paths, "_compiles_on", lambda device: True)
    monkeypatch.setattr(torch_paths, "_COMPILED", {"flex": torch_paths._flex_module().flex_attention})
    monkeypatch.setattr(torch_paths, "_recompile_limit_switch", lambda: None)
    batch = random_paged_batch([1, 1], [30, 50], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=1,
                               window_keys=20, garbage=math.nan)
    result = run_path("flex_attention", batch, from_keys("flex", 20))
    assert result.notes[0] == torch_paths.COMPILED_UNCHECKED and torch.__version__ in result.notes[0]
    torch.testing.assert_close(result.out.double(), reference_attention(batch, 20).out, rtol=1e-5, atol=1e-5)


def test_flex_compiles_script_reports_how_each_request_ran(capsys):
    """benchmarks/flex_compiles.py on the CPU, where the path runs eagerly: both buckets, every request accounted
    for, the outputs checked against the reference, and the module's bucket put back."""
    from benchmark_scripts import load_script

    from swa_kit.attention import torch_paths

    padded = torch_paths.FLEX_KEY_BUCKET
    load_script("flex_compiles").main(["--device", "cpu", "--requests", "3", "--heads", "4", "2", "16",
                                       "--keys", "20", "200", "--window", "64"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 requests on cpu")
    assert [line.split(":")[0] for line in lines[1:]] == ["bucket 1", f"bucket {torch_paths.FLEX_KEY_BUCKET}"]
    assert all(line.endswith(f"per request: 3 {torch_paths.EAGER_ON_CPU}") for line in lines[1:])
    assert all(float(line.split("max error ")[1].split(";")[0]) < 1e-5 for line in lines[1:])
    assert torch_paths.FLEX_KEY_BUCKET == padded


@pytest.mark.parametrize("argv,message", [(["--requests", "0"], "--requests 0: give at least 1"),
                                          (["--keys", "50", "50"], "--keys 50 50: lengths are drawn from [MIN, MAX)"),
                                          (["--keys", "0", "9"], "so 1 <= MIN < MAX"),
                                          (["--window", "0"], "--window 0: keys: invalid window value 0")])
def test_flex_compiles_script_refuses_bad_arguments_by_name(capsys, argv, message):
    from benchmark_scripts import load_script

    with pytest.raises(SystemExit):
        load_script("flex_compiles").main(["--device", "cpu", *argv])
    assert message in capsys.readouterr().err
