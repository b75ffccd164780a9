"""The kit's kernel run in Triton's CPU interpreter through a child process, against the float64 reference."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.kit.interpreted import run_in_interpreter
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError

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
    with pytest.raises(PathUnavailableError, match="dtype"):
        run_in_interpreter(batch, 4)


def test_bfloat16_is_refused_where_the_interpreter_runs_the_kernel():
    from swa_kit.attention.aiter import triton_kernels
    from swa_kit.attention.kit import kernel as kit_triton

    batch = random_paged_batch([1, 2], [9, 30], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=16,
                               dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(PathUnavailableError, match=r"bfloat16 in Triton's CPU interpreter.*float16 on the CPU"):
        kit_triton.plan_batch(batch, 4)
    k, v = batch.paged_kv()
    with pytest.raises(PathUnavailableError, match=r"bfloat16 in Triton's CPU interpreter.*triton#11584"):
        triton_kernels.unified_attention(batch.q, k, v, torch.empty_like(batch.q), batch.qo_indptr.int(), 2,
                                       batch.seq_lens.int(), 30, batch.sm_scale, (3, 0), batch.block_table().int())


_DOT_IN_THE_INTERPRETER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def square(x_ptr, out_ptr, N: tl.constexpr):
    rows, cols = tl.arange(0, N)[:, None], tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)
    tl.store(out_ptr + rows * N + cols, tl.dot(x, x))


for dtype in (torch.float16, torch.bfloat16):
    x = torch.randint(-2, 3, (16, 16)).to(dtype)  # small integers: every product and sum exact in both dtypes
    out = torch.empty(16, 16)
    square[(1,)](x, out, N=16)
    print(dtype, float((out - x.float() @ x.float()).abs().max()))
'''


def test_the_bfloat16_refusal_is_needed(tmp_path):
    """Triton's interpreter, in a child started with TRITON_INTERPRET=1: a 16x16 tl.dot of small integers is exact in
    float16 and wrong in bfloat16. When a Triton fixes it this test fails, and refuse_bfloat16 can go."""
    script = tmp_path / "dot.py"
    script.write_text(_DOT_IN_THE_INTERPRETER)
    child = subprocess.run([sys.executable, str(script)], env={**os.environ, "TRITON_INTERPRET": "1"},
                           capture_output=True, text=True, timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    errors = dict(line.rsplit(" ", 1) for line in child.stdout.splitlines())
    assert float(errors["torch.float16"]) == 0.0
    assert float(errors["torch.bfloat16"]) > 1e3, "Triton's interpreter multiplies bfloat16 right: drop the refusal"
