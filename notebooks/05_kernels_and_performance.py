# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Kernels and performance: a sliding-window decode kernel and what it buys
#
# A decode query at position `L - 1` with a window of `W` keys reads only positions `L - W .. L - 1`.
# A kernel that knows this reads `W` keys of K and V per request and KV head **whatever the context**;
# one that does not (a dense mask over the whole context, or full attention) reads all `L`.
# Decode is memory-bound (a few FLOPs per byte), so time is bytes over bandwidth, and the window
# should make a 128k-token request cost what an 8k one does.
#
# This notebook:
# 1. reads the kit's Triton kernel (`swa_kit/attention/kit_triton.py`): how the window bounds the walk over
#    the page table, at page size 1 (SGLang's token-level `kv_indices`) and 16 (a block table);
# 2. counts the two numbers that bound it (bytes and FLOPs) for the benchmark's headline shape;
# 3. runs the quick benchmark **if a GPU is here**, else loads the **recorded** H200 run from `data/bench/`,
#    and plots time against context, achieved bandwidth against the measured copy ceiling, and every
#    path's speed-up over every other.

# %%
# %matplotlib inline
import inspect

import torch

from swa_kit import bench
from swa_kit.attention import kit_triton
from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.report import announce
from swa_kit.tables import print_table
from swa_kit.viz import bench as viz

# %% [markdown]
# ## 1. The walk: the window picks the pages
# Both layouts address one buffer, `k_buffer[slot, kv_head, :]`; only the table's granularity differs.
# Each program owns a request, a KV head (with all the query heads that share it: GQA) and one chunk of
# the window. Its loop starts at the first in-window position, so positions before `L - W` are never
# touched; those slots may even hold NaN (freed SWA slots) without harm:

# %%
source = inspect.getsource(kit_triton)
start = source.index("        # The window bounds the walk")
print(source[start: source.index("        if not SPLIT:")])

# %% [markdown]
# How many pages does one request's walk touch at page size 16? The first page is `(L - W) // 16`, the last
# `(L - 1) // 16`: about `W / 16` pages at any context, where full attention walks `L / 16`.

# %%
W, PAGE = 4096, 16
rows = []
for context in (8 * 1024, 32 * 1024, 128 * 1024):
    first, last = max(0, context - W) // PAGE, (context - 1) // PAGE
    rows.append({"context": context, "first page": first, "last page": last, "pages walked (SWA)": last - first + 1,
                 "pages walked (full)": last + 1})
print_table(rows)

# %% [markdown]
# When the batch has too few (request, KV head) pairs to fill the GPU, the window is cut into chunks
# (flash-decoding), each writing a partial output and its log-sum-exp for a small merge kernel. The split
# count depends on the window and the batch, never on the context:

# %%
rows = []
for batch in (1, 32, 128):
    for window in (128, 1024, 4096):
        splits, chunk = kit_triton.choose_splits(batch * 8, window, num_sms=132)
        rows.append({"batch": batch, "Hkv": 8, "window": window, "splits": splits, "keys per chunk": chunk})
print_table(rows)

# %% [markdown]
# ## 2. Correct first
# The kernel is checked against the float64 reference on fresh random batches (windows, page sizes 1 and 16,
# GQA 1-16, head dims 64-256, bf16 and fp16: `tests/gpu/test_kit_triton_gpu.py`; Triton's CPU interpreter
# on tiny shapes: `tests/test_kit_triton.py`). Here one small batch, every slot outside the window poisoned
# with NaN; on a GPU the kernel runs, on a CPU only the reference does (the interpreter must be chosen
# before `triton` is imported, so it is not used in this notebook).

# %%
gen = torch.Generator().manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
batch = random_paged_batch([1, 1, 1], [300, 1000, 45], num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16,
                           spare_pages=0, dtype=torch.bfloat16, device=device, generator=gen)
