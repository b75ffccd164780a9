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
# # 05 · Kernels and performance: what a sliding window buys, and a kernel that collects it
#
# **Goal.** In about 20 minutes you will be able to (1) say what a window buys a hybrid model in decode reads and
# in memory, and why those are different numbers; (2) read how a window-aware decode kernel bounds its walk, so
# its cost is the window's whatever the context; (3) compute the bandwidth floor of a decode step and read one
# measured table against it. Two exercises check you on the way.
# Terms link to the kit's [glossary](../docs/glossary.md).
#
# A [decode](../docs/glossary.md#forward-modes) query at position `L - 1` with a
# [sliding window](../docs/glossary.md#sliding-window) of `W` keys reads only positions `L - W .. L - 1`.
# A kernel that knows this reads `W` keys of K and V per request and KV head **whatever the context**;
# one that does not (a dense mask over the whole context, or [full attention](../docs/glossary.md#full-attention))
# reads all `L`. Decode is memory-bound (a few FLOPs per byte), so its time is bytes over bandwidth.
#
# An **optional appendix** after the takeaway, outside the 20 minutes, holds the tuned kernel's detail (its launch
# policy, the recorded benchmark's plots and grid); [docs/kernel.md](../docs/kernel.md) explains it.

# %%
# %matplotlib inline
import inspect
import textwrap

import torch

from swa_kit.measure import bench
from swa_kit.lessons.workshop import kernels
from swa_kit.attention.kit import kernel, policy, teaching
from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError
from swa_kit.lessons.report import announce
from swa_kit.tables import print_table
from swa_kit.viz import bench as viz

# %% [markdown]
# ## 1. What the window buys a hybrid model
# Gemma-4 31B has 50 sliding layers with a 1024-key window and 10 full layers. A window buys two different things:
#
# - **reads**: in every decode step a sliding layer on a window-aware kernel reads its window of K and V, not
#   the whole context; the full layers read the whole context whatever the kernel;
# - **memory**: the KV the server need not hold. How much depends on how SGLang sizes the SWA pool (notebook
#   00: `swa_full_tokens_ratio`, default 0.8), not on the kernel.
#
# **Exercise 5.1 (predict).** One Gemma-4 31B request at 128k tokens, every sliding layer on a window-aware
# kernel. What percentage of the decode step's KV bytes do the sliding layers still read? Guess first (most, or a
# little?), then compute it (`kernels.decode_kv_bytes` splits the bytes by layer kind).

# %%
my_sliding_percent = ...  # your answer: a percentage
kernels.check_sliding_share(my_sliding_percent)

# %%
read = kernels.decode_kv_bytes("gemma4-31b", 128 * 1024)
buys = kernels.what_the_window_buys("gemma4-31b", 128 * 1024)
print(f"one decode step, 128k tokens: sliding layers {read['sliding_layers'] / 2**30:.2f} GiB, "
      f"full layers {read['full_layers'] / 2**30:.2f} GiB; without any window {read['without_window'] / 2**30:.0f} GiB")
windowed = read["sliding_layers"] + read["full_layers"]
print(f"the window cuts the step's KV reads by {100 * (1 - windowed / read['without_window']):.1f} %")
print(f"KV memory the SWA pool saves: {100 * buys['memory_saved_default']:.1f} % at SGLang's default sizing, "
      f"{100 * buys['memory_saved_minimum']:.1f} % at the per-request minimum")

# %% tags=["solution"]
print(f"what is left of the step, the sliding layers' share: {100 * buys['sliding_share_of_step']:.1f} %")
kernels.check_sliding_share(round(100 * buys["sliding_share_of_step"], 1))

