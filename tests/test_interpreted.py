"""The kit's kernel run in Triton's CPU interpreter through a child process, against the float64 reference."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.interpreted import run_in_interpreter
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import BackendUnavailableError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


def test_child_runs_the_kernel_and_matches_the_reference():
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    keys = int(torch.randint(3, 12, (1,), generator=gen))
    batch = random_paged_batch([1, 1, 1], [40, keys - 1, 25], num_q_heads=4, num_kv_heads=2, head_dim=16,
                               page_size=4, spare_pages=0, dtype=torch.float16, generator=gen)
    poison_unattended(batch, keys)  # NaN in every slot outside the window: one stray read shows
    result = run_in_interpreter(batch, keys)
    ref = reference_attention(batch, keys).out
    assert (result.path, result.tier, result.device) == ("kit_triton_swa", "kit-triton-interpreter", "cpu")
    assert not torch.isnan(result.out).any()
    assert float((result.out.double() - ref).norm() / ref.norm()) < 2e-3


def test_refuses_a_batch_it_cannot_run():
    batch = random_paged_batch([1], [9], num_q_heads=2, num_kv_heads=1, head_dim=16, dtype=torch.float32,
                               generator=torch.Generator().manual_seed(0))
    with pytest.raises(BackendUnavailableError, match="dtype"):
        run_in_interpreter(batch, 4)
