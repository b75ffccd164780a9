"""The kit's Triton kernel on a GPU against the float64 reference (skipped without one).

Decode sweeps windows, page sizes 1 and 16, GQA ratios, head dims 64/128/256, bf16 (and fp16 at GQA 4),
with forced split counts so the merge is exercised at every shape (fused into the last split in
batches of 8 KV heads, the merge kernel in the latency-bound ones of 1). Chain verify runs
ragged batches of 2..8 queries per request, with the edge tile in each of its places; GPT-OSS's shape runs with
per-head sinks. The teaching kernel runs beside it. Every slot no query attends holds NaN; the output is poisoned
with NaN before each run.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from swa_kit.attention.reference import reference_attention
from swa_kit.attention.sinks import reference_with_sinks
from swa_kit.attention.batch import poison_unattended, random_paged_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]

SEQS = [1, 100, 1500, 4100, 777]
PAGE_SIZES, HEAD_DIMS = (1, 16), (64, 128, 256)
# bf16 at every (page size, GQA, head dim); fp16 at each (page size, head dim) with GQA 4. The dtype reaches the
# kernel only in its loads, the probabilities' cast before the P @ V product and the store: every shape again in fp16
# doubled this test's cold compiles for no code of its own.
GRID = [*itertools.product(PAGE_SIZES, ((8, 8), (32, 8), (32, 16), (16, 1)), HEAD_DIMS, (torch.bfloat16,)),
        *itertools.product(PAGE_SIZES, ((32, 8),), HEAD_DIMS, (torch.float16,))]


@pytest.mark.parametrize("page_size,heads,head_dim,dtype", GRID,
                         ids=[f"p{p}-{h[0]}x{h[1]}-d{d}-{str(t).split('.')[-1]}" for p, h, d, t in GRID])
def test_kernel_matches_reference(page_size: int, heads: tuple[int, int], head_dim: int, dtype: torch.dtype) -> None:
    from swa_kit.attention.kit import path

    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    hq, hkv = heads
    for keys, splits in ((1, None), (128, None), (1000, 3), (4096, None), (None, 2), (5000, 1)):
        batch = random_paged_batch([1] * len(SEQS), SEQS, num_q_heads=hq, num_kv_heads=hkv,
        head_dim=head_dim, page_size=page_size, spare_pages=0, dtype=dtype, device="cuda", generator=gen)
        poison_unattended(batch, keys)
        plan = path.plan_batch(batch, keys, splits=splits)
        out = torch.full_like(batch.q, float("nan"))
        plan.run(batch.q, out)
        ref = reference_attention(batch, keys).out
        assert not torch.isnan(out).any(), f"keys={keys}: unwritten output or a poisoned slot leaked"
        error = float((out.double() - ref).norm() / ref.norm())
        assert error < 1e-2, f"keys={keys} splits={plan.launch.splits}: relative error {error:.2e}"


def test_path_runs_through_the_table() -> None:
    from swa_kit.attention.paths import run_path

    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    batch = random_paged_batch([1, 1], [300, 2000], num_q_heads=32, num_kv_heads=8,
        head_dim=128, page_size=16, spare_pages=0, dtype=torch.bfloat16, device="cuda", generator=gen)
    result = run_path("kit_triton_swa", batch, 512)
    assert result.tier == "kit-triton" and result.path == "kit_triton_swa"
    ref = reference_attention(batch, 512).out
    assert float((result.out.double() - ref).norm() / ref.norm()) < 1e-2


def _fresh_generator() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _run_and_compare(batch, keys, splits, sinks=None, **overrides):
    from swa_kit.attention.kit import path

    plan = path.plan_batch(batch, keys, sinks=sinks, splits=splits, **overrides)
    out = torch.full_like(batch.q, float("nan"))
    plan.run(batch.q, out)
    ref = reference_attention(batch, keys).out if sinks is None else reference_with_sinks(batch, keys, sinks)
    assert not torch.isnan(out).any(), f"keys={keys}: unwritten output or a poisoned slot leaked"
    error = float((out.double() - ref).norm() / ref.norm())
    assert error < 1e-2, (f"keys={keys} splits={plan.launch.splits} q_lens={batch.q_lens.tolist()}: relative error "
                          f"{error:.2e}")
    return plan.launch


VERIFY_SHAPES = [(32, 8, 128), (32, 16, 256), (64, 8, 64), (16, 1, 128)]


@pytest.mark.parametrize("page_size", (1, 16))
@pytest.mark.parametrize("heads", VERIFY_SHAPES, ids=[f"{a}x{b}-d{d}" for a, b, d in VERIFY_SHAPES])
def test_chain_verify_matches_reference(page_size: int, heads: tuple[int, int, int]) -> None:
    """Ragged 2..8 draft queries per request, each with its own window, causal within the chunk."""
    gen = _fresh_generator()
    hq, hkv, dim = heads
    seqs = [9, 300, 1500, 4100, 777, 2]
    for keys, splits in ((1, None), (5, 2), (128, None), (1000, 3), (None, 2), (4096, None)):
        q_lens = [int(n) for n in torch.randint(2, 9, (len(seqs),), generator=gen)]
        q_lens = [min(q, s) for q, s in zip(q_lens, seqs, strict=True)]
        batch = random_paged_batch(q_lens, seqs, num_q_heads=hq, num_kv_heads=hkv,
        head_dim=dim, page_size=page_size, spare_pages=0, dtype=torch.bfloat16, device="cuda", generator=gen)
        poison_unattended(batch, keys)
        _run_and_compare(batch, keys, splits)


@pytest.mark.parametrize("page_size", (1, 16))
@pytest.mark.parametrize("drafts", (1, 8), ids=("decode", "verify"))
def test_gpt_oss_sinks_match_reference(page_size: int, drafts: int) -> None:
    gen = _fresh_generator()
    seqs = [100, 5000, 64, 1300]
    for keys, splits in ((128, None), (128, 4), (1000, 1), (None, 3)):
        q_lens = [min(s, 1 + b % drafts) for b, s in enumerate(seqs)]
        batch = random_paged_batch(q_lens, seqs, num_q_heads=64, num_kv_heads=8,
        head_dim=64, page_size=page_size, spare_pages=0, dtype=torch.bfloat16, device="cuda", generator=gen)
        poison_unattended(batch, keys)
        sinks = torch.randn(64, generator=gen) * 3
        _run_and_compare(batch, keys, splits, sinks.cuda())


EDGES = {"before": {"edge_prefetch": 0, "edge_in_walk": 0}, "prefetch": {"edge_prefetch": 1, "edge_in_walk": 0},
         "in_walk": {"edge_prefetch": 0, "edge_in_walk": 1}, "own_split": {"edge_in_walk": 0}}


@pytest.mark.parametrize("head_dim", (64, 128))
@pytest.mark.parametrize("edge", sorted(EDGES))
def test_every_edge_placement_compiles_and_matches(edge: str, head_dim: int) -> None:
    """Each value of the kernel's EDGE constexpr, compiled: a latency-bound batch (2 requests x 8 KV heads on a
    GPU of 16 SMs or more) gives its edge tile a program of its own where the window splits; the others are asked
    for by name."""
    from swa_kit.attention.kit.policy import Edge

    gen = _fresh_generator()
    for keys in (5, 700):
        batch = random_paged_batch([8, 3], [2000, 900], num_q_heads=32, num_kv_heads=8, head_dim=head_dim,
                                   page_size=16, spare_pages=0, dtype=torch.bfloat16, device="cuda", generator=gen)
        poison_unattended(batch, keys)
        launch = _run_and_compare(batch, keys, 3, edge_split=int(edge == "own_split"), **EDGES[edge])
        assert launch.edge == Edge[edge.upper()]


@pytest.mark.parametrize("page_size", (1, 16))
def test_the_teaching_kernel_matches_reference(page_size: int) -> None:
    from swa_kit.attention.kit import teaching

    gen = _fresh_generator()
    for (hq, hkv), keys in (((32, 8), 128), ((6, 2), None), ((16, 1), 1), ((8, 8), 5000)):
        batch = random_paged_batch([1] * len(SEQS), SEQS, num_q_heads=hq, num_kv_heads=hkv, head_dim=128,
                                   page_size=page_size, spare_pages=0, dtype=torch.bfloat16, device="cuda",
                                   generator=gen)
        poison_unattended(batch, keys)
        result = teaching.run(batch, keys)
        assert (result.path, result.tier) == ("kit_teaching", "kit-triton")
        ref = reference_attention(batch, keys).out
        assert not torch.isnan(result.out).any(), f"keys={keys}: unwritten output or a poisoned slot leaked"
        assert float((result.out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("fused_merge", (0, 1), ids=("merge-kernel", "fused-merge"))
def test_a_plan_replays_in_a_cuda_graph(fused_merge: int) -> None:
    """No host sync inside a launch: the plan's run captures, and every replay matches the eager run (with the
    fused merge, only if each call leaves its split counters at zero for the next)."""
    from swa_kit.attention.kit import path

    gen = _fresh_generator()
    batch = random_paged_batch([3, 8, 2], [4000, 900, 5000], num_q_heads=32, num_kv_heads=8,
        head_dim=128, page_size=16, spare_pages=0, dtype=torch.bfloat16, device="cuda", generator=gen)
    plan = path.plan_batch(batch, 1024, splits=4, fused_merge=fused_merge)
    assert (plan.locks is not None) == bool(fused_merge)
    out = torch.empty_like(batch.q)
    plan.run(batch.q, out)
    torch.cuda.synchronize()
    ref = reference_attention(batch, 1024).out
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(batch.q, out)
    eager = out.clone()
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
