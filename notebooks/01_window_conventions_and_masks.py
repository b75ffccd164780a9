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
# A sliding-window layer lets each query attend only its most recent keys. That one sentence hides a
# trap: every API counts "the window" differently, usually by one, and a serving engine passes the same
# model's window through several of them. This notebook:
#
# 1. shows why sliding windows matter at long context (memory and compute);
# 2. fixes **one unit** for the whole kit and shows the value each API wants for real models;
# 3. draws what happens when a value is passed without converting it (one key more, one key less);
# 4. draws the attention mask of every forward mode a serving engine runs, speculative verify included;
# 5. looks at a 128k-token mask block by block, without ever building it;
# 6. lets you explore masks with a widget;
# 7. exports a mask to PyTorch's FlexAttention and checks it against plain masked attention.
#
# All logic lives in `swa_kit` (tested there); the notebook only calls it.

# %%
# %matplotlib inline
import warnings

import torch
from IPython.display import display

from swa_kit.configs import load_model
from swa_kit.masks import forward_mask
from swa_kit.memory import savings
from swa_kit.tables import print_table
from swa_kit.viz.masks import block_view_figure, conventions_figure, mask_figure
from swa_kit.widgets.masks import mask_explorer
from swa_kit.window import CONVENTIONS, Window, naive_reads

# %% [markdown]
# ## 1. Why sliding windows
#
# Attention's cost grows with the context twice over. **Memory**: a full-attention layer keeps keys and
# values for every token of the context. **Compute**: a prefill of `L` tokens scores about `L²/2`
# (query, key) pairs per layer. A sliding layer with a window of `W` keys keeps at most `W` tokens and
# scores at most `L·W` pairs. Models such as Gemma 3/4 and GPT-OSS mix a few full layers with many sliding
# ones, and SGLang gives the sliding layers their own small KV pool.
#
# KV-cache memory per request, one pool for every layer vs a hybrid full + sliding pool (`swa_kit.memory`,
# model figures from `data/models` with their sources; the hybrid figure assumes perfect eviction):

# %%
print_table([row.as_row() for name in ("gemma3-27b", "gemma4-31b", "gpt-oss-120b")
             for row in savings(load_model(name))])

# %% [markdown]
# Compute, counted exactly from the mask at 128k tokens (the block view of section 5): scored pairs of a
# full layer vs a Gemma sliding layer (1024 keys) vs a GPT-OSS sliding layer (128 keys).

# %%
L = 131072
for label, window in (("full", None), ("Gemma, 1024 keys", 1024), ("GPT-OSS, 128 keys", 128)):
    view = forward_mask("prefill", L, L, window).block_view(128)
    print(f"{label:18} {view.total_pairs:>16,} pairs   {int(view.needed.sum()):>7,} of {view.counts.size:,} "
          f"128x128 tiles read")

# %% [markdown]
# ## 2. One unit, many spellings
#
# Inside the kit a window is **`keys`: the number of keys a query attends, counting itself** (`None` = no
# window). A query at position `q` sees key `k` when `q - keys < k <= q`. That is Hugging Face's
# `sliding_window`. Every other convention exists only at the edge, in `swa_kit.window`:
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
#
# The windows of three real models, read from their configs, written the way each API wants them:

# %%
rows = []
for name in ("gemma3-27b", "gpt-oss-120b", "gemma4-31b"):
    model = load_model(name)
    keys = model.window_keys(model.swa_attention_layer_ids[0])
    rows.append({"model": model.display_name, "keys": keys, **Window(keys).everywhere()})
print_table(rows, ["model", "keys", *CONVENTIONS])

# %% [markdown]
# The same converters, from the command line: `swa-kit window --from sglang 1023` prints this row for
# Gemma, `--json` as JSON.

# %% [markdown]
# ## 3. The off-by-one trap
#
# Suppose you hold Gemma's config value, `sliding_window = 1024`, and pass it to every API **as is**. The
# APIs that count `W − 1` now attend **1025** keys: one key more than the model was trained with. Each panel
# below is the mask you meant (the last four queries of a context just longer than the window; wide
# windows show only the columns near the window edge and the diagonal, dotted lines mark the gap), and
# `+` marks the key the API attends in addition.

# %%
conventions_figure(1024, "hf")

