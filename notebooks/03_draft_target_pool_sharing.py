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
# **Goal.** In about 29 minutes you will be able to (1) say which KV pool each kind of draft reads, and so
# which SWA mapping its sliding layers need; (2) predict which resolver breaks which draft, and reproduce
# the failure on real pools; (3) run [the seed](../docs/glossary.md#the-seed)'s two fixes before and after on a
# tiny model; (4) triage a speculative-decoding bug from its symptom alone. Two exercises check you on the way.
# Terms link to the kit's [glossary](../docs/glossary.md).
#
# In [speculative decoding](../docs/glossary.md#speculative-decoding) a small
# [**draft**](../docs/glossary.md#draft-and-target) proposes tokens and the **target** verifies them. In SGLang
# both share the request table ([`req_to_token_pool`](../docs/glossary.md#slot)) and the token allocator, so a
# draft token gets a [**full-pool**](../docs/glossary.md#full-pool) slot id from the target's allocator. What
# the draft does with that id depends on the algorithm ([EAGLE / EAGLE3](../docs/glossary.md#eagle),
# [STANDALONE](../docs/glossary.md#standalone), [FROZEN_KV MTP](../docs/glossary.md#frozen-kv-mtp); the
# target's [SWA pool](../docs/glossary.md#swa-pool) holds its sliding layers' KV):
#
# | algorithm | draft's own pool | draft reads | its sliding layers must translate against |
# | --- | --- | --- | --- |
# | EAGLE / EAGLE3 / STANDALONE | a plain `MHATokenToKVPool`, indexed by full ids | its own pool | nothing |
# | FROZEN_KV_MTP (Gemma-4) | a 64-token dummy, never written | the target's pool | the target's SWA pool |
#
# The attention backend asks a [**resolver**](../docs/glossary.md#resolver) which SWA pool's
# [full->SWA mapping](../docs/glossary.md#full-to-swa-mapping) to translate slot ids against. This notebook
# wires both kinds of draft on real pools, runs three resolvers, and reproduces each failure.

# %%
# %matplotlib inline
import torch

