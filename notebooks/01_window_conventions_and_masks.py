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
# # 01 · Window conventions and attention masks
#
# **Goal.** In about 40 minutes you will be able to (1) write one model's window the way each attention API
# wants it, (2) say what happens when a value is passed without converting it, and (3) read the attention
# mask of every forward pass a serving engine runs, speculative verify included. Three exercises check you on
# the way (1.1-1.3); each sits *before* the cell that gives its answer away. Run the exercise version
# (`swa-kit tour` writes it; see [docs/workshop.md](../docs/workshop.md)) if you want to try them first.
#
# A [sliding-window](../docs/glossary.md#sliding-window) layer lets each query attend only its most recent
# keys. That one sentence hides a trap: every API counts "the window" differently, usually by one (the
# [window conventions](../docs/glossary.md#window-conventions)), and a serving engine passes the same model's
# window through several of them. This notebook:
#
# 1. shows why sliding windows matter at long context (memory and compute);
# 2. fixes **one unit** for the whole kit and shows the value each API wants for real models;
# 3. draws what happens when a value is passed without converting it (one key more, one key less);
# 4. draws the attention [mask](../docs/glossary.md#mask) of every
#    [forward mode](../docs/glossary.md#forward-modes), speculative verify included;
# 5. (optional, after the takeaway) looks at a 128k-token mask block by block, without ever building it;
# 6. (optional) lets you explore masks with a widget;
# 7. (optional) exports a mask to PyTorch's FlexAttention and checks it against plain masked attention.
#
# All logic lives in `swa_kit` (tested there); the notebook only calls it. Every figure quoted about a model
# is printed by a cell, so it cannot drift from the library.

# %%
# %matplotlib inline
import warnings

import torch
from IPython.display import display

from swa_kit.lessons.workshop import story, windows
from swa_kit.models.configs import load_model
from swa_kit.masks import forward_mask
from swa_kit.tables import print_table
from swa_kit.viz.masks import block_view_figure, conventions_figure, mask_figure
from swa_kit.widgets.masks import mask_explorer
from swa_kit.window import CONVENTIONS, Window, naive_reads

# %% [markdown]
# ## 1. Why sliding windows
#
# Attention's cost grows with the context twice over. **Memory**: a
# [full-attention](../docs/glossary.md#full-attention) layer keeps keys and values (its
# [KV cache](../docs/glossary.md#kv-cache)) for every token of the context. **Compute**: a prefill of `L`
# tokens scores about `L²/2` (query, key) pairs per layer. A sliding layer with a window of `W` keys keeps at
# most `W` tokens and scores at most `L·W` pairs.
#
# Models mix the two kinds of layer. Whether the memory saving reaches a server depends on the serving engine:
# SGLang keeps a model's sliding layers in a separate, smaller [SWA pool](../docs/glossary.md#swa-pool) beside
# the [full pool](../docs/glossary.md#full-pool) only for some architectures (`sglang_hybrid_pool` below).
# Gemma-3 uses windows in its kernels, but SGLang disables hybrid memory for it and keeps every layer in one
# full-size pool. How much a hybrid pool saves is a start-up choice too: SGLang sizes the SWA pool once, at
# `swa_full_tokens_ratio` SWA tokens per full-pool token, for the whole server.
#
# **Predict, then run.** GPT-OSS alternates sliding and full layers; Gemma-4 has many more sliding layers
# than full ones. Which of the two saves the larger share at SGLang's default sizing, and is it closer to a
# fifth or to nine tenths? Then run the cell. It gives two savings, labelled: `saved_pct_sglang_default` is what
# a server launched with SGLang's defaults gets per token; `saved_pct_min_per_request_128k` is the floor one
# 128k-token request reaches when its sliding layers keep exactly their window
# (`swa_kit.lessons.workshop.story.memory_rows`; model figures from `data/models`, with their sources).

