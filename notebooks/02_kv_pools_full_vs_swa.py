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
# A sliding-window layer never looks further back than its window, so a serving engine need not keep its
# keys and values for the whole context. SGLang's `SWAKVPool` splits the KV cache in two: a **full** sub-pool
# for the full-attention layers (one slot per token of the context) and a much smaller **SWA** sub-pool for
# the sliding layers (one slot per token still inside the window).
#
# This notebook builds those pools for real (tensors on the CPU), steps a request through decode, and shows:
#
# 1. how `req_to_token` gives each token a **full-pool slot id**, and the allocator's mapping turns it into
#    an **SWA slot id** (`translate_loc_from_full_to_swa`);
# 2. the **dummy slot 0** and the **-1 sentinel** at the end of the mapping;
# 3. **eviction**: once a token leaves the window its SWA slot is freed, its full slot stays;
# 4. what this saves for real models at 8k / 32k / 128k context.

# %%
# %matplotlib inline
import torch

from swa_kit.configs import load_all
from swa_kit.memory import per_token_summary, savings
from swa_kit.tables import print_table
from swa_kit.viz.pools import plot_mapping, plot_pool_occupancy
from swa_kit.widgets.pools import decode_step_state, decode_stepper
from swa_kit.workers import MODEL_KINDS, build_workers, run_decode

# %% [markdown]
# ## 1. A tiny hybrid model and its pools
# Six layers: sliding, sliding, full, sliding, sliding, full; window 4 keys. The full sub-pool has 40 slots,
# the SWA sub-pool 12. The names are SGLang's.

# %%
workers = build_workers("hybrid_swa", size=40, size_swa=12, max_context_len=24)
pool = workers.target.token_to_kv_pool
allocator = workers.target.token_to_kv_pool_allocator
print("layer kinds:          ", MODEL_KINDS["hybrid_swa"].layer_types)
print("layers_mapping:       ", pool.layers_mapping, "  # layer -> (index in its sub-pool, is_swa)")
print("swa / full layer nums:", pool.swa_layer_nums, pool.full_layer_nums)
print("full K buffer (one layer):", tuple(pool.full_kv_pool.get_key_buffer(0).shape),
      "= [size + page_size, heads, dim]")
print("SWA  K buffer (one layer):", tuple(pool.swa_kv_pool.get_key_buffer(0).shape))

# %% [markdown]
# ## 2. The mapping, the dummy slot and the sentinel
# The allocator's mapping has `size + page_size` entries plus one trailing `-1`. Slot 0 is never handed out:
# it is the dummy/padding slot, and a token whose SWA slot was freed maps to it. A "no previous slot" id of
# `-1` indexes the last entry and so maps to `-1` again.

# %%
mapping = allocator.full_to_swa_index_mapping
print("mapping length:", mapping.numel(), "= size + page_size + 1; last entry:", int(mapping[-1]))
print("translate([-1, 0]) ->", pool.translate_loc_from_full_to_swa(torch.tensor([-1, 0])).tolist())

# %% [markdown]
# ## 3. Step a request through decode
# Prefill 6 tokens, then decode 10 more. After every step the SWA slots of tokens older than the window are
# freed (`free_swa`): the full pool grows with the context, the SWA pool stays at the window.

# %%
snapshots = run_decode(workers, prompt_len=6, decode_steps=10)
for snap in (snapshots[0], snapshots[-1]):
    print(f"step {snap.step}: full ids {snap.full_ids[0].tolist()}")
    print(f"         SWA ids  {snap.swa_ids[0].tolist()}   counts {snap.counts(0)}")
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
# Bytes per token are `kv_heads x (head_dim + v_head_dim) x dtype bytes` per layer. With one pool every layer
# keeps every token; with a hybrid pool the sliding (and Llama-4's chunked) layers keep only their window.
# **Assumption:** the SWA pool holds exactly the window per request. SGLang evicts periodically, with up to a
# page of slack, and sizes the SWA pool by a start-up ratio, so its real savings are a little smaller.
# Gemma-3 runs windows in its kernels but SGLang keeps it in one full-size pool: its "hybrid" column is what
# it *would* save. Every figure's source is in `data/models/<name>.json`.

# %%
specs = load_all()
print_table([per_token_summary(s) for s in specs])
print()
print_table([row.as_row() for s in specs for row in savings(s)])

# %% [markdown]
# Take-aways: Gemma-4 31B keeps about 10 GiB instead of 110 GiB for one 128k request; GPT-OSS halves its
# cache (half its layers slide, with a 128-key window); Llama-4 Scout saves nothing until the context passes
# one 8192-token chunk.