from swa_kit.lessons.workshop import drafts
from swa_kit.errors import SlotError
from swa_kit.engine.resolver import RESOLVERS, decision_table, read_keys, slots_read
from swa_kit.tables import print_table
from swa_kit.viz.pools import plot_slots_read
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.engine.workers import (
    FROZEN_KV_DUMMY_POOL_SIZE,
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
# * **legacy** (SGLang's aiter backend before PR #38756): the *active* pool if it is an SWA pool, else nothing.
# * **naive**: always the pool the shared allocator serves. A **straw man**, built by the kit after SGLang
#   #25103 to show that bug's mechanism. #25103 (and #26957 below) were bugs of SGLang's **trtllm_mha**
#   backend, not of aiter's. On the aiter backend a naive rule could as well fail loudly, when a draft that
#   owns its pool writes its KV, as drop acceptance silently; the kit models the *read* through the wrong
#   mapping, not that write (sections 4 and 5).
# * **fixed** (SGLang 0.5.23's `_resolve_swa_kv_pool`): active SWA pool -> it; EAGLE-family draft -> nothing;
#   else the allocator's pool if it is an SWA pool.
#
# **Exercise 3.1 (predict).** On a model with an SWA pool, which resolver breaks an EAGLE draft, and which
# breaks a FROZEN_KV MTP draft? Use the table at the top and the three rules; write your answer before the
# decision table below reveals it.

# %%
my_breaks = ...  # your answer: {"EAGLE": "legacy", "naive" or "fixed", "FROZEN_KV_MTP": the same choice}
drafts.check_resolver_breaks(my_breaks)

# %% [markdown]
# ## 3. The decision table
# Every resolver for every (role, algorithm, model kind), computed on real pools. `wanted` is derived from
# what each worker actually reads, independently of the rules.

# %%
rows = decision_table()
print_table([{k: v for k, v in r.items() if k != "consequence"} for r in rows if r["model"] == "hybrid_swa"])
print()

# %% tags=["solution"]
print("wrong picks anywhere:")
for r in rows:
    if not r["correct"]:
        print(f"  {r['model']} {r['role']} {r['algorithm']} under {r['resolver']}: {r['consequence']}")
drafts.check_resolver_breaks({r["algorithm"]: r["resolver"] for r in rows if not r["correct"]
                                and r["model"] == "hybrid_swa" and r["algorithm"] in ("EAGLE", "FROZEN_KV_MTP")})

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
# On a GPU there is no bounds check: an illegal memory access (the failure SGLang #26957 reported, on the
# trtllm_mha backend, for the same mechanism), or, while the ids happen to stay below the SWA pool size,
# silently wrong keys. Before the SWA pool wraps, full and SWA ids often coincide and the bug hides.
#
# ## 5. Failure 2: an EAGLE draft under the naive (straw-man) resolver
# The same scene with an EAGLE draft, which writes its KV into its own pool at the **full** ids. The naive
# resolver hands it the target's SWA pool, so the backend translates those ids and reads other rows of the
# draft's pool: no error, just wrong keys, and acceptance drops (the mechanism of SGLang #25103).

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
# is an SWA pool. Section 6 runs speculative decoding end to end over these pools.
#
# ## 6. The triage rule
#
# > **Verification is lossless.** The target recomputes every drafted token with its own forward pass and
# > keeps only those it would have produced itself. So a bug in the **draft** can only cost
# > [acceptance](../docs/glossary.md#acceptance-rate) (speed), or stop the run if its read faults; a bug on a
# > **target** route changes the **output**.
#
# Its limits. *Target verify* is a target route that only speculative decoding reaches: a bug there changes the
# output only with speculation on (notebook 04 shows one: EAGLE with topk 4 verifies through a kernel that gets
# no window and reads untranslated ids). And not every difference is a bug: in bf16, verify computes several
# tokens in one pass in another reduction order than plain decoding, so a near-tie can flip a greedy token; with
# sampling, speculative decoding keeps the target's distribution, not its draws.
#
# That is why the seed reported **accuracy**: Gemma-4 with FROZEN_KV MTP scored **0.820, the same as without
# speculation** (from the PR's description; the kit cannot run Gemma-4). An unchanged accuracy shows the
# target's output is intact, so the fix did not break the target; it says nothing about the draft, which is
# what acceptance measures.
#
# **Exercise 3.2 (triage backwards).** For each bug report in `drafts.SYMPTOMS`, where is the bug: on the
# `"draft"`, on a `"target"` route every request takes, on target `"verify"` (reached only with speculation), or
# `"neither"` (no evidence of a bug)? Where two answers are defensible, the check accepts both and says why.

# %%
for symptom in drafts.SYMPTOMS:
    print("-", symptom)
my_workers = ...  # your answer: {symptom: "draft", "target", "verify" or "neither" for symptom in drafts.SYMPTOMS}
drafts.check_which_worker(my_workers)

# %% [markdown]
# ## 7. End to end: speculative decoding on a tiny hybrid-SWA model
# `swa_kit.lessons.tiny_model` holds a small character-level decoder (sliding and full layers, GQA, RoPE, window 16
# keys) trained by `scripts/train_tiny_model.py` on a generated story corpus shipped in `data/tiny_model/`, with
# two trained drafts: an EAGLE-style draft (one sliding layer, its own KV pool) and a FROZEN_KV MTP-style head
# (query-only, reads the target's last sliding and last full layer caches). Every attention call of the
# target and of both drafts runs over the pools above: KV written at the allocator's slots, sliding layers at
# translated slots, out-of-window SWA slots freed as generation runs, each layer of each
# [forward mode](../docs/glossary.md#forward-modes) (prefill, decode, target verify, draft extend, draft
# decode) routed by the dispatch.
#
# Plain greedy decoding is the baseline. Each speculative run drafts 3 tokens per round (a chain:
# [topk](../docs/glossary.md#topk) = 1) and lets the target verify them in one
# [target verify](../docs/glossary.md#target-verify) pass; every round commits the accepted drafts plus one
# [bonus token](../docs/glossary.md#bonus-token) of the target's own, so the
# [mean accepted length](../docs/glossary.md#mean-accepted-length) is at least 1. Both drafts run under all
# three resolvers.
#
# **Predict, then run.** Which of the six runs will produce text different from plain decoding? Which will
# lose acceptance, and which will stop?

# %%
from swa_kit.lessons.tiny_model import load_models
from swa_kit.lessons.report import announce_all
from swa_kit.lessons.speculative import (
    DEMO_PROMPTS,
    greedy_decode,
    guard_experiment,
    one_key_short_experiment,
    pr_before_after,
    resolver_rows,
)
from swa_kit.viz.speculative import acceptance_curve, guard_divergence

NEW_TOKENS = 48
models = load_models()
prompts = [models.cfg.encode(p) for p in DEMO_PROMPTS[:2]]
plain = greedy_decode(models, prompts, NEW_TOKENS)
for p, out in zip(DEMO_PROMPTS, plain.outputs):
    print(repr(p + models.cfg.decode(out)))
rows, runs = resolver_rows(models, prompts, NEW_TOKENS, plain)
for r in rows:  # a stopped run has no agreement to report: say where it stopped
    r["output vs plain"] = (f"stopped at token {', '.join(map(str, r['stopped_at']))}" if r["stopped_at"] else
                            f"agreement {r['agreement_with_plain']}")
    r["error"] = (r["error"] or "").split(":")[0]
print_table(rows, ["algorithm", "resolver", "acceptance_rate", "mean_accepted_length", "output vs plain", "error"])
announce_all(used for run in [plain, *runs] for used in run.computed_by)

# %% [markdown]
# Acceptance over the generated length. The dotted line is where the 16-key window is full (the prompts are
# shorter than the window); from there on the sliding layers read only translated slots of recent tokens,
# and older tokens' SWA slots have been freed.

# %%
fills = sum(max(0, models.cfg.max_window - len(p)) for p in prompts) / len(prompts)
acceptance_curve(runs, window_fills_at=fills)

# %% [markdown]
# ## 8. PR #38756, before and after
# The same two prompts through each of the seed's fixes, side by side. Fix 1 is the resolver: the FROZEN_KV MTP
# runs above, legacy against fixed. Fix 2 is the guard. In the PR's own case both bugs hit the **draft** (before
# the PR its sliding layer also decoded on the windowless paged decode: notebook 00's audit table), so both cost
# acceptance there; the guard refuses that route on any worker. To show what the route costs where nothing
# re-checks it, the run below puts it on the *target*: plain decoding with one target sliding layer routed to
# `paged_attention_ragged` (an **emulation** of its documented semantics: no window argument), guard off, and on.
# `planned route` is the dispatch's route for the affected layer; window-honouring routes run as the float64
# reference here. Notebook 00 shows the code before and after.

# %%
by_key = {(r.algorithm, r.resolver): r for r in runs}
guard = guard_experiment(models, prompts, NEW_TOKENS, plain)
before_after = pr_before_after(models, prompts, NEW_TOKENS, plain, guard=guard,
                               runs={name: by_key[("frozen_kv_mtp", name)] for name in ("legacy", "fixed")})
print_table([{("planned route" if k == "route" else k): v for k, v in r.items()} for r in before_after])
announce_all(guard["computed_by"])

# %% tags=["solution"]
drafts.check_which_worker({symptom: answers[0] for symptom, answers in drafts.SYMPTOMS.items()})

# %% [markdown]
# Read it with the triage rule. Before fix 1 the draft read the target's SWA buffer with untranslated ids
# and the run **stopped**; after it, the output equals plain decoding. Before fix 2 the target's output
# **changed**, after the window filled (on the target; on the PR's draft it would cost acceptance); after it,
# the route is refused before the kernel runs. (A stopped
# run's acceptance counts the rounds before it stopped; its output has no agreement to report.)
#
# Where the output of the unguarded run leaves plain decoding, against where the window fills:

# %%
print("window full at generated token:", guard["window_fills_at"], " first divergence:", guard["first_divergence"])
print("with the guard on:", guard["error_with_guard"][:160], "...")
guard_divergence(guard)

# %% [markdown]
# ## 9. One key short
# Notebook 04's probe measures that SGLang's unified call sites make aiter's kernel attend **W - 1** keys.
# Here every sliding layer attends what that argument really gives (15 keys for this model's 16), and we
# compare with the model's own greedy output. One key is a sixteenth of this model's window and a 1024th of
# Gemma's, and the tiny model was trained on exactly 16 keys: this shows the mechanism (a target bug changes
# the output, silently), not the size of the effect on a large model.

# %%
short = one_key_short_experiment(models, prompts, NEW_TOKENS, plain)
print("attended keys (intended -> SGLang's argument):",
      sorted({(a["intended_keys"], a["effective_keys"]) for a in short["attended"].values()}))
print("agreement with plain decoding:", short["agreement_with_plain"], " first divergence:", short["first_divergence"])
announce_all(short["computed_by"])

# %% [markdown]
# ## Takeaway
# * With the **fixed** resolver both drafts reproduce plain greedy decoding exactly and keep their acceptance.
# * The wrong resolvers never change the output: the target verifies every token through the right pool, so
#   a draft reading wrong KV costs **acceptance** (speed), silently: the straw-man **naive** resolver makes the
#   EAGLE draft read its own pool through the target's SWA mapping (the mechanism of SGLang #25103). The
#   **legacy** resolver makes the FROZEN_KV MTP draft read the SWA buffer with full ids: out of bounds as soon
#   as the ids pass the SWA pool's size, and the run stops (a `SlotError` here; on a GPU an illegal memory
#   access, as SGLang #26957 reported on trtllm_mha).
# * A kernel that ignores the window changes the **output** itself, and only once the window is full, which is
#   why short tests miss it; the seed's guard turns it into an error.
# * Triage by the symptom: output changed -> the target; only speed lost (or a fault in the draft's read) ->
#   the draft. An unchanged accuracy, like the seed's 0.820, clears the target.
