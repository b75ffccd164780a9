"""The kit's Triton decode kernel on a GPU against the float64 reference (skipped without one).

Sweeps windows, page sizes 1 and 16, GQA ratios, head dims 64/128/256, bf16 and fp16,
with forced split counts so the merge kernel is exercised at every shape. Every slot no
query attends holds NaN; the output is poisoned with NaN before each run.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from swa_kit.attention.reference import reference_attention
from swa_kit.bench import poison_unattended, random_decode_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]

SEQS = [1, 100, 1500, 4100, 777]
GRID = list(itertools.product(
    (1, 16),  # page size
    ((8, 8), (32, 8), (32, 16), (16, 1)),  # (Hq, Hkv): GQA 1, 4, 2, 16
    (64, 128, 256),  # head dim
    (torch.bfloat16, torch.float16),
))


@pytest.mark.parametrize("page_size,heads,head_dim,dtype", GRID,
                         ids=[f"p{p}-{h[0]}x{h[1]}-d{d}-{str(t).split('.')[-1]}" for p, h, d, t in GRID])
def test_kernel_matches_reference(page_size: int, heads: tuple[int, int], head_dim: int, dtype: torch.dtype) -> None:
    from swa_kit.attention import kit_triton

    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    hq, hkv = heads
    for keys, splits in ((1, None), (128, None), (1000, 3), (4096, None), (None, 2), (5000, 1)):
        batch = random_decode_batch(SEQS, hq, hkv, head_dim, page_size, dtype, "cuda", gen)
        poison_unattended(batch, keys)
        plan = kit_triton.plan_batch(batch, keys, splits=splits)
        out = torch.full_like(batch.q, float("nan"))
        plan.run(batch.q, out)
        ref = reference_attention(batch, keys).out
        assert not torch.isnan(out).any(), f"keys={keys}: unwritten output or a poisoned slot leaked"
        error = float((out.double() - ref).norm() / ref.norm())
        assert error < 1e-2, f"keys={keys} splits={plan.splits}: relative error {error:.2e}"


def test_backend_runs_through_the_registry() -> None:
    from swa_kit.attention.backends import run_path

    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    batch = random_decode_batch([300, 2000], 32, 8, 128, 16, torch.bfloat16, "cuda", gen)
    result = run_path("kit_triton_swa", batch, 512)
    assert result.tier == "kit-triton" and result.path == "kit_triton_swa"
    ref = reference_attention(batch, 512).out
    assert float((result.out.double() - ref).norm() / ref.norm()) < 1e-2