# %%
print(f"SGLang's default swa_full_tokens_ratio: {story.SGLANG_SWA_FULL_TOKENS_RATIO}")
rows = story.memory_rows(("gemma3-27b", "gemma4-31b", "gpt-oss-120b"))
print_table(rows, [c for c in rows[0] if not c.endswith("_layers")])  # layer counts: notebook 04 asks for one

# %% [markdown]
# The default saving is far below the per-request minimum, and in SGLang Gemma-3 gets neither (its minimum is
# what a hybrid pool *would* save): quote the figure that matches how the server was launched. Notebook 02
# builds both pools and watches them fill.
#
# Compute, counted exactly from the mask at 128k tokens (the block view of section 5): scored pairs of a full
# layer vs a Gemma-4 sliding layer vs a GPT-OSS sliding layer, each window read from the model's config.

# %%
L = 131072
sliding_keys = {name: load_model(name).window_keys(load_model(name).swa_attention_layer_ids[0])
           for name in ("gemma4-31b", "gpt-oss-120b")}
for label, window in (("full", None), *((f"{name}, {keys} keys", keys) for name, keys in sliding_keys.items())):
    view = forward_mask("prefill", L, L, window).block_view(128)
    print(f"{label:22} {view.total_pairs:>16,} pairs   {int(view.needed.sum()):>7,} of {view.counts.size:,} "
          f"128x128 tiles read")

# %% [markdown]
# ## 2. One unit, many spellings
#
# Inside the kit a window is **`keys`: the number of keys a query attends, counting itself** (`None` = no
# window). A query at position `q` sees key `k` when `q - keys < k <= q`. That is Hugging Face's
# `sliding_window`. Every other convention exists only at the edge, in `swa_kit.window`. The APIs:
# SGLang's [`RadixAttention`](../docs/glossary.md#radixattention) layer, FlashAttention, FlashInfer, the
# [aiter](../docs/glossary.md#aiter) kernels ([CK](../docs/glossary.md#ck) prefill, the Triton
# [unified](../docs/glossary.md#unified) kernel, `paged_attention_v1`), PyTorch's FlexAttention, and the
# sliding-window mask of attention-gym (FlexAttention's examples), which learners often copy:
#
# | API | parameter | W keys | off |
# | --- | --- | --- | --- |
# | Hugging Face config | `sliding_window` | W | None |
# | SGLang `RadixAttention` | `sliding_window_size` | W − 1 | −1 |
# | FlashAttention 2/3, aiter CK | `window_size=(left, right)` | (W − 1, 0) | (−1, −1) |
# | FlashInfer | `window_left` | W − 1 | −1 |
# | aiter Triton `unified_attention` | `window_size` | (W − 1, 0) | (−1, −1) |
# | aiter `paged_attention_v1` | `sliding_window` | W | 0 |
# | FlexAttention `mask_mod` | bound in `q − k < W` | W | None |
# | FlashAttention 4 | `window_size` | (W − 1, 0) | (None, None) |
# | attention-gym sliding-window `mask_mod` | `w` in `q − kv <= w` | W − 1 | None |
#
# Mind the last two rows: both are FlexAttention masks, but `q − k < W` keeps W keys and attention-gym's
# `q − kv <= w` keeps w + 1, so a model's W copied into attention-gym attends one key too many.
#
# The window of Gemma-3 27B's sliding layers, read from its config:

# %%
gemma3 = load_model("gemma3-27b")
gemma_keys = gemma3.window_keys(gemma3.swa_attention_layer_ids[0])
print(f"{gemma3.display_name}: sliding layers attend {gemma_keys} keys")
print("conventions:", ", ".join(CONVENTIONS))

# %% [markdown]
# **Exercise 1.1.** Write that window the way each API in `CONVENTIONS` wants it: a dict
# `{convention: value}`, a pair as a tuple `(left, right)`. Use the table, not the converter.