# %% [markdown]
# Read the percentages as what they are. The **saving in reads** compares the step with and without the window;
# the **saving in memory** compares the pools SGLang allocates; the **sliding share** is what is *left* of the
# step once the window is honoured, so it is the most that a faster windowed kernel can still take off. A
# residual share is not a saving: never set one against the other.
#
# ## 2. The teaching kernel: the window picks the pages
# Both layouts address one buffer, `k_buffer[slot, kv_head, :]`; only the table's granularity differs (page size
# 1: SGLang's token-level `kv_indices`; 16: a block table). The teaching kernel is the walk and nothing else: one
# program per request and KV head (with all the query heads that share it: GQA). Its loop starts at the window's
# first key and finds each key's slot through its page in the table, so positions before `L - W`, and the pages
# that hold them, are never touched; those slots may even hold NaN (freed SWA slots) without harm. Each step of
# 16 keys is folded in with an online softmax: the running max, the running sum and the output, rescaled when the
# max grows.

# %%
print(textwrap.dedent(inspect.getsource(teaching.window_decode_kernel.fn)))

# %% [markdown]
# **Run it.** On a GPU it is compiled; on a CPU it runs in **Triton's CPU interpreter**, which executes the kernel
# in Python one program at a time (a few seconds, in a child Python because Triton picks the interpreter when it
# is first imported). Every slot outside the window holds NaN, and the output is compared with the float64
# reference; the first line says which tier ran it. **Predict, then run.** If the kernel read a single key outside
# the window, what would the output show?

# %%
gen = torch.Generator().manual_seed(0)
on_gpu = torch.cuda.is_available()
small = random_paged_batch([1, 1, 1], [40, 7, 23], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=4,
                           spare_pages=0, dtype=torch.float16, device="cuda" if on_gpu else "cpu", generator=gen)
poison_unattended(small, 9)
try:
    taught = teaching.run(small, 9)
    announce(taught)
    ref = reference_attention(small, 9).out
    print(f"teaching kernel vs reference: relative error {float((taught.out.double() - ref).norm() / ref.norm()):.1e}; "
          f"NaN in the output: {bool(torch.isnan(taught.out).any())}")
except PathUnavailableError as failure:  # no Triton (macOS, Windows without WSL): the reference only
    print(f"the teaching kernel cannot run here: {failure}")

# %% [markdown]
# **Predict, then run.** At page size 16 and `W = 4096`, how many pages does one request's walk touch at
# 8k, 32k and 128k tokens of context? And full attention? The first page is `(L - W) // 16`, the last
# `(L - 1) // 16`.

# %%
W, PAGE = 4096, 16
rows = []
for context in (8 * 1024, 32 * 1024, 128 * 1024):
    first, last = max(0, context - W) // PAGE, (context - 1) // PAGE
    rows.append({"context": context, "first page": first, "last page": last, "pages walked (SWA)": last - first + 1,
                 "pages walked (full)": last + 1})
print_table(rows)

# %% [markdown]
# ## 3. One measured table: the headline shape
# The benchmark's headline decode case is `bench.HEADLINE`: batch 32, 32/8 query/KV heads, head dim 128,
# window 4096, bf16. Each request and KV head reads its window of K and V once.
#
# **Exercise 5.2 (predict).** With the device-to-device copy bandwidth the recorded run measured (printed
# below), what is the bandwidth floor, in microseconds, of one decode step of the headline case at 128k
# tokens? Is it different at 8k? Work it out by hand (K and V, batch x KV heads x keys x head dim x 2 bytes),
# or with `bench.DecodeCase(...).window_bytes`.

# %%
recorded = bench.load_recorded()
copy_tbs = recorded["copy_tbs"]  # copy (read + write) bandwidth, measured in the recorded run
print(f"recorded copy bandwidth: {copy_tbs:.2f} TB/s ({recorded['machine']['gpu']}, {recorded['date']})")
my_floor_us = ...  # your answer: a number of microseconds
kernels.check_headline_floor(my_floor_us)

# %% tags=["solution"]
h = bench.HEADLINE
case = bench.DecodeCase(h["batch"], h["hq"], h["hkv"], h["head_dim"], 128 * 1024, h["window"], h["dtype"])
flops = 4 * case.hq * case.head_dim * case.window * case.batch
floor_us = bench.math_floor_us(case, copy_tbs)
fastest_prefill = max(r["tflops"] for r in recorded["prefill"] if r.get("tflops"))  # same run, same GPU
print(f"bytes: {case.window_bytes / 2**20:.0f} MiB -> floor {floor_us:.1f} us at {copy_tbs:.2f} TB/s "
      f"(the same at 8k: {kernels.headline_floor_us(8 * 1024, copy_tbs):.1f} us)")