# %% [markdown]
# The opposite mistake: you hold SGLang's `sliding_window_size` (`W − 1` = 127 for GPT-OSS) and pass it to
# an API that counts `W`. Now `paged_attention_v1` attends **127** keys, one short (`x` marks the key it
# misses). With a window of one key the same mistake passes 0, which `paged_attention_v1` reads as "no
# window at all".

# %%
conventions_figure(128, "sglang")

# %%
print_table([{"api": r.convention, "wants": r.wanted, "given": r.passed,
              "attends": "rejected" if r.error else ("all (off)" if r.keys is None else r.keys)}
             for r in naive_reads(1, "sglang")])

# %% [markdown]
# This is not hypothetical. SGLang stores `sliding_window_size = W − 1`, its aiter CK prefill passes
# `(sws, −1)` (W keys), but its Triton `unified_attention` paths pass `(sws − 1, 0)`. Read through the kit's
# converter, that is one key short:

# %%
sws = Window(1024).to("sglang")
print("CK prefill attends     ", Window.from_convention("aiter_ck", (sws, -1)).keys, "keys")
print("unified paths attend   ", Window.from_convention("aiter_unified", (sws - 1, 0)).keys, "keys")

# %% [markdown]
# (FACTS.md §4 marks the unified case as inferred from the code; the kit's probes measure it on the real
# kernels in a later notebook.)
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
# **Extend**: new tokens after a cached prefix (prefix caching, chunked prefill). Query `i` sits at
# position `prefix + i`, so the mask is the bottom rows of a prefill.

# %%
mask_figure(forward_mask("extend", 5, 16, 4), block=4)

# %% [markdown]
# **Decode**: one query, the last position. With a window, only the last `W` keys matter: this is why the
# decode kernel must be told the window (the seed's guard exists because one kernel was not).

# %%
mask_figure(forward_mask("decode", 1, 16, 4))

# %% [markdown]
# **Target verify, chain**: the target model scores a chain of draft tokens in one pass. A chain is
# causal, so its mask is an extend mask over the draft tokens.

# %%
mask_figure(forward_mask("verify", 4, 14, 4))

# %% [markdown]
# **Target verify, EAGLE tree** (topk > 1): the draft tokens form a tree. Each sits at position
# `prefix + depth` (siblings share a position) and attends the committed prefix within the window plus
# its own ancestors, never a sibling. Columns right of the black line are draft tokens in the order
# given; here a complete binary tree, parents `[-1, 0, 0, 1, 1, 2, 2]`.

# %%
tree = forward_mask("tree", 7, 15, 4)
print("parents", tree.parents, "positions", tree.q_positions().tolist())
mask_figure(tree)

# %% [markdown]
# **Chunked local attention** (Llama 4), a contrast: the context is cut into fixed chunks and a query
# sees only its own chunk. The first query of a chunk sees just itself, whereas a sliding window always
# sees `W` keys once the context is long enough.

# %%
mask_figure(forward_mask("chunked", 16, 16, None, chunk=6))

# %% [markdown]
# The same from the command line: `swa-kit mask --mode tree --kv-len 15 --q-len 7 --window 4` prints the
# grid, `--json` the 0/1 matrix, `--png FILE` the picture.
#
# ## 5. A 128k-token mask, block by block
#
# At 131072 tokens the dense boolean mask would take 17 GB. Kernels do not need it: they work in tiles
# (128 x 128 here, FlexAttention's default) and only ask, per tile, "skip, mask element by element, or
# take whole?". `block_view` answers that from each row's attended range, in well under a second
# (`benchmarks/block_view.py` measures time and memory).

# %%
gemma_view = forward_mask("prefill", L, L, 1024).block_view(128)
print(gemma_view.summary())
print("query block 100 reads KV blocks", gemma_view.kv_blocks(100).tolist())
block_view_figure(gemma_view, title="Gemma sliding layer, 131072 tokens, window 1024")

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

# %% [markdown]
# ## What to remember
#
# - Think in **keys attended, counting the query**; convert only at the API boundary, with a named
#   converter (`swa_kit.window`).
# - `W` vs `W − 1` is a one-key error that no shape check catches: the output is plausible and wrong.
# - A mask is defined by the positions of its queries and keys; speculative verify changes the positions
#   (a tree shares them between siblings), not the window rule.
# - At long context, think in tiles: a sliding window reads a thin band of them.
