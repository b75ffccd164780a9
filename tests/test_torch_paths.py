"""torch SDPA and FlexAttention paths: declarations, agreement with the reference, garbage, bad inputs."""

from __future__ import annotations

import math

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
