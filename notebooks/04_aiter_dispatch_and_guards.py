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
# # 04 · aiter dispatch, guard rails, and what the kernels really attend
#
# **Goal.** In about 32 minutes you will be able to (1) read which kernel SGLang's aiter backend runs for
# each layer and forward mode, and with which window argument; (2) make the seed's guard fire, and say what
# each way out costs; (3) measure which keys a kernel really attends, and tell a short argument from a wrong
# kernel. Three exercises check you on the way, the first two before any plan is printed. Terms link to the kit's
# [glossary](../docs/glossary.md).
#
# SGLang's [aiter](../docs/glossary.md#aiter) [attention backend](../docs/glossary.md#attention-backend) picks a
# kernel per [forward mode](../docs/glossary.md#forward-modes) (prefill, extend, decode,
# [target verify](../docs/glossary.md#target-verify), draft extend, draft decode) and passes each one the
# layer's window in that kernel's own convention ([window conventions](../docs/glossary.md#window-conventions)).
# The kernels: aiter's Triton [unified attention](../docs/glossary.md#unified) (one kernel for every mode, over
# a [block table](../docs/glossary.md#page), with a window argument);
# [`paged_attention_ragged`](../docs/glossary.md#paged-attention-ragged) (the default decode, no window
# argument); the [CK](../docs/glossary.md#ck) prefill `mha_batch_prefill_func`. This notebook
#
# 1. prints the **plan** for Gemma-4 31B in every forward mode: kernel, window argument, page table;
# 2. makes the **seed's guard** fire (Gemma-3 on the default paged decode) and prices each way past it;
# 3. **measures** which keys every call site really attends (one-hot values, read the weights back), on
#    aiter's own Triton kernel, and tells a short argument from a wrong kernel;
# 4. checks every path that runs here against the float64 reference.
#
# Without an AMD GPU, aiter's Triton kernels run in **Triton's CPU interpreter**; the
# [HIP](../docs/glossary.md#hip) / CK-only ops (`paged_attention_ragged`, `mha_batch_prefill_func`) and SGLang's
# legacy verify kernel are **EMULATED** from their documented semantics, and labelled so wherever they appear.
# Every result names its [tier](../docs/glossary.md#tier).

# %%
# %matplotlib inline
from IPython.display import display

from swa_kit.attention.paths import get_path
from swa_kit.engine import routing
from swa_kit.measure.explain import explain
from swa_kit.measure import probe
from swa_kit.lessons.workshop import dispatch
from swa_kit.lessons.report import announce_all
from swa_kit.tables import print_table
from swa_kit.viz.probe import draw_probe, draw_probe_table


def how_obtained(tier: str) -> str:
    """Say, beside every row, whether a kernel ran or an emulation stood in for it."""
    return {"emulated": "EMULATION (the op's documented semantics, not the op)",
            "aiter-triton-interpreter": "ran: aiter 0.1.7's Triton kernel, CPU interpreter",
            "aiter-triton-gpu": "ran: aiter 0.1.7's Triton kernel, GPU"}.get(tier, f"ran ({tier})")


# aiter's Triton kernels need the amd-aiter wheel (pip install "swa_kit[aiter]") and Triton: the cells that
# measure them ask the path itself, and without it say why and skip those measurements.
aiter_runs, aiter_why = get_path("aiter_triton_unified").available()
print(f"aiter's Triton kernels: {aiter_why}" if aiter_runs else
      f"aiter's Triton kernels cannot run here, so sections 3 and 4 skip them: {aiter_why}")


# %% [markdown]
# ## Predict first
#
# Two predictions before any plan is printed: the rest of the notebook answers them.
#
# **Exercise 4.1 (predict).** The seed's guard refuses a sliding layer that reaches `paged_attention_ragged`,
# the decode kernel that takes no window (section 2). Plan Gemma-3 27B's decode with
# `routing.plan("gemma3-27b", "decode", strict=False)`: how many layers does the guard refuse? Then take the
# way out the message names, `env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}`: how many keys does a sliding layer
# now attend (its `effective_keys`), for the 1024 it means?

