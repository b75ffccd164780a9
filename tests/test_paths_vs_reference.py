"""Every path that runs here against the float64 reference, on fresh random paged batches.

Windows {1, small, >= kv_len, None} x GQA ratios x page sizes 1 / 16 x q_len 1 / > 1 x head
dims 64 / 128 / 256, cycled so each path sees every value of each axis without the full product
(aiter's kernels run in Triton's CPU interpreter here, which is slow). Out-of-window slots hold
garbage that must not leak: NaN, except for aiter's unified kernel, which loads whole tiles (its
docstring says so and tests/test_aiter_triton.py measures it), so it and :data:`NAN_UNSAFE` get huge
finite garbage, which still must not leak.
A path that declares no window only runs cases where the window does not bind.
"""

from __future__ import annotations

import math

import pytest
import torch

from swa_kit.attention.paths import AttentionPath, run_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError
from swa_kit.measure.probe import runnable_paths
from swa_kit.window import from_keys

# Paths that multiply masked weights by every gathered V row, so NaN (0 x NaN) would poison them:
# aiter's unified kernel loads whole tiles (measured in tests/test_aiter_triton.py).
NAN_UNSAFE = {"aiter_triton_unified", "aiter_native_unified"}
WINDOWS = ["one", "small", "wide", None]
GQA = [(4, 4), (8, 2), (8, 1)]
HEAD_DIMS = [64, 128, 256]
Q_LENS = [1, 5]


def _cases(path: AttentionPath) -> list[tuple]:
    pages = [16] if path.kv_layout == "block_table" else [1, 16]
    windows = WINDOWS if path.honours_window else ["wide", None]
    decode_only = path.modes <= {"decode"}
    q_lens = [1] if decode_only else ([5] if "decode" not in path.modes else Q_LENS)
    axes = [windows, GQA, pages, q_lens, HEAD_DIMS]
    count = max(len(a) for a in axes) * 2
    return [tuple(a[(i * (k + 1) + i // len(a)) % len(a)] for k, a in enumerate(axes)) for i in range(count)]


def _keys(window: str | None, kv_len: int) -> int | None:
    return {"one": 1, "small": 3, "wide": kv_len + 5, None: None}[window]


CASES = [(b.name, *case) for b in runnable_paths("cpu") for case in dict.fromkeys(_cases(b))]


@pytest.mark.parametrize("path,window,gqa,page,q_len,head_dim", CASES)
def test_path_matches_reference(path, window, gqa, page, q_len, head_dim):
    chosen = next(b for b in runnable_paths("cpu") if b.name == path)
    seed = hash((path, window, gqa, page, q_len, head_dim)) % 2**31
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [int(torch.randint(q_len + 6, 28, (1,), generator=gen)) for _ in range(2)]
    keys = _keys(window, max(seq_lens))
    garbage = 1e4 if path in NAN_UNSAFE else math.nan
    batch = random_paged_batch([q_len] * 2, seq_lens, num_q_heads=gqa[0], num_kv_heads=gqa[1], head_dim=head_dim,
                               page_size=page, window_keys=keys, garbage=garbage, generator=gen)
    window_arg = from_keys(chosen.convention, keys) if chosen.convention else None
    try:
        result = run_path(path, batch, window_arg)
    except PathUnavailableError as error:  # a declared limit of this path (e.g. FlexAttention head dims)
        pytest.skip(str(error))
    expected = reference_attention(batch, keys).out
    assert torch.isfinite(result.out).all(), f"{path}: garbage from freed slots leaked"
    tol = 2e-4 if result.tier.startswith("aiter") else 1e-5
    torch.testing.assert_close(result.out.double(), expected, rtol=tol, atol=tol)
    assert result.path == path and result.tier and result.device == "cpu"


def test_every_runnable_path_is_covered():
    names = {b.name for b in runnable_paths("cpu")}
    assert {"reference", "torch_sdpa", "flex_attention", "aiter_triton_unified"} <= names
    assert names == {c[0] for c in CASES}
    for name in names:
        mine = [c for c in CASES if c[0] == name]
        honours = next(b for b in runnable_paths("cpu") if b.name == name).honours_window
        assert {c[1] for c in mine} == (set(WINDOWS) if honours else {"wide", None})
        assert {c[5] for c in mine} == set(HEAD_DIMS)