print(f"FLOPs: {flops / 1e9:.2f} GFLOP -> {flops / (fastest_prefill * 1e12) * 1e6:.1f} us at the fastest prefill "
      f"rate the same run measured ({fastest_prefill:.0f} TFLOP/s): memory-bound by far")
kernels.check_headline_floor(round(floor_us, 1))

# %% [markdown]
# **The measured table.** `swa-kit bench --quick` times the headline shape at 8k and 128k tokens of context
# (`swa-kit bench`: the whole grid, appendix C). Each path is replayed from a CUDA graph with L2 flushed. Without a
# GPU, the recorded run is shown. **Predict, then run.** Against the floor you just computed, how close do the
# windowed paths come, and does 128k cost more than 8k?

# %%
ok, reason = bench.gpu_available()
if ok:
    result = bench.run_benchmark(quick=True, command="notebook 05: bench.run_benchmark(quick=True)")
else:
    print(f"no GPU here ({reason}): plotting the recorded run")
    result = recorded
print("\n".join(bench.summary_lines(result)[:3]))  # where, with what, and the copy ceiling
print_table(bench.headline_table(result))

# %% [markdown]
# No NaN in the teaching kernel's output: it never loaded a poisoned slot. The table is the kit's tuned kernel (a
# chunked version of the same walk, appendix A) beside the other paths, on the recorded H200 run (or live, on a GPU
# here). Its conditions: aiter's `unified_attention` is AMD-tuned and timed here on NVIDIA through the kit's
# launcher; SDPA reads a window sliced out in advance (a yardstick, not a competitor); appendix C prints each
# path's setup.
#
# ## Takeaway
#
# - **The window cuts Gemma-4 31B's decode KV reads at 128k tokens by about 90 %**, from every layer reading the
#   whole context to the sliding layers reading their window (exercise 5.1's printout), while **the KV memory a
#   default-sized server holds drops by about 18 %** (SGLang's 0.8 ratio; about 90 % only at the per-request
#   minimum). Two savings of different things, from the same window.
# - What is left of the step is mostly the full layers': the sliding layers' residual share is what a faster
#   windowed kernel could still take off, and it is small. Size the SWA pool first; tune the kernel second.
# - A window-aware kernel walks only the pages inside the window, so its decode time is flat in the context and
#   its floor is the window's bytes over the bandwidth (exercise 5.2, the table above).

# %% [markdown]
# ## Optional appendix: the tuned kernel in detail
# Not part of the lesson's 20 minutes: for readers who want to see how the kit's tuned kernel and its benchmark
# are built. [docs/kernel.md](../docs/kernel.md) explains each version and its measurements.
#
# ### A. The tuned kernel's bounds and launch policy
# The kit's tuned kernel walks the same window as the teaching kernel. What it adds: the window cut into chunks
# that several programs share, a chain verify's drafts in the same tile, GPT-OSS's sinks, and a launch policy
# (below). Its bounds:

# %%
source = inspect.getsource(kernel._swa_attend_kernel.fn)
start = source.index("    # The window bounds the walk")
print(source[start: source.index("    m_i = tl.full")])

# %% [markdown]
# When the batch has too few (request, KV head) pairs to fill the GPU, the window is cut into chunks
# (flash-decoding), each writing a partial output and its log-sum-exp; the last split to finish merges them.
# A latency-bound batch (B 1 here: one pair per 8 SMs or fewer) is cut as fine as one tile and merged by a
# small second kernel, whose programs run side by side. The split count depends on the window and the batch,
# never on the context. Decode and a verify of 8 drafts split it into at most one wave of two programs per SM.
# Where the grid then leaves each SM two programs or fewer and a chunk holds more than one tile, a program keeps
# two K/V tiles in flight (two shared-memory buffers: five pipeline stages, since the table read that each tile's
# loads wait on takes a stage of its own); elsewhere one. A verify's window has two edges that each draft sees
# differently (the keys just before the shared middle, and the drafts themselves); they are folded in as one extra
# masked tile. With two buffers that tile is the walk's last iteration, so its loads are issued ahead like any
# tile's; with one it is loaded before the walk. The launch policy decides all of this on the host, from the shape
# and the batch alone (an H200's 132 SMs, 32/8/128):

