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
# # 03 · Draft and target: who reads which KV pool
#
# In speculative decoding a small **draft** proposes tokens and the **target** verifies them. In SGLang both
# share the request table (`req_to_token_pool`) and the token allocator, so a draft token gets a
# **full-pool slot id** from the target's allocator. What the draft does with that id depends on the
# algorithm:
#
# | algorithm | draft's own pool | draft reads | its sliding layers must translate against |
# | --- | --- | --- | --- |
# | EAGLE / EAGLE3 / STANDALONE | a plain `MHATokenToKVPool`, indexed by full ids | its own pool | nothing |
# | FROZEN_KV_MTP (Gemma-4) | a 64-token dummy, never written | the target's pool | the target's SWA pool |
#
# The attention backend asks a **resolver** which SWA pool to translate against. This notebook wires both
# kinds of draft on real pools, runs three resolvers, and reproduces each failure.

# %%
# %matplotlib inline
import torch

from swa_kit.errors import SlotError
from swa_kit.resolver import RESOLVERS, decision_table, read_keys, slots_read
from swa_kit.tables import print_table
from swa_kit.viz.pools import plot_slots_read
from swa_kit.workers import (
    FROZEN_KV_DUMMY_POOL_SIZE,
    SpeculativeAlgorithm,
    build_workers,
    request_ids_past_swa_buffer,
)

# %% [markdown]
# ## 1. The wiring
# Both drafts share the target's `req_to_token_pool` and allocator; only the pool differs. Note that SGLang's
# `is_eagle()` is true for FROZEN_KV_MTP too (and false for STANDALONE), so memory decisions must ask
# `is_frozen_kv_mtp()`, not `is_eagle()`.

# %%
for algo in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.FROZEN_KV_MTP):
    w = build_workers("hybrid_swa", algo, size=64, size_swa=16)
    t, d = w.target, w.draft
    print(f"{algo.name}: is_eagle()={algo.is_eagle()} is_frozen_kv_mtp()={algo.is_frozen_kv_mtp()}")
    print("  shares req_to_token_pool:", d.req_to_token_pool is t.req_to_token_pool,
          "| shares allocator:", d.token_to_kv_pool_allocator is t.token_to_kv_pool_allocator)
    print("  draft's own pool:", type(d.token_to_kv_pool).__name__,
          "rows", d.token_to_kv_pool.get_key_buffer(0).shape[0], "| writes KV:", d.writes_kv,
          "| reads:", w.pool_name(d, d.kv_pool_read), "| layer 0 reads target layer", d.source_layer(0))
print("FROZEN_KV dummy pool size:", FROZEN_KV_DUMMY_POOL_SIZE)

# %% [markdown]
# ## 2. Three resolvers
# * **legacy** (before SGLang PR #38756): the active pool if it is an SWA pool, else nothing.
# * **naive**: always the pool the shared allocator serves.
# * **fixed** (SGLang 0.5.23): active SWA pool → it; EAGLE-family draft → nothing; else the allocator's pool
#   if it is an SWA pool.
#
# ## 3. The decision table
# Every resolver for every (role, algorithm, model kind), computed on real pools. `wanted` is derived from
# what each worker actually reads, independently of the rules.

# %%
rows = decision_table()
print_table([{k: v for k, v in r.items() if k != "consequence"} for r in rows if r["model"] == "hybrid_swa"])
print()
print("wrong picks anywhere:")
for r in rows:
    if not r["correct"]:
        print(f"  {r['model']} {r['role']} {r['algorithm']} under {r['resolver']}: {r['consequence']}")

# %% [markdown]
# One-pool models (Gemma-3's layout, or no window at all) never translate, so all three resolvers agree there.
# The same table prints with `swa-kit resolve` (`--json` for machines).
#
# ## 4. Failure 1: a FROZEN_KV draft under the legacy resolver
# `request_ids_past_swa_buffer` sets the scene: request 0 fills most of the SWA pool and leaves its window;
# request 1 then gets full-pool ids beyond the 17-row SWA buffer. The draft's active pool is the dummy, so the
# legacy resolver says "no SWA", and the draft's sliding layer indexes the target's SWA buffer with untranslated
# full ids.

# %%
frozen, ids = request_ids_past_swa_buffer(SpeculativeAlgorithm.FROZEN_KV_MTP)
legacy = slots_read(frozen, "draft", "legacy", 0, 1, len(ids))
fixed = slots_read(frozen, "draft", "fixed", 0, 1, len(ids))
print("full ids of the window:   ", legacy.full_ids[legacy.attended].tolist())
print("legacy reads (untranslated):", legacy.read_ids[legacy.attended].tolist(), "of", legacy.buffer_rows, "rows")
print("fixed reads (translated):   ", fixed.read_ids[fixed.attended].tolist())
try:
    read_keys(frozen, legacy)
except SlotError as error:
    print("SlotError:", error)
plot_slots_read(frozen, "draft", 0, 1, len(ids))

# %% [markdown]
# On a GPU there is no bounds check: this is the illegal memory access of SGLang #26957, or, while the ids
# happen to stay below the SWA pool size, silently wrong keys. Before the SWA pool wraps, full and SWA ids
# often coincide and the bug hides.
#
# ## 5. Failure 2: an EAGLE draft under the naive resolver
# The same scene with an EAGLE draft, which writes its KV into its own pool at the **full** ids. The naive
# resolver hands it the target's SWA pool, so the backend translates those ids and reads other rows of the
# draft's pool: no error, just wrong keys, and acceptance drops (SGLang #25103).

