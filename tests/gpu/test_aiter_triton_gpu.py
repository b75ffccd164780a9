"""aiter's Triton unified_attention kernels compiled for a CUDA GPU, against the float64 reference.

Run on a GPU machine: ``python -m pytest tests/gpu -q``. Skipped without CUDA (or ROCm).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swa_kit.attention.aiter import triton_kernels
from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import AttentionBatch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError
from swa_kit.window import from_keys

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU"),
]
TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 5e-3}


def paged_batch(q_lens, seq_lens, *, hq, hkv, d, page_size, dtype, seed=None):
    """Random batch on the GPU; requests own shuffled whole pages; page 0 (the dummy) stays zero."""
    g = torch.Generator().manual_seed(torch.seed() if seed is None else seed)
    pages_per = [-(-s // page_size) for s in seq_lens]
    n_pages = sum(pages_per) + 3
    k = torch.randn(n_pages * page_size, hkv, d, generator=g)
    v = torch.randn(n_pages * page_size, hkv, d, generator=g)
    k[:page_size] = 0
    v[:page_size] = 0
    order = (torch.randperm(n_pages - 1, generator=g) + 1).tolist()
    indices, used = [], 0
    for s, n in zip(seq_lens, pages_per):
        pages = torch.tensor(order[used : used + n])
        used += n
        indices.append((pages[:, None] * page_size + torch.arange(page_size)).flatten()[:s])
    q = torch.randn(sum(q_lens), hq, d, generator=g)
    qo = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()])
    kv = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()])
    cuda = dict(device="cuda")
    return AttentionBatch(
        q.to(dtype=dtype, **cuda), k.to(dtype=dtype, **cuda), v.to(dtype=dtype, **cuda), qo.cuda(), kv.cuda(),
        torch.cat(indices).cuda(), 1 / math.sqrt(d), page_size=page_size,
    )


def check(batch, keys, window_arg=None):
    arg = from_keys("aiter_unified", keys) if window_arg is None else window_arg
    result = run_path("aiter_triton_unified", batch, arg)
    assert result.tier == "aiter-triton-gpu" and result.device.startswith("cuda")
    err = (result.out.double() - reference_attention(batch, keys).out).abs().max().item()
    assert err < TOL[batch.q.dtype], f"keys={keys} {result.notes}: max error {err}"
    return result


SHAPES = [
    # (q_lens, seq_lens, hq, hkv, d): prefill, extend, decode, verify-like; GQA 1/4/8
    ([300, 130], [300, 130], 8, 2, 128),
    ([17, 5, 40], [700, 333, 90], 8, 1, 64),
    ([1] * 6, [1500, 900, 33, 4, 1200, 257], 16, 2, 256),
    ([4, 4], [1030, 51], 32, 4, 128),
]


# one dtype per page size keeps the number of distinct compiles (and the run) short
@pytest.mark.parametrize("page_size,dtype", [(16, torch.bfloat16), (64, torch.float16)], ids=["ps16-bf16", "ps64-fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["prefill", "extend", "decode", "verify"])
@pytest.mark.parametrize("keys", [1, 37, 4096, None])
def test_matches_reference_on_gpu(shape, page_size, dtype, keys):
    q_lens, seq_lens, hq, hkv, d = shape
    check(paged_batch(q_lens, seq_lens, hq=hq, hkv=hkv, d=d, page_size=page_size, dtype=dtype), keys)


def test_long_decode_takes_the_3d_split_kv_kernel():
    batch = paged_batch([1, 1], [3000, 2100], hq=8, hkv=8, d=128, page_size=16, dtype=torch.bfloat16)
    result = check(batch, None)
    assert " 3d kernel" in result.notes[0]


def test_sglang_argument_attends_one_key_short_on_gpu():
    w = 64
    batch = paged_batch([8, 1], [500, 300], hq=8, hkv=2, d=128, page_size=16, dtype=torch.float16)
    check(batch, w - 1, window_arg=(w - 1 - 1, 0))  # SGLang's (sliding_window_size - 1, 0), sws = w - 1
    out = run_path("aiter_triton_unified", batch, (w - 2, 0)).out.double()
    assert (out - reference_attention(batch, w).out).abs().max() > 1e-2


def test_page_size_1_prefill_runs_on_gpu():
    """Outside decode aiter tiles by 64 keys, whatever the block size: page size 1 works."""
    check(paged_batch([40, 9], [40, 70], hq=4, hkv=2, d=64, page_size=1, dtype=torch.bfloat16), 16)


def test_page_size_1_decode_is_refused_on_gpu():
    batch = paged_batch([1, 1], [40, 70], hq=4, hkv=2, d=64, page_size=1, dtype=torch.bfloat16)
    with pytest.raises(PathUnavailableError, match="page size >= 16"):
        run_path("aiter_triton_unified", batch, (-1, -1))


def test_the_refusal_is_needed(monkeypatch):
    """Without the guard, aiter's decode config (TILE_SIZE = block size = 1) does not compile here."""
    monkeypatch.setattr(triton_kernels, "GPU_MIN_DECODE_BLOCK", 1)
    batch = paged_batch([1, 1], [40, 70], hq=4, hkv=2, d=64, page_size=1, dtype=torch.bfloat16)
    with pytest.raises(Exception):  # noqa: B017 - Triton's compile error type varies by version
        run_path("aiter_triton_unified", batch, (-1, -1))
        torch.cuda.synchronize()


