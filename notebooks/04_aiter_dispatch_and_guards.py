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
# SGLang's aiter backend picks a kernel per forward mode and passes each one the layer's window in that
# kernel's own convention. This notebook
#
# 1. prints the **plan** for Gemma-4 31B in every forward mode: kernel, window argument, page table;
# 2. makes the **seed's guard** fire (Gemma-3 on the default paged decode) and shows the correct ways past it;
# 3. **measures** which keys every call site really attends (one-hot values, read the weights back), on
#    aiter's own Triton kernel, and settles whether the unified paths attend one key short;
# 4. checks every path that runs here against the float64 reference.
#
# Without an AMD GPU, aiter's Triton kernels run in **Triton's CPU interpreter**; CK/HIP-only ops
# (`paged_attention_ragged`, `mha_batch_prefill_func`) are **emulated**. Every result names its tier.

# %%
# %matplotlib inline
from IPython.display import display

from swa_kit import dispatch, probe
from swa_kit.report import announce_all
from swa_kit.tables import print_table
from swa_kit.viz.probe import draw_probe, draw_probe_table

# %% [markdown]
# ## 1 · The plan for Gemma-4 31B
#
# Gemma-4 has a hybrid KV pool (50 sliding layers with a 1024-key window in an SWA sub-pool, 10 full
# layers). The backend's resolver finds that `SWAKVPool`, so `use_sliding_window_kv_pool` is true and
# **every mode** is forced onto Triton `unified_attention`, reading the **translated SWA page table** for
# sliding layers. Consecutive layers with the same route share a row.

# %%
for mode, spec in [("prefill", "none"), ("extend", "none"), ("decode", "none"), ("verify", "frozen_kv_mtp"),
                   ("draft_extend", "frozen_kv_mtp"), ("draft_decode", "frozen_kv_mtp")]:
    print(dispatch.explain(dispatch.plan("gemma4-31b", mode, spec=spec)), end="\n\n")

# %% [markdown]
# Note the window argument: the layer's `sliding_window_size` is 1023 (Gemma's 1024 keys minus one), and
# SGLang passes `(sws - 1, 0)` = `(1022, 0)` to `unified_attention`, which the kernel reads as
# `left + 1 = 1023` keys. Section 3 measures it.
#
# The FROZEN_KV MTP draft borrows the target's last sliding (58) and last full (59) layer caches. With
# EAGLE and `topk > 1`, target verify leaves the unified path for SGLang's `extend_attention_fwd`, which
# gets **no window** and **untranslated** slot ids: the plan refuses it.

# %%
refused = dispatch.plan("gemma4-31b", "verify", spec="eagle", topk=4, strict=False)
print(dispatch.explain(refused))

# %% [markdown]
# ## 2 · The seed's guard: Gemma-3 on the default decode path
#
# Gemma-3 uses a window in its kernels but SGLang gives it one full-size pool (no `SWAKVPool`), so nothing
# forces unified attention: decode goes to `paged_attention_ragged`, which takes no window. Before
# PR #38756 that silently attended the whole context. The planner raises before any kernel runs:

# %%
try:
    dispatch.plan("gemma3-27b", "decode")
except ValueError as error:  # DispatchGuardError subclasses ValueError, like SGLang's guard
    print(type(error).__name__, ":", error)

# %% [markdown]
# The correct way past it is the one the message names: route decode through `unified_attention`, which
# takes a window (or pick another attention backend). Setting the environment variable changes the plan;
# nothing is clamped or dropped:

# %%
print(dispatch.explain(dispatch.plan("gemma3-27b", "decode", env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})))

# %% [markdown]
# The same from a shell: `swa-kit explain --model gemma3-27b --mode decode` (exit 3, refused) and
# `swa-kit explain --model gemma3-27b --mode decode --env SGLANG_USE_AITER_UNIFIED_ATTN=1`.
#
# ## 3 · Which keys does each call site really attend?
#
# The probe sets every query to zero, so each attended key gets weight `1/n`, and gives key position `p`
# the one-hot value `e_p`: the output *is* the weight row. We run each aiter call site with the argument
# SGLang passes for a layer meant to attend **W = 5** keys (`sliding_window_size = 4`).
# Command: `swa-kit probe --sglang-sites --keys 5`.

# %%
rows = probe.probe_sglang_sites(5)
print_table([{k: v for k, v in r.to_json().items() if k not in ("modes", "skipped")} for r in rows])
announce_all(r for r in rows if r.attended_keys is not None)

# %% [markdown]
# **Finding (measured on aiter's own Triton `unified_attention` kernel, in the CPU interpreter here):**
# every unified call site (extend, decode, verify, draft extend) attends **W - 1 = 4** keys for a layer
# meant to attend 5: SGLang's `(sws - 1, 0)` is **one key short**. The CK prefill's `(sws, -1)` attends
# exactly 5. The paged decode and the legacy verify attend the whole context: those are the routes the
# guards refuse. The same kernel given the kit's own converter value `(W - 1, 0)` attends exactly W keys
# (`swa-kit probe --path aiter_triton_unified --keys 5`), so the kernel is right and the argument is short.
#
# The measured masks, beside the intended ones (red x: disagreement):

# %%
display(draw_probe_table(rows, "decode"))
display(draw_probe(next(r for r in rows if r.site == "extend.unified")))
display(draw_probe(probe.probe_path("aiter_triton_unified", 5)))

# %% [markdown]
# ## 4 · Every runnable path against the reference
#
# Each path that runs on this machine, on a fresh random paged batch per declared mode, with the kit's
# window argument for 5 keys and finite garbage in the freed slots (aiter's tiles load them), against the
# float64 reference. Paths that take no window are compared without one.

# %%
table = probe.agreement(5)
print_table(table)
announce_all(r for r in table if isinstance(r["max_abs_err"], float))

# %% [markdown]
# On a GPU the same table comes from the compiled kernels: `python -m pytest tests/gpu -q -s` prints each
# path's max error and re-measures the one-key-short finding on the device.
