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
# # 00 · The story: what sliding windows buy, and two bugs that hid in a serving engine
#
# **Goal.** In about 22 minutes you will be able to say (1) what a sliding-window KV pool saves on a real
# model, by default and at best; (2) which two silent failures SGLang PR #38756 fixed, on which worker,
# with the code before and after; (3) why the PR reported *accuracy*, using one rule, and its limits, that
# you can apply to any speculative-decoding bug. Two exercises check you on the way; the rest of the kit
# (notebooks 01-05) takes each piece apart.
#
# Terms in **bold** link to the kit's [glossary](../docs/glossary.md). You need to know what attention and a
# KV cache are, nothing about SGLang.
#
# **The seed.** The kit grew from one SGLang pull request, [#38756](https://github.com/sgl-project/sglang/pull/38756)
# ("aiter: resolve SWA KV pool for draft workers + guard paged decode"), in SGLang's attention backend for
# AMD GPUs (`python/sglang/srt/layers/attention/aiter_backend.py`). The kit calls it *the seed*.

# %%
# %matplotlib inline
import inspect

from swa_kit.engine import resolver
from swa_kit.lessons.workshop import story
from swa_kit.tables import print_table

# %% [markdown]
# ## 1 · What sliding windows buy
#
# A [sliding-window](../docs/glossary.md#sliding-window) layer attends only the last `W` keys, so it needs
# its keys and values for `W` tokens, not the whole context. SGLang therefore keeps the sliding layers in
# their own, smaller [SWA pool](../docs/glossary.md#swa-pool) beside the full pool of the full-attention
# layers. How much smaller is a start-up choice: SGLang sizes the SWA pool at `swa_full_tokens_ratio`
# (default 0.8) SWA tokens per full-pool token, for the whole server, not per request.
#
# Gemma-4 31B has 50 sliding layers (window 1024) and 10 full layers (figures in `data/models/gemma4-31b.json`).
#
# **Exercise 0.1 (predict).** With one pool, one token costs every layer's K and V. With SGLang's default
# sizing, one full-pool token costs the full layers' K and V plus 0.8 tokens' worth of the sliding layers'.
# What percentage of KV bytes per token does the default sizing save on Gemma-4 31B? Guess first (is it
# closer to 20 % or to 90 %?), then work it out with `swa_kit.models.memory` (`full_pool_bytes_per_token`,
# `swa_pool_bytes_per_token`, `one_pool_bytes_per_token` of `swa_kit.models.configs.load_model("gemma4-31b")`).

# %%
my_percent = ...  # your answer: a percentage
story.check_default_saving(my_percent)

# %% tags=["solution"]
memory = story.story_memory("gemma4-31b")
print(f"one pool:               {memory['one_pool_bytes_per_token']:>10,} bytes per token")
print(f"SGLang default (0.8):   {memory['default_bytes_per_token']:>10,.0f} bytes per full-pool token  "
      f"-> saves {100 * memory['default_saved_fraction']:.1f} %")
print(f"one 128k request, window-sized SWA pool (the per-request minimum): "
      f"{memory['minimum_request_bytes'] / 2**30:.1f} GiB "
      f"instead of {memory['one_pool_request_bytes'] / 2**30:.1f} GiB "
      f"-> saves {100 * memory['minimum_saved_fraction']:.1f} %")
story.check_default_saving(round(100 * memory["default_saved_fraction"], 1))

# %% [markdown]
# Two numbers, two questions. The **default** saving is what a server launched with SGLang's defaults gets:
# the SWA pool is sized once, at 0.8 of the full pool's tokens. The **per-request minimum** is the floor a
# request reaches when its sliding layers keep exactly their window; a server gets close to it only with a
# small `--swa-full-tokens-ratio`. Notebook 02 builds both pools and watches them fill.
#
# ## 2 · Two silent failures, before and after
#
# Speculative decoding runs a small [draft](../docs/glossary.md#draft-and-target) model that proposes a few
# tokens and the big **target** model that checks them in one [target verify](../docs/glossary.md#target-verify)
# pass. Gemma-4's [FROZEN_KV MTP](../docs/glossary.md#frozen-kv-mtp) draft writes no KV of its own: it reads
# the target's. Written in the kit's own words (pseudo-code, not SGLang's source):
#
# <table>
# <tr><th></th><th>before the seed</th><th>after the seed</th></tr>
# <tr><td><b>1. which SWA pool?</b></td>
# <td><pre>
# # ask the pool this worker holds
# pool = runner.token_to_kv_pool
# use_swa = is_swa_pool(pool)
#           and pool.swa_layer_nums > 0
# # a FROZEN_KV MTP draft holds a tiny
# # dummy pool -> use_swa = False, yet
# # it reads the target's SWA pool
# </pre></td>
# <td><pre>
# # ask a resolver, which knows drafts
# pool = resolve_swa_kv_pool(runner)
# use_swa = pool is not None
#           and pool.swa_layer_nums > 0
# # FROZEN_KV MTP draft -> the pool the
# # shared allocator serves (target's)
# </pre></td></tr>
# <tr><td><b>2. decode without a window</b></td>
# <td><pre>
# if not use_swa:
#     # takes no window argument:
#     # a sliding layer attends
#     # the whole context, no error
#     out = paged_attention_ragged(...)
# </pre></td>
# <td><pre>
# if not use_swa:
#     refuse_if_sliding(layer)
#     # ValueError naming the layer,
#     # its window and the ways out
#     out = paged_attention_ragged(...)
# </pre></td></tr>
# </table>
#
# The fixed rule as the kit implements it (the same three steps as SGLang 0.5.23's `_resolve_swa_kv_pool`):