def test_nan_in_freed_out_of_window_slots_on_gpu():
    ps, keys = 16, 8
    extend = paged_batch([4], [60], hq=4, hkv=2, d=64, page_size=ps, dtype=torch.bfloat16)
    extend.v_buffer[extend.request_slots(0)[:ps]] = float("nan")
    assert torch.isnan(run_path("aiter_triton_unified", extend, (keys - 1, 0)).out).any()
    decode = paged_batch([1], [60], hq=4, hkv=2, d=64, page_size=ps, dtype=torch.bfloat16)
    decode.v_buffer[decode.request_slots(0)[:ps]] = float("nan")
    check(decode, keys)  # a page wholly before the window is never loaded in decode


def _interpreter_child(path: str) -> None:
    """Child process: aiter's kernel in Triton's CPU interpreter on the saved batch (see the test below)."""
    saved = torch.load(path, weights_only=False)
    ok, reason = triton_kernels.interpreter_status()
    if not ok:
        torch.save({"skip": reason}, path + ".out")
        return
    torch.save({"out": run_path("aiter_triton_unified", saved["batch"], (4, 0)).out}, path + ".out")


def test_cpu_interpreter_copy_agrees_with_the_gpu(tmp_path):
    """aiter's kernel in the interpreter runs in a child process. Before aiter_loader.interpreted_stdlib restored
    triton.language after each interpreted launch, running it here broke every later compile of a Triton kernel in
    this process (Triton 3.6: 'block_argument' has no attribute 'get_element_ty'); the child keeps this suite
    independent of that repair, which tests/test_aiter_loader.py checks on the CPU."""
    gpu = paged_batch([3], [20], hq=2, hkv=1, d=64, page_size=16, dtype=torch.float32)
    cpu_batch = AttentionBatch(
        gpu.q.cpu(), gpu.k_buffer.cpu(), gpu.v_buffer.cpu(), gpu.qo_indptr.cpu(), gpu.kv_indptr.cpu(),
        gpu.kv_indices.cpu(), gpu.sm_scale, page_size=16,
    )
    path = str(tmp_path / "batch.pt")
    torch.save({"batch": cpu_batch}, path)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, __file__, path], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    result = torch.load(path + ".out")
    if "skip" in result:
        pytest.skip(result["skip"])  # measured on the H200 image: triton 3.6 + numpy 2.5
    on_gpu = run_path("aiter_triton_unified", gpu, (4, 0))
    assert on_gpu.tier == "aiter-triton-gpu"
    assert (result["out"] - on_gpu.out.cpu()).abs().max() < 1e-2
    assert get_path("aiter_triton_unified").available()[0]


def test_the_launcher_replays_in_a_cuda_graph():
    """No host sync inside the launch (it used to read seq_lens back): it captures, and replays match."""
    batch = paged_batch([1] * 4, [3000, 700, 5000, 64], hq=32, hkv=8, d=128, page_size=16, dtype=torch.bfloat16)
    k, v = batch.paged_kv()
    out = torch.empty_like(batch.q)
    cu_q, seq_lens = batch.qo_indptr.to(torch.int32), batch.seq_lens.to(device="cuda", dtype=torch.int32)
    table = batch.block_table().to(torch.int32)
    for window in ((1023, 0), (-1, -1)):  # the 2D kernel, and the 3D split-KV kernel with its reduce

        def launch(window=window):
            return triton_kernels.unified_attention(batch.q, k, v, out, cu_q, 1, seq_lens, 5000, batch.sm_scale,
                                                  window, table)

        launch()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        eager = out.clone()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager), window


def test_sinks_reach_aiters_kernel():
    from swa_kit.attention.sinks import reference_with_sinks

    batch = paged_batch([1, 1, 1], [900, 3000, 40], hq=64, hkv=8, d=64, page_size=16, dtype=torch.bfloat16)
    sinks = torch.randn(64, device="cuda") * 3
    k, v = batch.paged_kv()
    out = torch.full_like(batch.q, float("nan"))
    triton_kernels.unified_attention(batch.q, k, v, out, batch.qo_indptr.to(torch.int32), 1,
                                   batch.seq_lens.to(device="cuda", dtype=torch.int32), 3000, batch.sm_scale,
                                   (127, 0), batch.block_table().to(torch.int32), sinks=sinks)
    ref = reference_with_sinks(batch, 128, sinks)
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


if __name__ == "__main__":
    _interpreter_child(sys.argv[1])