# %%
eagle, ids = request_ids_past_swa_buffer(SpeculativeAlgorithm.EAGLE)
own = eagle.draft.token_to_kv_pool.get_key_buffer(0)
own.copy_(torch.randn_like(own))  # the draft's keys, written at full ids

for name in RESOLVERS:
    read = slots_read(eagle, "draft", name, 0, 1, len(ids))
    keys = read_keys(eagle, read)
    same = torch.equal(keys, own[read.full_ids[read.attended]])
    print(f"{name:6s} reads rows {read.read_ids[read.attended].tolist()}  keys the draft wrote: {same}")
plot_slots_read(eagle, "draft", 0, 1, len(ids))

# %% [markdown]
# The fixed resolver is right in every row of the table: it translates exactly when the pool a worker reads
# is an SWA pool. A later notebook runs speculative decoding end to end over these pools.

# %% [markdown]
# ## 6. End to end: speculative decoding on a tiny hybrid-SWA model
# `swa_kit.model` holds a small character-level decoder (sliding and full layers, GQA, RoPE, window 16 keys)
# trained by `scripts/train_tiny_model.py` on a generated story corpus shipped in `data/tiny_model/`, with
# two trained drafts: an EAGLE-style draft (one sliding layer, its own KV pool) and a FROZEN_KV MTP-style head
# (query-only, reads the target's last sliding and last full layer caches). Every attention call of the
# target and of both drafts runs over the pools above: KV written at the allocator's slots, sliding layers at
# translated slots, out-of-window SWA slots freed as generation runs, each layer routed by the dispatch.
#
# Plain greedy decoding is the baseline. Each speculative run drafts 3 tokens per round and lets the target
# verify them; we run both drafts under all three resolvers.

# %%
from swa_kit.model import load_models
from swa_kit.report import announce_all
from swa_kit.speculative import DEMO_PROMPTS, greedy_decode, guard_experiment, one_key_short_experiment, resolver_rows
from swa_kit.viz.speculative import acceptance_curve, guard_divergence

models = load_models()
prompts = [models.cfg.encode(p) for p in DEMO_PROMPTS[:2]]
plain = greedy_decode(models, prompts, 64)
for p, out in zip(DEMO_PROMPTS, plain.outputs):
    print(repr(p + models.cfg.decode(out)))
rows, runs = resolver_rows(models, prompts, 64, plain)
print_table(rows, ["algorithm", "resolver", "acceptance_rate", "mean_accepted_length", "agreement_with_plain",
                   "error"])
announce_all(used for run in [plain, *runs] for used in run.computed_by)

# %% [markdown]
# Acceptance over the generated length. The dotted line is where the 16-key window is full (the prompts are
# shorter than the window); from there on the sliding layers read only translated slots of recent tokens,
# and older tokens' SWA slots have been freed.

# %%
fills = sum(max(0, models.cfg.max_window - len(p)) for p in prompts) / len(prompts)
acceptance_curve(runs, window_fills_at=fills)

# %% [markdown]
# ## 7. The guard experiment
# Now route one sliding layer of the *target* to `paged_attention_ragged` (the kit's emulation of its
# documented semantics: no window argument) with the guard off, as SGLang did before the seed's fix.

# %%
report = guard_experiment(models, prompts, 64, plain)
print("agreement with plain decoding:", report["agreement_with_plain"])
print("window full at generated token:", report["window_fills_at"], " first divergence:", report["first_divergence"])
print("with the guard on:", report["error_with_guard"][:160], "...")
announce_all(report["computed_by"])
guard_divergence(report)

# %% [markdown]
# ## 8. One key short
# Notebook 04's probe measured that SGLang's unified call sites make aiter's kernel attend **W - 1** keys.
# Here every sliding layer attends what that argument really gives (15 keys for this model's 16), and we
# compare with the model's own greedy output. The tiny model was trained on exactly 16 keys, so read this as
# an upper bound on the effect, not a prediction for a 1024-key window.

# %%
short = one_key_short_experiment(models, prompts, 64, plain)
print("attended keys (intended -> SGLang's argument):",
      sorted({(a["intended_keys"], a["effective_keys"]) for a in short["attended"].values()}))
print("agreement with plain decoding:", short["agreement_with_plain"], " first divergence:", short["first_divergence"])
announce_all(short["computed_by"])

# %% [markdown]
# ## What to take away
# * With the **fixed** resolver both drafts reproduce plain greedy decoding exactly and keep their acceptance.
# * The wrong resolvers never change the output here: the target verifies every token through the right
#   pool, so a draft reading wrong KV costs **acceptance** (speed), silently: the **naive** resolver makes the
#   EAGLE draft read its own pool through the target's SWA mapping (SGLang #25103). The **legacy** resolver
#   makes the FROZEN_KV MTP draft read the SWA buffer with full ids: out of bounds as soon as the ids pass the
#   SWA pool's size (a `SlotError` here, an illegal memory access on a GPU: SGLang #26957).
# * A kernel that ignores the window changes the **output** itself, and only once the window is full, which is
#   why short tests miss it; the seed's guard turns it into an error.
# * A window argument one key short changes the output of a model trained on its window in the same way:
#   nothing raises, so only measuring what the kernel attends (notebook 04) finds it.