# %%
rows = []
for batch in (1, 8, 32, 128):
    pairs = batch * 8
    bound = policy.is_latency_bound(pairs, 132)
    decode, verify = (policy.launch_policy(128, 4, q_len, latency_bound=bound) for q_len in (1, 8))
    for window in (128, 1024, 4096):
        d, v = (policy.plan_launch(chosen, pairs, window, 132, verify=chosen is verify)  # as plan_decode does
                for chosen in (decode, verify))
        rows.append({"batch": batch, "Hkv": 8, "window": window, "splits": d.splits, "keys per chunk": d.chunk,
                     "merged by": d.merge.label, "K/V buffers": 2 if d.deep else 1, "verify splits": v.splits,
                     "verify K/V buffers": 2 if v.deep else 1, "verify's edge tile": v.edge.name.lower()})
print_table(rows)

# %% [markdown]
# ### B. The tuned kernel against the reference
# The kernel is checked against the float64 reference on fresh random batches (windows, page sizes 1 and 16,
# GQA 1-16, head dims 64-256, bf16 and fp16: `tests/gpu/test_kit_triton_gpu.py`; Triton's CPU interpreter
# on tiny shapes: `tests/test_kit_triton.py`). Here one tiny batch, every slot outside the window poisoned
# with NaN. On a GPU the compiled kernel runs. On a CPU it runs in **Triton's CPU interpreter**: Triton picks
# the interpreter when it is first imported, so `swa_kit.attention.kit.interpreted` starts a child Python with
# `TRITON_INTERPRET=1` and hands it the function and the batch (fp16: Triton 3.9's interpreter gets bf16 dot
# products wrong).
# It takes a few seconds: the interpreter executes the kernel in Python, one program at a time.
#
# As for the teaching kernel, a single key read outside the window would put NaN in the output.

# %%
batch = random_paged_batch([1, 1, 1], [300, 1000, 45] if on_gpu else [60, 100, 9], num_q_heads=8, num_kv_heads=2,
                           head_dim=64 if on_gpu else 16, page_size=16, spare_pages=0,
                           dtype=torch.bfloat16 if on_gpu else torch.float16, device="cuda" if on_gpu else "cpu",
                           generator=gen)
keys = 128 if on_gpu else 24
poison_unattended(batch, keys)
ref = reference_attention(batch, keys)
announce(ref)
try:
    if on_gpu:
        from swa_kit.attention.paths import run_path

        checked = run_path("kit_triton_swa", batch, keys)
    else:
        from swa_kit.attention.kit.path import run_interpreted

        checked = run_interpreted(batch, keys)
    announce(checked)
    error = float((checked.out.double() - ref.out).norm() / ref.out.norm())
    print(f"kit_triton_swa ({checked.device}) vs reference: relative error {error:.1e}; "
          f"NaN in the output: {bool(torch.isnan(checked.out).any())}")
except PathUnavailableError as failure:  # no Triton (macOS, Windows without WSL): the reference only
    print(f"the kit's kernel cannot run here: {failure}")

# %% [markdown]
# No NaN: no program loaded a poisoned slot, because the walk never leaves the window.
#
# ### C. Every path's conditions, and the recorded run's plots
#
# **Read every comparison with its conditions.** The paths are not equals, and the run says how each was set
# up (printed next, from the run's own records):
#
# - **[aiter](../docs/glossary.md#aiter)'s [`unified_attention`](../docs/glossary.md#unified)** is aiter 0.1.7's
#   Triton kernel (SGLang 0.5.23 imports the newer
#   `aiter.ops.triton.attention.unified_attention`), written and tuned for AMD GPUs, launched here on an
#   **NVIDIA** GPU through the kit's own launcher: a ratio against it says nothing about aiter on its own
#   hardware.
# - **SDPA over the window** reads a window sliced out in advance into contiguous memory (the slicing is not
#   timed): the ideal layout, which no paged cache has. It is a yardstick, not a competitor.
# - **FlexAttention, the dense mask and full attention** need a contiguous copy of the whole context; the
#   run builds it only at the contexts printed below, so they have no 128k points.
# - The kit's kernel and aiter's read the paged layout (the page sizes below).