# %%
my_values = ...  # your answer: {"hf": ..., "sglang": ..., ...} for every name in CONVENTIONS
windows.check_window_everywhere(my_values)

# %% [markdown]
# The answer, with two more models, written by the kit's converters:

# %% tags=["solution"]
rows = []
for name in ("gemma3-27b", "gpt-oss-120b", "gemma4-31b"):
    model = load_model(name)
    keys = model.window_keys(model.swa_attention_layer_ids[0])
    rows.append({"model": model.display_name, "keys": keys, **Window(keys).everywhere()})
print_table(rows, ["model", "keys", *CONVENTIONS])
windows.check_window_everywhere(Window(gemma_keys).everywhere())

# %% [markdown]
# The same converters, from the command line: `swa-kit window --from hf 1024` prints such a row, `--json` as
# JSON.
#
# ## 3. The off-by-one trap
#
# **Exercise 1.2 (predict).** Suppose you hold Gemma-3's config value (`sliding_window`, printed above) and
# pass it to every API **as is**, without converting. How many keys does each API then attend? Answer with a
# dict `{convention: keys attended}`, then run the next cells to see it.

# %%
my_counts = ...  # your answer: {"hf": ..., "sglang": ..., ...}, keys each API attends given gemma_keys as is
windows.check_unconverted(my_counts, keys=gemma_keys)

# %% [markdown]
# Each panel below is the mask you meant (the last four queries of a context just longer than the window;
# wide windows show only the columns near the window edge and the diagonal, dotted lines mark the gap), and
# `+` marks a key the API attends in addition: every API that counts `W − 1` attends one key more than the
# model was trained with.

# %% tags=["solution"]
print_table([{"api": api, "attends": keys} for api, keys in windows.keys_if_passed_unconverted(gemma_keys).items()])
windows.check_unconverted(windows.keys_if_passed_unconverted(gemma_keys), keys=gemma_keys)

# %%
conventions_figure(gemma_keys, "hf")

# %% [markdown]
# The opposite mistake: you hold SGLang's `sliding_window_size` (`W − 1`) for GPT-OSS and pass it to an API
# that counts `W`. Now `paged_attention_v1` attends one key short (`x` marks the key it misses).

# %%
gpt_keys = sliding_keys["gpt-oss-120b"]
print(f"GPT-OSS: {gpt_keys} keys, SGLang holds sliding_window_size = {Window(gpt_keys).to('sglang')}")
conventions_figure(gpt_keys, "sglang")

# %% [markdown]
# **Predict, then run.** A window of one key is `sliding_window_size = 0` in SGLang. What does each API make
# of a 0? Guess, then run the table.

# %%
print_table([{"api": r.convention, "wants": r.wanted, "given": r.passed,
              "attends": "rejected" if r.error else ("all (off)" if r.keys is None else r.keys)}
             for r in naive_reads(1, "sglang")])

# %% [markdown]
# `paged_attention_v1` reads 0 as "no window at all", and the APIs that count `W` refuse a window of no keys.
# SGLang itself stores `sliding_window_size or -1`, so a window of 0 reaching `RadixAttention` becomes -1: off.
#
# This is not hypothetical. SGLang stores `sliding_window_size = W − 1`; its aiter CK prefill passes
# `(sws, −1)`, but its Triton `unified_attention` paths pass `(sws − 1, 0)`. Read through the kit's
# converter:

# %%
sws = Window(gpt_keys).to("sglang")  # GPT-OSS's window; notebook 04 asks the same of Gemma's
print(f"a {gpt_keys}-key layer: sliding_window_size = {sws}")
print("CK prefill attends     ", Window.from_convention("aiter_ck", (sws, -1)).keys, "keys")
print("unified paths attend   ", Window.from_convention("aiter_unified", (sws - 1, 0)).keys, "keys")