# %%
print(inspect.getsource(resolver.legacy_resolve_swa_kv_pool))
print(inspect.getsource(resolver.resolve_swa_kv_pool))

# %% [markdown]
# **Predict, then run.** Before running the next cell: for each draft algorithm (EAGLE, FROZEN_KV MTP) on a
# model with an SWA pool, which of the three resolvers (`legacy`, the straw-man `naive` built after SGLang
# #25103, and `fixed`) picks the wrong pool? Write your guess down.

# %%
print_table([{k: r[k] for k in ("algorithm", "resolver", "returns", "wanted", "correct")}
             for r in resolver.decision_table()
             if r["model"] == "hybrid_swa" and r["role"] == "draft" and r["algorithm"] in ("EAGLE", "FROZEN_KV_MTP")])

# %% [markdown]
# The legacy rule breaks FROZEN_KV MTP; the naive rule, which always takes the allocator's pool, would break
# EAGLE, whose draft owns a full-size pool of its own. The fixed rule is right in every row.
#
# **Both bugs hit the draft.** The PR calls them two coupled fixes, and its own case shows why: one wrong
# answer causes both. For the FROZEN_KV MTP draft the legacy rule answered "no SWA" (its own pool is a 64-token
# dummy), so (1) its sliding layer read the target's SWA buffer with untranslated full-pool ids, and (2) with
# SWA off nothing forced it onto the windowed unified kernel, so its decode went to `paged_attention_ragged`,
# which takes no window. The kit's audit of the PR's launch, once on SGLang as it was before the PR and once on
# 0.5.23 (`swa-kit audit --model gemma4-31b --server-args "--attention-backend aiter --speculative-algorithm
# FROZEN_KV_MTP" --sglang-version before-38756`), lists every sliding-layer route the PR changed:

# %%
print_table(story.pr_fixed_rows())

# %% [markdown]
# Only draft rows changed; every target route was already the same before the PR. After it, the draft's sliding
# layer reads the SWA page table through the windowed unified kernel, one key short like every unified call
# site (notebook 04). Notebook 03 reproduces the wrong reads on real pools; notebook 04 makes the guard fire.
# The same audit shows one more draft route the PR moved, on the *full* layer: without the unified switch the
# draft's extend goes to CK's `mha_batch_prefill_func`, which refuses Gemma-4's 512-wide head, so that route
# raises rather than runs silently. `before-38756` is 0.5.23 with only this PR undone; the PR's own series made
# prefill of wide heads unified in its sibling PR #38757.
#
# ## 3 · The reported result, and the triage rule
#
# The PR reports Gemma-4 with FROZEN_KV MTP at an **accuracy of 0.820, the same as without speculation**.
# (Reported in the PR's description; the kit cannot run Gemma-4, so it reproduces the mechanism on a tiny
# model instead.) Why report accuracy, and not only acceptance? Because of one rule:
#
# > **Verification is lossless.** The target re-computes every drafted token with its own forward pass and
# > keeps only those it would have produced itself. So a bug in the **draft** can only cost
# > [acceptance](../docs/glossary.md#acceptance-rate) (speed), or stop the run if it faults; a bug on a
# > **target** route changes the **output**.
#
# Its limits, each a trap in practice:
#
# - **Target verify is a target route that only speculation reaches.** A bug there changes the output, but only
#   with speculative decoding on, so it looks like a draft bug at first sight. Notebook 04 shows one: EAGLE with
#   topk 4 verifies through a kernel that gets no window and reads untranslated ids from the SWA buffer.
# - **Not every difference is a bug.** In bf16, verify computes several tokens in one pass, in another reduction
#   order than plain decoding, so a near-tie can flip a greedy token with nothing broken; with sampling,
#   speculative decoding keeps the target's distribution, not its draws. Compare accuracy, or greedy decoding
#   in float32, not bf16 text.
#
# Both of the seed's bugs live in the draft, so they cost acceptance (or stopped the run when an untranslated id
# fell outside the SWA buffer). An unchanged accuracy shows the fix did not hurt the target's output; a
# recovered acceptance would show the draft now reads the right KV.
#
# **Exercise 0.2 (triage).** For each case in `story.TRIAGE_CASES`, does it cost `"acceptance"` or
# `"output"`? Fill in the dict. Ask which worker runs the broken route, not whether speculation is on.