# %%
my_refused_layers = ...  # your answer: a number of layers
my_keys_after = ...  # your answer: keys a sliding layer attends after the way out
dispatch.check_guard_way_out(my_refused_layers, my_keys_after)

# %% [markdown]
# **Exercise 4.2 (predict).** A call site is a place in SGLang's aiter backend that calls an attention kernel;
# the kit names them in `routing.SITES`, each with its kernel and the window expression SGLang passes
# (`window_expr`; `sws` is the layer's `sliding_window_size`, W - 1). For a layer meant to attend **W = 5**
# keys (`sws = 4`), which sites attend **4** keys (one short)? Predict from the expressions; section 3
# measures them with `probe.probe_sglang_sites(5)` (its rows' `site` and `attended_keys`).

# %%
for name, site in routing.SITES.items():
    print(f"{name:22s} {site.kernel:24s} window argument {site.window_expr}")
my_short_sites = ...  # your answer: a list of site names (keys of routing.SITES)
dispatch.check_one_key_short_sites(my_short_sites)

# %% [markdown]
# ## 1 · The plan for Gemma-4 31B
#
# Gemma-4 has a hybrid KV pool (50 sliding layers with a 1024-key window in an
# [SWA sub-pool](../docs/glossary.md#swa-pool), 10 full layers). The backend's
# [resolver](../docs/glossary.md#resolver) finds that `SWAKVPool`, so `use_sliding_window_kv_pool` is true and
# **every mode** is forced onto Triton `unified_attention`, reading the **translated SWA page table** for
# sliding layers. Consecutive layers with the same route share a row. The speculative modes are shown with
# a [FROZEN_KV MTP](../docs/glossary.md#frozen-kv-mtp) draft.

# %%
for mode, spec in [("prefill", "none"), ("extend", "none"), ("decode", "none"), ("verify", "frozen_kv_mtp"),
                   ("draft_extend", "frozen_kv_mtp"), ("draft_decode", "frozen_kv_mtp")]:
    print(explain(routing.plan("gemma4-31b", mode, spec=spec)), end="\n\n")

# %% [markdown]
# Note the window argument. A layer's `sliding_window_size` (SGLang's
# [`RadixAttention`](../docs/glossary.md#radixattention) field) is `W - 1`: 1023 for Gemma's 1024 keys; a
# model's window of 0 (or none) is stored as -1, no window. SGLang passes `(sws - 1, 0)` = `(1022, 0)` to
# `unified_attention`, which the kernel reads as `left + 1 = 1023` keys. Section 3 measures it.
#
# The FROZEN_KV MTP draft borrows the target's last sliding (58) and last full (59) layer caches. With an
# [EAGLE](../docs/glossary.md#eagle) draft and [`topk > 1`](../docs/glossary.md#topk) (a tree of drafts),
# target verify leaves the unified path for SGLang's Triton `extend_attention_fwd`. That kernel *does* take a
# `sliding_window_size` argument, but SGLang's aiter backend does not pass it, and hands it **untranslated**
# slot ids: the plan refuses it.

# %%
refused = routing.plan("gemma4-31b", "verify", spec="eagle", topk=4, strict=False)
print(explain(refused))

# %% [markdown]
# ## 2 · The seed's guard: Gemma-3 on the default decode path
#
# Gemma-3 uses a window in its kernels but SGLang gives it one full-size pool (hybrid SWA memory is disabled
# for it: no `SWAKVPool`), so nothing forces unified attention: decode goes to `paged_attention_ragged`, which
# takes no window. Before PR #38756 that silently attended the whole context; the seed's
# [guard](../docs/glossary.md#guard) raises instead, and names its ways out.
#
# Exercise 4.1 asked what the guard refuses here and what its way out attends; the guard's own message first:

# %%
try:
    routing.plan("gemma3-27b", "decode")
except ValueError as error:  # DispatchGuardError subclasses ValueError, like SGLang's guard
    print(type(error).__name__, ":", error)

# %% [markdown]
# Setting the environment variable changes the plan; nothing is clamped or dropped. Read `effective_keys`:

# %%
after = routing.plan("gemma3-27b", "decode", env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
print(explain(after))

# %% tags=["solution"]
way_out = dispatch.guard_and_way_out("gemma3-27b")
dispatch.check_guard_way_out(way_out["refused_layers"], way_out["keys_after_way_out"])

# %% [markdown]
# **Each way out has a price; none is simply "the correct way".**
#
# - `SGLANG_USE_AITER_UNIFIED_ATTN=1` routes decode to `unified_attention`, which takes a window, but SGLang's
#   call passes `(sws - 1, 0)`: every sliding layer attends **one key short** (section 3 measures it).
# - `--attention-backend triton` leaves aiter altogether; SGLang's Triton backend has its own one-key-short
#   decode window (closed PR #32087; issue #34354 asks for one convention).
#
# Both are far closer than the whole context, and neither is exact. The same from a shell:
# `swa-kit explain --model gemma3-27b --mode decode` (exit 3, refused) and
# `swa-kit explain --model gemma3-27b --mode decode --env SGLANG_USE_AITER_UNIFIED_ATTN=1`.
#
# ## 3 · Which keys does each call site really attend?
#
# The probe sets every query to zero, so each attended key gets weight `1/n`, and gives key position `p`
# the one-hot value `e_p`: the output *is* the weight row. It runs each aiter call site with the argument
# SGLang passes for a layer meant to attend **W = 5** keys (`sliding_window_size = 4`).
# Command: `swa-kit probe --sglang-sites --keys 5`.
#
# Exercise 4.2's measurement:

# %%
rows = probe.probe_sglang_sites(5)
print_table([{**{k: v for k, v in r.to_json().items() if k not in ("modes", "skipped")},
              "how obtained": how_obtained(r.tier) if r.masks else "not run here (see above)"} for r in rows])
announce_all(r for r in rows if r.attended_keys is not None)

# %% tags=["solution"]
if aiter_runs:
    display(dispatch.check_one_key_short_sites([r.site for r in rows if r.attended_keys == 4]))
else:
    print(f"Exercise 4.2's check skipped: the unified sites were not measured ({aiter_why})")

# %% [markdown]
# **Finding (measured on aiter 0.1.7's Triton `unified_attention` kernel, in the CPU interpreter here):**
# every unified call site (extend, decode, verify, draft extend) attends **W - 1 = 4** keys for a layer
# meant to attend 5: SGLang's `(sws - 1, 0)` is **one key short**. SGLang 0.5.23 imports the kernel from the
# newer module `aiter.ops.triton.attention.unified_attention`; its window rule (`1 + window_size[0]` keys)
# is the same, but the kernel measured here is 0.1.7's. The same kernel given the kit's own converter value
# `(W - 1, 0)` attends exactly W keys (`swa-kit probe --path aiter_triton_unified --keys 5`, last figure
# below), so the kernel is right and the argument is short.
#
# The other rows are **EMULATIONS**, not measurements of the real ops: the CK prefill (`extend.ck`, passed
# `(sws, -1)`) attends exactly 5 by its documented convention; the paged decode and the legacy verify take no
# window, so they attend the whole context: those are the routes the guards refuse.
#
# The measured masks, beside the intended ones (red x: disagreement; each row names its tier):

# %%
display(draw_probe_table(rows, "decode"))
if aiter_runs:
    display(draw_probe(next(r for r in rows if r.site == "extend.unified")))
    display(draw_probe(probe.probe_path("aiter_triton_unified", 5)))
else:
    print(f"aiter's unified_attention not drawn: {aiter_why}")

# %% [markdown]
# ### SGLang's own lines
# The guard, the resolver and the unified call site explained above, as SGLang writes them. The kit does not copy
# SGLang's code: each cell reads the function from the SGLang installed in this Python (parsed, not imported: the
# backend imports GPU-only modules) and prints it with its file and line. Without SGLang it says which file,
# function and line of SGLang 0.5.23 to open.

# %%
from swa_kit.lessons.sglang_source import sglang_source, unified_site_fix

print(sglang_source("reject_paged_decode_sliding_window"))  # section 2's guard
print()
print(sglang_source("resolve_swa_kv_pool"))  # notebook 03's resolver, which picks the pool the sites read

# %% [markdown]
# One of the four unified call sites, in `forward_decode`: the window argument that section 3 measured one key
# short, and the translated SWA page table that the resolver made right for a FROZEN_KV MTP draft.

# %%
print(sglang_source("unified_decode_call_site"))

# %% [markdown]
# What PR #38756 changed there, and the one-line change that would make every unified site attend the window
# (the kit's statement, each argument read back through `swa_kit.window`):

# %%
print(unified_site_fix(1024))

# %% [markdown]
# The other way out, `--attention-backend triton`, builds its decode window from `min(seq_len,
# sliding_window_size)` keys, and `sliding_window_size` is `W - 1`: one key short as well.

# %%
print(sglang_source("triton_window_buffer"))

# %% [markdown]
# **Exercise 4.3 (extension).** Which layers does the short argument hit? Plan Gemma-4 31B's decode with
# `routing.plan("gemma4-31b", "decode")` and list the layers whose `effective_keys` is one less than their
# `intended_keys`. (The same for Gemma-3 after 4.1's way out: call the check with `model="gemma3-27b",
# env=dispatch.UNIFIED_FIX`.)

# %%
my_short_layers = ...  # your answer: a list of layer indices
dispatch.check_one_key_short_layers(my_short_layers)

# %% tags=["solution"]
short_layers = dispatch.one_key_short_layers("gemma4-31b", "decode")
print(len(short_layers), "layers one key short:", short_layers)
dispatch.check_one_key_short_layers(short_layers)

# %% [markdown]
# ## 4 · Every runnable path against the reference
#
# Each path that runs on this machine, on a fresh random paged batch per declared mode, with the kit's
# window argument for 5 keys and finite garbage in the freed slots (aiter's tiles load them), against the
# float64 reference. Paths that take no window are compared without one. An emulated path agreeing with the
# reference shows the emulation computes what it declares, nothing about the real op. (It also answers the
# second half of exercise 4.2: given the kit's argument, aiter's kernel computes the right window.)

# %%
table = probe.agreement(5)
print_table([{**r, "how obtained": how_obtained(r["tier"])} for r in table])
announce_all(r for r in table if isinstance(r["max_abs_err"], float))

# %% [markdown]
# On a GPU the same table comes from the compiled kernels: `python -m pytest tests/gpu -q -s` prints each
# path's max error and re-measures the one-key-short finding on the device.
#
# ## 5 · The defaults you will meet
#
# Everything above passed `--attention-backend aiter`. A launch without it gets SGLang's per-model default on
# ROCm: GPT-OSS keeps aiter (its sliding layers: a 128-key window), Gemma-4 moves to SGLang's Triton backend.
# The audit of each launch without the flag, the backend it picks (and the SGLang file that picks it), and what
# a sliding layer's decode attends there:

# %%
print_table(dispatch.default_launch_rows(("gpt-oss-120b", "gemma4-31b")))

# %% [markdown]
# Neither default gives a sliding layer its whole window at decode: GPT-OSS on aiter goes through the unified
# call site, `(sws - 1, 0)`; Gemma-4 on Triton keeps the newest `sws` keys counting the query itself
# (`triton_backend.py`, `update_sliding_window_buffer`). Same symptom, two mechanisms. Notebook 06 audits the
# Triton way out on a real report.
#
# ## Takeaway
#
# - The aiter backend's route depends on the pool: a model with an SWA pool (Gemma-4, GPT-OSS) is forced onto
#   `unified_attention` in every mode; a windowed model with one pool (Gemma-3) decodes on
#   `paged_attention_ragged`, which takes no window. The seed's guard turns that silent failure into an error.
# - A guard's way out is a route with a price, not a cure: the unified route attends one key short at
#   SGLang's call sites, and SGLang's Triton backend has its own one-key-short decode.
# - Know the default a learner's launch gets: on ROCm GPT-OSS decodes on aiter's unified kernel (127 of 128
#   keys), Gemma-4 on SGLang's Triton backend (1023 of 1024).
# - To know what a kernel attends, measure it: the probe tells a short *argument* (SGLang's `(sws - 1, 0)`)
#   from a wrong *kernel*. Emulated rows show documented semantics only, and say so.