# %% [markdown]
# One key short. SGLang's aiter backend passes `(sws - 1, 0)` at its unified call sites (`aiter_backend.py`);
# notebook 04's probe measures what aiter's kernel then attends, on the kernel itself. Why that path is taken,
# and what the [guard](../docs/glossary.md#guard) added by [the seed](../docs/glossary.md#the-seed) refuses
# instead, is notebook 04's subject.
#
# ## 4. Masks in every forward mode
#
# A mask has one row per query of the forward pass and one column per key in the request's KV, oldest
# first. Queries always sit at the **end** of the KV. The red step is the window edge (the oldest key each
# query still sees), dashed lines are 4 x 4 tiles.
#
# **Prefill**: the whole prompt at once, no cache.

# %%
mask_figure(forward_mask("prefill", 12, 12, 4), block=4)

# %% [markdown]
# **Extend**: new tokens after a cached prefix (prefix caching,
# [chunked prefill](../docs/glossary.md#chunked-prefill)). Query `i` sits at
# position `prefix + i`, so the mask is the bottom rows of a prefill.

# %%
mask_figure(forward_mask("extend", 5, 16, 4), block=4)

# %% [markdown]
# **Decode**: one query, the last position. **Predict, then run:** with 16 keys in the KV and a window of 4,
# how many keys does the decode query attend, and which?

# %%
mask_figure(forward_mask("decode", 1, 16, 4))

# %% [markdown]
# With a window, only the last `W` keys matter: this is why the decode kernel must be told the window (the
# seed's guard exists because one kernel, [`paged_attention_ragged`](../docs/glossary.md#paged-attention-ragged),
# takes none).

# %% [markdown]
# **Target verify, chain.** In [speculative decoding](../docs/glossary.md#speculative-decoding) a small
# [draft](../docs/glossary.md#draft-and-target) model proposes a few tokens and the target model scores them
# all in one [target verify](../docs/glossary.md#target-verify) pass. A chain of drafts is causal, so its mask
# is an extend mask over the draft tokens.

# %%
mask_figure(forward_mask("verify", 4, 14, 4))

# %% [markdown]
# **Target verify, [EAGLE](../docs/glossary.md#eagle) tree** ([topk](../docs/glossary.md#topk) > 1): the
# draft tokens form a tree. Each sits at position `prefix + depth` (siblings share a position) and attends the
# committed prefix within the window plus its own ancestors, never a sibling. In the mask, columns
# `0 .. prefix - 1` are the committed tokens and column `prefix + i` is draft token `i`.
#
# **Exercise 1.3.** The tree of `windows.TREE`: a complete binary tree of 7 draft tokens (token `i`'s parent
# is `parents[i]`, -1 = the committed prefix), after 8 committed tokens, window 4 keys. Which KV columns does
# draft token 3 attend? Draw the tree on paper first.

# %%
print(windows.TREE)
my_columns = ...  # your answer: a list of KV column indices
windows.check_tree_keys(my_columns, token=3)

# %% [markdown]
# The tree's mask (columns right of the black line are the draft tokens, in the order given):

# %%
tree = forward_mask("tree", len(windows.TREE["parents"]), windows.TREE["prefix"] + len(windows.TREE["parents"]),
                    windows.TREE["window"], parents=windows.TREE["parents"])
print("parents", tree.parents, "positions", tree.q_positions().tolist())
mask_figure(tree)

# %% tags=["solution"]
print("draft token 3 attends columns", windows.tree_keys_seen(3))
windows.check_tree_keys(windows.tree_keys_seen(3), token=3)

# %% [markdown]
# **[Chunked local attention](../docs/glossary.md#chunked-local-attention)** (Llama 4), a contrast: the
# context is cut into fixed chunks and a query sees only its own chunk. **Predict, then run:** how many keys
# does the first query of the second chunk see?

# %%
mask_figure(forward_mask("chunked", 16, 16, None, chunk=6))

