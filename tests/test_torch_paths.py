"""torch SDPA and FlexAttention paths: declarations, agreement with the reference, garbage, bad inputs."""

from __future__ import annotations

import math
import os

import pytest
import torch

from swa_kit.attention.backends import get_backend, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import BackendUnavailableError, WindowConventionError
from swa_kit.window import from_keys


@pytest.mark.parametrize("name,convention", [("torch_sdpa", "hf"), ("flex_attention", "flex")])
def test_declarations(name, convention):
    backend = get_backend(name)
    assert backend.tier == "torch" and backend.honours_window and backend.convention == convention
    assert {"prefill", "extend", "decode", "verify", "tree"} <= backend.modes
    assert backend.available()[0]


@pytest.mark.parametrize("name", ["torch_sdpa", "flex_attention"])
@pytest.mark.parametrize("keys", [None, 1, 3, 100])
def test_matches_reference_with_nan_in_freed_slots(name, keys):
    gen = torch.Generator().manual_seed(hash((name, keys)) % 2**31)
    batch = random_paged_batch([4, 1, 6], [9, 21, 6], num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=1,
                               window_keys=keys, garbage=math.nan, generator=gen)
    backend = get_backend(name)
    result = run_path(name, batch, from_keys(backend.convention, keys))
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
    with pytest.raises(BackendUnavailableError, match="power of two"):
        run_path("flex_attention", batch, None)


@pytest.mark.parametrize("name", ["torch_sdpa", "flex_attention"])
def test_bad_window_argument(name):
    batch = random_paged_batch([1], [4], head_dim=16)
    with pytest.raises(WindowConventionError):
        run_path(name, batch, 0)


def test_compiled_flex_names_its_eager_run_past_the_recompile_limit(monkeypatch):
    """Compiled FlexAttention (forced here on CPU, as on a GPU) under a recompile limit of 1. Two requests of one span
    shape at different offsets share one compile: the offsets enter the mask as tensors. A shorter span is a new
    shape: past the limit torch would fall back to eager with only a warning in the log; the path makes the limit
    raise, runs eagerly and says so."""
    from swa_kit.attention import torch_paths

    monkeypatch.setattr(torch_paths, "_compiles_on", lambda device: True)
    monkeypatch.setattr(torch_paths, "_COMPILED", {})
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(recompile_limit=1):
            for seq_lens, how in (([30, 90], torch_paths.COMPILED), ([12], torch_paths.EAGER_PAST_LIMIT)):
                batch = random_paged_batch([1] * len(seq_lens), seq_lens, num_q_heads=4, num_kv_heads=2, head_dim=16,
                                           page_size=1, window_keys=20, garbage=math.nan, generator=gen)
                result = run_path("flex_attention", batch, from_keys("flex", 20))
                assert result.notes[:-1] == [how], seq_lens
                torch.testing.assert_close(result.out.double(), reference_attention(batch, 20).out, rtol=1e-5,
                                           atol=1e-5)
    finally:
        torch._dynamo.reset()
