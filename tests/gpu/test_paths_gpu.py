"""Every path that runs on this GPU against the reference (run with ``python -m pytest tests/gpu -q``).

The paths and windows of ``tests/test_paths_vs_reference.py``, longer sequences, on ``cuda`` (NVIDIA
or ROCm). aiter's Triton kernels compile for the GPU here; the probe also re-measures whether
SGLang's unified call sites attend one key short on the real device.
"""

from __future__ import annotations

import math

import pytest
import torch

from swa_kit.attention.paths import run_path
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError
from swa_kit.attention.batch import random_paged_batch
from swa_kit.measure.probe import probe_path, probe_sglang_sites, runnable_paths
from swa_kit.window import from_keys

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]

NAN_UNSAFE = {"aiter_triton_unified", "aiter_native_unified", "aiter_emulated_mha_batch_prefill"}
PATHS = [b.name for b in runnable_paths("cuda")] if torch.cuda.is_available() else []


# Every (GQA, page size, q_len) once, each head dim with both values of each of the three, so every pair of values
# meets in some case: a third of the full product's cases, whose compiles kept `pytest tests/gpu` past ten minutes.
# q_len 8: the longest chain the kit's verify takes (the extend paths take it too).
SHAPES = [((8, 8), 1, 1, 256), ((16, 2), 16, 8, 256), ((8, 8), 1, 8, 128), ((16, 2), 16, 1, 128),
          ((16, 2), 1, 1, 128), ((8, 8), 16, 1, 64), ((16, 2), 1, 8, 64), ((8, 8), 16, 8, 64)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("keys", [1, 7, 300, None])
@pytest.mark.parametrize("gqa,page,q_len,head_dim", SHAPES,
                         ids=[f"{g[0]}x{g[1]}-p{p}-q{q}-d{d}" for g, p, q, d in SHAPES])
def test_gpu_path_matches_reference(path, keys, gqa, page, q_len, head_dim):
    chosen = next(b for b in runnable_paths("cuda") if b.name == path)
    if not chosen.honours_window and keys is not None and keys < 300:
        pytest.skip(f"{path} declares no window")
    modes = {"decode"} if q_len == 1 else {"extend", "verify"}  # q_len > 1: a causal chunk that ends the request
    if not modes & chosen.modes:
        pytest.skip(f"{path} declares none of {sorted(modes)}")
    gen = torch.Generator().manual_seed(hash((path, keys, gqa, page, q_len, head_dim)) % 2**31)
    seq_lens = [int(torch.randint(q_len + 20, 260, (1,), generator=gen)) for _ in range(3)]
    batch = random_paged_batch([q_len] * 3, seq_lens, num_q_heads=gqa[0], num_kv_heads=gqa[1], head_dim=head_dim,
                               page_size=page, window_keys=keys, garbage=1e4 if path in NAN_UNSAFE else math.nan,
                               dtype=torch.bfloat16, device="cuda", generator=gen)
    window_arg = from_keys(chosen.convention, keys) if chosen.convention else None
    try:
        result = run_path(path, batch, window_arg)
    except PathUnavailableError as error:
        pytest.skip(str(error))
    expected = reference_attention(batch, keys).out
    assert torch.isfinite(result.out).all()
    err = (result.out.double() - expected).abs().max().item()
    print(f"{path} keys={keys} gqa={gqa} page={page} q_len={q_len} d={head_dim} tier={result.tier} max_err={err:.2e} "
          f"notes={result.notes}")
    assert err < 3e-2


@pytest.mark.parametrize("keys", [5, 64])
def test_gpu_one_key_short_on_unified(keys):
    rows = {r.site: r for r in probe_sglang_sites(keys, device="cuda")}
    row = rows["decode.unified"]
    assert row.tier in ("aiter-triton-gpu", "aiter-native")
    print(f"decode.unified on {row.device} ({row.tier}): window_arg {row.window_arg} attends {row.attended_keys} "
          f"of {keys} keys")
    assert row.attended_keys == keys - 1
    assert probe_path(row.path, keys, device="cuda").ok