# %%
for case in story.TRIAGE_CASES:
    print("-", case)
my_triage = ...  # your answer: {case: "acceptance" or "output" for case in story.TRIAGE_CASES}
story.check_triage(my_triage)

# %% [markdown]
# Now run it. The kit's tiny hybrid-SWA model (trained by `scripts/train_tiny_model.py`, window 16 keys)
# decodes two short prompts plainly, then speculatively under each resolver, then with one **target** sliding
# layer routed to the (emulated) window-less paged decode with the guard off: in the PR's case that route was the
# draft's, here it is put on the target to show what it costs where nothing re-checks it.
# `agreement_with_plain` is the share of tokens equal to plain greedy decoding.

# %%
from swa_kit.lessons.tiny_model import load_models
from swa_kit.lessons.report import announce_all
from swa_kit.lessons.speculative import DEMO_PROMPTS, greedy_decode, guard_experiment, resolver_rows

models = load_models()
prompts = [models.cfg.encode(p) for p in DEMO_PROMPTS[:2]]
plain = greedy_decode(models, prompts, 48)
rows, runs = resolver_rows(models, prompts, 48, plain)
guard = guard_experiment(models, prompts, 48, plain)
rows.append({"algorithm": "none (target bug)", "resolver": "fixed, guard off", "acceptance_rate": None,
             "agreement_with_plain": guard["agreement_with_plain"], "error": None})
print_table([{**r, "agreement_with_plain": r["agreement_with_plain"] if r["error"] is None else "stopped",
              "error": (r["error"] or "").split(":")[0]} for r in rows],
            ["algorithm", "resolver", "acceptance_rate", "agreement_with_plain", "error"])
announce_all(used for run in [plain, *runs] for used in run.computed_by)

# %% tags=["solution"]
story.check_triage({case: story.triage(worker) for case, worker in story.TRIAGE_CASES.items()})

# %% [markdown]
# Every wrong resolver either left the output equal to plain decoding or stopped the run with an error (a
# crashed run has no agreement to report); only the window-less layer put on the target changed the output.
# Notebook 03 runs this at full length, and its section 8 shows the fourth case (one key short) on the target.
#
# ## What the kit will show
#
# - [01 · Window conventions and masks](01_window_conventions_and_masks.ipynb): one window, ten spellings,
#   the off-by-one trap, the mask of every [forward mode](../docs/glossary.md#forward-modes).
# - [02 · KV pools, full vs SWA](02_kv_pools_full_vs_swa.ipynb): slots, the
#   [full->SWA mapping](../docs/glossary.md#full-to-swa-mapping), eviction, and pool sizing.
# - [03 · Draft/target pool sharing](03_draft_target_pool_sharing.ipynb): the wrong reads on real pools and the tiny
#   model end to end.
# - [04 · aiter dispatch and guards](04_aiter_dispatch_and_guards.ipynb): the paged decode, the guard, and a probe that
#   measures which keys each kernel really attends.
# - [05 · Kernels and performance](05_kernels_and_performance.ipynb): why decode cost follows the window.
# - [06 · Debugging a launch](06_debugging_a_launch.ipynb): a bug report taken from symptom to cause with
#   `swa-kit audit`, a trace of SGLang's own backend and `swa-kit key-gap`.
#
# The workshop plans are in [docs/workshop.md](../docs/workshop.md); what the kit relies on about SGLang and
# aiter, with sources, is in [docs/sglang-and-aiter.md](../docs/sglang-and-aiter.md).
#
# ## Takeaway
#
# - A hybrid pool saves what its sizing lets it save: at SGLang's default far less than the per-request
#   minimum suggests (section 1 computes both for Gemma-4 31B). Quote the one that matches the launch.
# - The seed fixed two coupled, *silent* failures of the FROZEN_KV MTP draft: it asked the wrong pool whether
#   SWA was on, so it read untranslated ids and its sliding layer decoded on a kernel that takes no window.
#   Both cost acceptance; the audit at `before-38756` and at 0.5.23 shows only draft routes changed.
# - Triage any speculative-decoding bug by asking which worker runs the broken route: draft -> acceptance,
#   target -> output, target verify too, although only speculation reaches it. bf16 and sampling drift are no
#   bugs. That is why an unchanged accuracy is the right evidence that a fix is safe.