# %% [markdown]
# The first query of a chunk sees just itself, whereas a sliding window always sees `W` keys once the context
# is long enough.
#
# The same from the command line: `swa-kit mask --mode tree --kv-len 15 --q-len 7 --window 4` prints the
# grid, `--json` the 0/1 matrix, `--png FILE` the picture.

# %% [markdown]
# ## Takeaway
#
# - A hybrid pool saves what SGLang's sizing lets it save: at the default ratio far less than the
#   per-request minimum, and nothing for a model SGLang keeps in one pool (Gemma-3). Section 1 prints both.
# - Think in **keys attended, counting the query**; convert only at the API boundary, with a named
#   converter (`swa_kit.window`).
# - `W` vs `W − 1` is a one-key error that no shape check catches: the output is plausible and wrong.
# - A mask is defined by the positions of its queries and keys; speculative verify changes the positions
#   (a tree shares them between siblings), not the window rule.
#
# Next: [02 · KV pools, full vs SWA](02_kv_pools_full_vs_swa.ipynb), or the optional sections below first.
# Exercises and the workshop plans: [docs/workshop.md](../docs/workshop.md); terms: [glossary](../docs/glossary.md).

# %% [markdown]
# ## Optional: tiles at 128k, a widget, FlexAttention
#
# Outside the 40 minutes: at long context, think in tiles (a sliding window reads a thin band of them), explore
# masks with a widget, and check a mask exported to FlexAttention.
#
# ## 5. A 128k-token mask, block by block
#
# At `L` tokens the dense boolean mask would not fit in a laptop's memory (next cell). Kernels do not need
# it: they work in tiles (128 x 128 here, FlexAttention's default) and only ask, per tile, "skip, mask element
# by element, or take whole?". `block_view` answers that from each row's attended range, in well under a
# second (`benchmarks/block_view.py` measures time and memory).
#
# **Predict, then run.** How many KV tiles does one query block of a Gemma-4 sliding layer read?

# %%
print(f"dense bool mask at {L:,} tokens: {L * L / 1e9:.1f} GB")
gemma_view = forward_mask("prefill", L, L, sliding_keys["gemma4-31b"]).block_view(128)
print(gemma_view.summary())
print("query block 100 reads KV blocks", gemma_view.kv_blocks(100).tolist())
block_view_figure(gemma_view, title=f"Gemma-4 sliding layer, {L} tokens, window {sliding_keys['gemma4-31b']}")

# %% [markdown]
# ## 6. Explore
#
# Pick a mode, a window (or none) and lengths. The summary says how many keys each query attends and how
# the window is written for several APIs. (Run the notebook live to move the sliders; a headless run shows
# the initial state.)

# %%
display(mask_explorer(mode="tree", window=4, q_len=7, kv_len=15))

# %% [markdown]
# ## 7. Export to FlexAttention
#
# `ForwardMask.mask_mod()` is a FlexAttention `mask_mod(b, h, q_idx, kv_idx)`; for queries after a prefix it
# adds the offset itself. `ForwardMask.block_mask()` builds the `BlockMask`. FlexAttention runs on the CPU
# (unfused, without `torch.compile`), so we can check it against plain scaled-dot-product attention
# with the dense mask, on random inputs.

# %%
mask = forward_mask("extend", 48, 200, 64)
block_mask = mask.block_mask(block=16)
print(block_mask)

# %%
from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

torch.manual_seed(0)
q = torch.randn(1, 4, mask.q_len, 32)
k, v = torch.randn(2, 1, 4, mask.kv_len, 32).unbind(0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile": the unfused path is fine here
    flex_out = flex_attention(q, k, v, block_mask=block_mask)
sdpa_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense())
print("max |flex - sdpa| =", (flex_out - sdpa_out).abs().max().item())
print("tiles FlexAttention reads == tiles the block view needs:",
      bool((block_mask.to_dense()[0, 0].numpy().astype(bool) == mask.block_view(16).needed).all()))