# %%
print("method:", sorted({r.get("method") for r in result["decode"] if r.get("time_ms")}))
for path, how in result["paths"]["decode"].items():
    timed = [r for r in result["decode"] if r["path"] == path and r.get("time_ms")]
    print(f"- {path}: {how}; contexts {sorted({r['case']['context'] for r in timed})}, "
          f"page sizes {sorted({r['page_size'] for r in timed}, key=str)}")

# %% [markdown]
# ### Time against context
# The windowed paths (the kit's kernel at both page sizes, aiter's unified kernel, SDPA over the window slice)
# stay flat from 8k to 128k. FlexAttention, the dense mask and full attention were timed at 8k only (above):
# there they already cost more than the window's paths.

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
# Each cell is one path's time over another's, under the conditions above (aiter's kernel: AMD-tuned,
# timed on NVIDIA; SDPA: pre-sliced window).

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
# ### The grid
# Every decode case of the run; ratios are the other path's time over the kit's (above 1: the kit is faster),
# each under the conditions above. `copy` is the kit's share of the copy ceiling; `read_same` the share one read
# of the same bytes reached in the same run (a sum, one kernel: what a plain reader of those bytes reaches in one
# call, its fixed cost included; a reference, not a bound: the kit can pass it) and `copy_same` a plain copy's
# (faster below a few GiB: part of its writes is still in L2 when its timer stops);
# `ver/dec` is chain verify over decode on the same KV, `tile/dec` decode alone in the verify's taller query
# tile (what the extra query rows cost before any mask), and `keys+tile/dec` decode in that tile over as many
# keys as the verify's longest chain reads (the window and q_len - 1 more: everything a verify does but mask its
# chains; where the window is whole tiles, those few keys are one more tile to walk). Where `ver/dec` is close to
# `keys+tile/dec`, the verify costs what the kit's decode costs for its keys and rows. `docs/kernel.md`
# explains each kernel version and the limit behind the cells where the kit is slower.

# %%
print_table(bench.grid_table(result))

# %% [markdown]
# ### Verify on every path
# `ver/dec` above holds the kit's verify to the kit's decode. Is a verify that close to its decode on any kernel?
# A later call on an H200 timed every path's decode and its verify of 8 drafts in every request, on the same KV
# (`gpu_run.py verify_paths`; RECORDED, printed from its own record). Its conditions: 8k context, B 1-128 (the table
# counts B 8-128); the torch paths take no sinks (GPT-OSS's cells run without them); aiter's verify, which loads
# whole 64-key tiles, read the bench's NaN dummy page and was checked again with that page zeroed; FlexAttention does
# not compile at Gemma's B 128. `verify_ragged` is the kit's verify of 2-8 drafts, the grid's.

# %%
from swa_kit.measure.bench import verify_paths

record = verify_paths.load_verify_paths()
print(record["note"].split(". ")[0] + ".")
print_table(verify_paths.verify_over_decode(record))
for page_size in (1, 16):
    versus = verify_paths.next_fastest_verify(record, page_size)
    print(f"page size {page_size}: the next fastest verify took {versus['least']:.2f}-{versus['most']:.2f}x the "
          f"kit's, in {versus['cells']} cells ({versus['next_fastest']})")

# %% [markdown]
# A path whose verify stays near its decode is not always the better verify: where aiter's verify takes *less* than
# its decode, its decode is the slow one. Compare verify with verify (the last lines), and read `ver/dec` for what
# a speculative step costs on top of one decode step with the same kernel.

