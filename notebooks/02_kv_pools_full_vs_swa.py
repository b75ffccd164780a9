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
# # 02 · KV pools: one full pool vs a hybrid full + SWA pool
#
# **Goal.** In about 24 minutes you will be able to (1) follow one token from its position in a request to its
# slot in the full pool and in the SWA pool, (2) say what eviction frees and what it keeps, and (3) tell the
# memory a hybrid pool saves under SGLang's default sizing from the per-request minimum it is often quoted at.
# Two exercises (2.1, 2.2) check you on the way, each before the cells that give its answer away; the exercise
# version of this notebook leaves those cells out (see [docs/workshop.md](../docs/workshop.md)).
#
# A [sliding-window](../docs/glossary.md#sliding-window) layer never looks further back than its window, so a
# serving engine need not keep its keys and values (its [KV cache](../docs/glossary.md#kv-cache)) for the
# whole context. SGLang's `SWAKVPool` splits the KV cache in two: a [full pool](../docs/glossary.md#full-pool)
# for the full-attention layers (one [slot](../docs/glossary.md#slot) per token of the context) and a smaller
# [SWA pool](../docs/glossary.md#swa-pool) for the sliding layers (a slot per token still inside the window).
#
# This notebook builds those pools for real (tensors on the CPU), steps a request through decode, and shows:
#
# 1. how `req_to_token` gives each token a **full-pool slot id**, and the allocator's
#    [mapping](../docs/glossary.md#full-to-swa-mapping) turns it into an **SWA slot id**
#    (`translate_loc_from_full_to_swa`);
# 2. the **dummy slot 0** and the **-1 sentinel** at the end of the mapping;
# 3. **eviction**: once a token leaves the window its SWA slot is freed, its full slot stays;
# 4. a widget that steps the request;
# 5. what a hybrid pool saves for real models: at SGLang's default sizing, and at best.

# %%
# %matplotlib inline
import torch

from swa_kit.lessons.workshop import pools, story
from swa_kit.models.configs import load_all
from swa_kit.launch.decide import default_sizing
from swa_kit.models.memory import per_token_summary, savings
from swa_kit.tables import print_table
from swa_kit.viz.pools import plot_mapping, plot_pool_occupancy
from swa_kit.widgets.pools import decode_step_state, decode_stepper
from swa_kit.engine.workers import MODEL_KINDS, build_workers, run_decode

# %% [markdown]
# ## 1. A tiny hybrid model and its pools
# Six layers, sliding and full, with a small window; the pool sizes are the arguments of `build_workers`
# below. The names are SGLang's ([page](../docs/glossary.md#page) size 1 here: one token per page).

# %%
workers = build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=24)
pool = workers.target.token_to_kv_pool
allocator = workers.target.token_to_kv_pool_allocator
kinds = MODEL_KINDS["hybrid_swa"]
print("layer kinds:          ", kinds.layer_types, "  window:", kinds.window_keys, "keys")
print("pool slots:            full", allocator.size_full, "  SWA", allocator.size_swa,
      "  page size", allocator.page_size)
print("layers_mapping:       ", pool.layers_mapping, "  # layer -> (index in its sub-pool, is_swa)")
print("swa / full layer nums:", pool.swa_layer_nums, pool.full_layer_nums)
print("full K buffer (one layer):", tuple(pool.full_kv_pool.get_key_buffer(0).shape),
      "= [size + page_size, heads, dim]")
print("SWA  K buffer (one layer):", tuple(pool.swa_kv_pool.get_key_buffer(0).shape))

# %% [markdown]
# ## 2. The mapping, the dummy slot and the sentinel
# The allocator's mapping has `size + page_size` entries plus one trailing `-1`. Slot 0 is never handed out:
# it is the dummy/padding slot, and a token whose SWA slot was freed maps to it.
#
# **Predict, then run.** A "no previous slot" id is written `-1`. What does `translate_loc_from_full_to_swa`
# return for the ids `[-1, 0]`? (Python indexing is a hint.)

# %%
mapping = allocator.full_to_swa_index_mapping
print("mapping length:", mapping.numel(), "= size + page_size + 1; last entry:", int(mapping[-1]))
print("translate([-1, 0]) ->", pool.translate_loc_from_full_to_swa(torch.tensor([-1, 0])).tolist())

# %% [markdown]
# `-1` indexes the last entry of the mapping and so maps to `-1` again; the dummy slot 0 maps to 0.
#
# ## 3. Step a request through decode
# The request prefills a few tokens, then decodes more, one per step (`pools.DECODE_RUN`). After every step
# the SWA slots of tokens older than the window are freed (`free_swa`).
#
# **Exercise 2.1 (predict).** After the last step, how many full-pool slots and how many SWA-pool slots does
# the request hold? Use the window printed in section 1.

# %%
print(pools.DECODE_RUN)
my_full, my_swa = ..., ...  # your answers: two slot counts after the last decode step
pools.check_slots_held(my_full, my_swa)

# %%
snapshots = run_decode(workers, **pools.DECODE_RUN)

# %% [markdown]
# The full pool grows with the context, the SWA pool stays at the window:

# %% tags=["solution"]
for snap in (snapshots[0], snapshots[-1]):
    print(f"step {snap.step}: full ids {snap.full_ids[0].tolist()}")
    print(f"         SWA ids  {snap.swa_ids[0].tolist()}   counts {snap.counts(0)}")
pools.check_slots_held(snapshots[-1].counts(0)["full_live"], snapshots[-1].counts(0)["swa_live"])

# %%
plot_pool_occupancy(snapshots)

# %% [markdown]
# Each line joins a token's full slot to its SWA slot. Evicted tokens point at the dummy slot 0: reading
# them from a sliding layer would read padding, which is fine only because the window never asks for them.

# %%
plot_mapping(snapshots[-1])

# %% [markdown]
# ## 4. The stepping widget
# Move the slider to step the request through decode. The callback is a plain function,
# `decode_step_state(step)`, so you can call it without widgets too:

# %%
print(decode_step_state(3)["text"])
decode_stepper()

# %% [markdown]
# ## 5. What a hybrid pool saves on real models
# Bytes per token are `kv_heads x (head_dim + v_head_dim) x dtype bytes` per layer, summed over the layers a
# pool holds. Every figure's source is in `data/models/<name>.json`:

# %%
specs = load_all()
print_table([per_token_summary(s) for s in specs])

# %% [markdown]
# Two savings answer two different questions:
#
# - **SGLang's default sizing** (what a server gets): the SWA pool is sized once, at start-up, at
#   `swa_full_tokens_ratio` SWA tokens per full-pool token (default 0.8, `story.SGLANG_SWA_FULL_TOKENS_RATIO`);
#   `swa_kit.launch.decide.default_sizing` computes the pools as SGLang's pool configurator does.
#   One full-pool token then costs `full_cell + ratio x swa_cell` bytes instead of one pool's
#   `full_cell + swa_cell`. (With `--max-running-requests` set and the radix cache off SGLang sizes the SWA
#   pool from the running requests instead; see
#   [docs/sglang-and-aiter.md](../docs/sglang-and-aiter.md#pools-and-their-sizing).)
# - **The per-request minimum** (the floor): one request whose sliding (and Llama-4's chunked) layers keep
#   exactly their window. It grows with the context and is the figure most often quoted for windows; a
#   server gets close to it only with a small ratio.
#
# SGLang builds no hybrid pool for some windowed models (Gemma-3: hybrid memory disabled), which then save
# nothing in SGLang whatever the minimum says.
#
# **Exercise 2.2.** For gpt-oss-20b and one request of 128k tokens, work out both savings in percent, by hand
# from the bytes-per-token table above: the per-request minimum, and SGLang's default sizing.

# %%
my_minimum_pct, my_default_pct = ..., ...  # your answers: two percentages
pools.check_hybrid_saving(my_minimum_pct, my_default_pct, model="gpt-oss-20b", context=128 * 1024)

# %% tags=["solution"]
minimum = pools.swa_pool_saving("gpt-oss-20b", 128 * 1024)
sizing = default_sizing("gpt-oss-20b")  # the pools SGLang sizes at start-up with default arguments
print(f"gpt-oss-20b, 128k: per-request minimum saves {100 * minimum.saved_fraction:.1f} % "
      f"({minimum.saved_gib:.2f} of {minimum.one_pool_bytes / 2**30:.2f} GiB); SGLang's default sizing: "
      f"{sizing['sglang_bytes_per_token']:,} instead of {sizing['one_pool_bytes_per_token']:,} bytes per token, "
      f"saves {sizing['sglang_saved_pct']} %")
pools.check_hybrid_saving(100 * minimum.saved_fraction, sizing["sglang_saved_pct"])

# %% [markdown]
# Every bundled model: SGLang's default sizing, then the per-request minimum at 8k / 32k / 128k (labelled
# `min_*`; for a model without a hybrid pool in SGLang it is what a hybrid pool *would* save).

# %%
print_table(story.memory_rows(tuple(s.name for s in specs)))
print()
print_table([{"model": r.model, "context": r.context, "one_pool_gib": r.as_row()["one_pool_gib"],
              "min_hybrid_gib": r.as_row()["hybrid_gib"], "min_saved_pct": r.as_row()["saved_pct"],
              "sglang_hybrid_pool": r.sglang_uses_hybrid} for s in specs for r in savings(s)])

# %% [markdown]
# ## Takeaway
#
# - A token has one full-pool slot for its whole life and an SWA slot only while a query can still attend it;
#   the allocator's mapping translates between them, and freed SWA slots map to the dummy slot 0.
# - The per-request minimum grows with the context (Llama-4 Scout's chunked layers save nothing until the
#   context passes one chunk); SGLang's default sizing saves a fixed share per token, far smaller. Quote the
#   one that matches the launch, and check first that SGLang builds a hybrid pool for the model at all.
# - `swa-kit models` prints the same tables from the command line.
#
# Next: [03 · Draft/target pool sharing](03_draft_target_pool_sharing.ipynb): which of these pools a
# speculative-decoding draft reads. Terms: [glossary](../docs/glossary.md).