poison_unattended(batch, 128)
ref = reference_attention(batch, 128)
announce(ref)
if torch.cuda.is_available():
    from swa_kit.attention.backends import run_path

    result = run_path("kit_triton_swa", batch, 128)
    announce(result)
    error = float((result.out.double() - ref.out).norm() / ref.out.norm())
    print(f"kit_triton_swa vs reference: relative error {error:.1e} (bf16 inputs: expect 1e-3 .. 1e-2)")
else:
    print("no GPU: reference only; NaN in the output?", bool(torch.isnan(ref.out).any()))

# %% [markdown]
# ## 3. The two numbers for the headline shape
# W = 4096, B = 32, Hq/Hkv = 32/8, D = 128, bf16: each request and KV head reads its window of K and V once.

# %%
case = bench.DecodeCase(32, 32, 8, 128, 32 * 1024, 4096)
copy_tbs = round(bench.load_recorded()["copy_tbs"], 2)  # the copy (read + write) measured in the recorded run
flops = 4 * case.hq * case.head_dim * case.window * case.batch
floor_us = bench.math_floor_us(case, copy_tbs)
print(f"bytes: {case.window_bytes / 2**20:.0f} MiB -> floor {floor_us:.0f} us at {copy_tbs} TB/s")
print(f"FLOPs: {flops / 1e9:.2f} GFLOP -> {flops / 790e12 * 1e6:.1f} us at 790 TFLOP/s: memory-bound by far")

# %% [markdown]
# ## 4. The benchmark: run it here, or read the recorded run
# `swa-kit bench --quick` runs the headline shape at 8k and 128k context; `swa-kit bench` the whole grid
# (decode and chain verify of 2-8 drafts, B 1/8/32/128, Hq/Hkv/D 32/8/128, 32/16/256 and 64/8/64 with sinks,
# context 8k and 128k, window 128/1024/4096, page size 1 and 16; prefill 8k-32k tokens). Each path is replayed
# from a CUDA graph with L2 flushed, and each row names that method. Without a GPU, the recorded run is shown,
# and every title says **RECORDED**.

# %%
ok, reason = bench.gpu_available()
if ok:
    result = bench.run_benchmark(quick=True, command="notebook 05: bench.run_benchmark(quick=True)")
else:
    print(f"no GPU here ({reason}): plotting the recorded run")
    result = bench.load_recorded()
print("\n".join(bench.summary_lines(result)))

# %%
print_table(bench.headline_table(result))

# %% [markdown]
# ### Time against context
# The windowed paths (the kit's kernel at both page sizes, aiter's unified kernel, SDPA over the window slice)
# stay flat from 8k to 128k. FlexAttention, the dense mask and full attention read a contiguous copy of the whole
# context, which the recorded run builds at 8k only: there they already cost more than the window's paths.

# %%
viz.time_vs_context(result)

# %% [markdown]
# ### Bandwidth against the copy ceiling
# Each point is one decode case and path: the window's K/V bytes over the time, under the copy bandwidth
# measured in the same run. Paths that read more than the window (dense mask, full) fall far below it.

# %%
viz.bandwidth_roofline(result)

# %% [markdown]
# ### Every path against every other (headline shape, longest context)

# %%
viz.ratios(result)

# %% [markdown]
# ### Prefill: TFLOP/s of the attended pairs
# A prefill is compute-bound; the dense mask wastes both the masked FLOPs and the mask's bytes, full attention
# does the whole triangle. The kit's kernel does decode and chain verify only; dispatch picks the fastest correct
# prefill path.

# %%
viz.prefill_tflops(result)

# %% [markdown]
# ### The targets, as measured
# Each target is checked in every cell of the grid where both sides ran; `docs/kernel-notes.md` has each kernel
# version's prediction and outcome, and the physical limit behind every cell that misses. Then the grid itself
# (ratios: the other path's time over the kit's; above 1 the kit is faster).

# %%
print_table([{"target": t["target"], "threshold": t["threshold"], "cells": t["cells"], "missed": t["missed"],
              "worst": round(t["worst"], 3) if isinstance(t["worst"], float) else t["worst"], "met": t["met"]}
             for t in result["targets"]])

# %%
print_table(bench.grid_table(result))
