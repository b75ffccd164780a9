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
# # 07 · One model, two engines: Gemma-4 on SGLang and on vLLM
#
# **Goal.** In about 20 minutes you will take one Gemma-4 launch through SGLang and vLLM (the versions the kit
# models, printed below) and see where the two engines, calling the same aiter kernels underneath, made
# different choices: the window argument at each call, a guard against routing, a pool resolver against
# per-layer KV sharing, and the memory each one sizes.
#
# Everything here is read from the kit's model of each engine (`swa-kit audit --engine both` prints the same side
# by side), on a CPU, in seconds. vLLM's words are in the glossary:
# [spec](../docs/glossary.md#vllm-kv-cache-spec), [block](../docs/glossary.md#vllm-block),
# [KV-cache group](../docs/glossary.md#vllm-kv-cache-group),
# [hybrid KV-cache manager](../docs/glossary.md#vllm-hybrid-kv-cache-manager),
# [KV sharing](../docs/glossary.md#vllm-kv-sharing), [backend selection](../docs/glossary.md#vllm-backend-selection);
# SGLang's: [guard](../docs/glossary.md#guard), [resolver](../docs/glossary.md#resolver),
# [FROZEN_KV MTP](../docs/glossary.md#frozen-kv-mtp), [unified](../docs/glossary.md#unified).

# %%
# %matplotlib inline
from IPython.display import display

from swa_kit.engine.resolver import decision_table
from swa_kit.launch.vllm_routes import route
from swa_kit.lessons.workshop import engines
from swa_kit.measure.both_audit import audit_both, draft_rows, finding_rows, key_rows, memory_rows, table_text
from swa_kit.measure.probe import probe_engines
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.viz.probe import draw_probe
from swa_kit.vllm_versions import VLLM_VERSION

print(f"SGLang {SGLANG_VERSION} and vLLM {VLLM_VERSION}, as the kit models them")

# %% [markdown]
# ## 1 · One launch, two spellings
#
# The launch: Gemma-4 with its MTP drafter, tensor parallel over several GPUs. SGLang gets its aiter backend by
# name (its default for Gemma-4 is Triton); vLLM gets its aiter unified backend by name (its Gemma-4 config hook
# would pick Triton too). The flags that describe
# the launch itself (here the GPUs and the drafter) are given once, in SGLang's words, and the kit writes them in
# vLLM's; each engine's own flags stay with it. A flag with no counterpart on the other engine (SGLang's
# `--mem-fraction-static` alone, `--pp-size`, a draft tree) is refused by name rather than dropped.

# %%
print("SGLang flags given:", engines.SGLANG_ARGS)
print("vLLM flags given:  ", engines.VLLM_ARGS)
report = engines.the_launch()
print("\nSGLang gets:", report.sglang_flags)
print("vLLM gets:  ", report.vllm_flags, "\n")
print(table_text([vars(row) for row in report.paired.rows], ["meaning", "sglang", "vllm", "how"]))

# %% [markdown]
# The drafter is SGLang's FROZEN_KV MTP and vLLM's `mtp` method: the same Gemma-4 assistant model, which writes
# no KV of its own. Section 4 shows how each engine lets it read the target's.
#
# ## 2 · The window convention at each call
#
# Both engines hand a sliding layer's decode to the same kernel: aiter's Triton `unified_attention`, which attends
# `1 + left` keys for `window_size=(left, 0)`. What they pass differs.
#
# * SGLang's model file gives each sliding layer `sliding_window_size = W - 1`, and the aiter backend's unified
#   call sites pass `(sliding_window_size - 1, 0)`.
# * vLLM's ROCm backends store the window in FlashAttention's convention, `(W - 1, 0)`, in their `__init__`, and
#   pass that pair to `unified_attention` (and convert it back to `W` for a kernel that takes a length).
#
# **Exercise 7.1 (predict, then run).** For one of Gemma-4's sliding layers at decode, write the `window_size`
# pair each engine passes. Answer before the table runs.

# %%
my_sglang_arg = ...  # your answer: a (left, right) pair
my_vllm_arg = ...  # your answer: a (left, right) pair
engines.check_unified_window_args(my_sglang_arg, my_vllm_arg)

# %% [markdown]
# Every layer kind and forward mode on both engines: the kernel each calls, its window argument, the keys it then
# attends, and the keys the model means (its window, read from the config). vLLM has no separate extend: a prefill
# that continues a cached prefix is a prefill.

# %%
rows = key_rows(report)
print(table_text([r for r in rows if not r["mode"].startswith("draft")],
                 ["kind", "layers", "mode", "sglang_kernel", "sglang_window_arg", "sglang_keys", "vllm_kernel",
                  "vllm_window_arg", "vllm_keys", "meant"]))

# %% tags=["solution"]
engines.check_unified_window_args(engines.unified_window_args()["sglang"], engines.unified_window_args()["vllm"])

# %% [markdown]
# One kernel, two arguments, one key apart: SGLang subtracts one from a value that already counts one key less,
# vLLM keeps FlashAttention's pair. Where the same convention is written by two engines, read each call's
# argument, never the config's window.
#
# Measured, not assumed: aiter's own Triton `unified_attention` (in Triton's CPU interpreter here), run with each
# engine's argument for a small window, one-hot values revealing every key a query weighs. Left, the keys meant;
# right, the keys the kernel attended (red crosses: cells that differ).

# %%
for row in probe_engines(5):
    if row.masks:
        display(draw_probe(row, cell=0.5))
    else:
        print(f"{row.site}: not measured here ({row.skipped})")

# %% [markdown]
# ## 3 · SGLang's guard, vLLM's routing
#
# aiter's paged decode kernels take no window, or no sinks, or a single query token only. The two engines protect
# the same kernels in opposite ways.
#
# * **SGLang** routes by the pool: with a hybrid SWA pool its aiter backend forces `unified_attention`; without
#   one, a sliding layer would reach `paged_attention_ragged`, and the seed's guard
#   (`_reject_paged_decode_sliding_window`) raises at the first decode rather than attend the whole context.
# * **vLLM** routes by the layer: `ROCM_AITER_FA` sends every decode its paged kernel cannot take (a window on a
#   multi-token step, sinks, a draft being verified) to `unified_attention`, and a single-token sliding decode to
#   `paged_attention_v1` with the window length. There is nothing to guard.
#
# Turn the hybrid memory off on both engines: one SGLang flag, which the kit writes as vLLM's
# `--disable-hybrid-kv-cache-manager`.

# %%
off = audit_both(model=engines.MODEL, server_args=engines.SGLANG_ARGS + " --disable-hybrid-swa-memory",
                 vllm_args=engines.VLLM_ARGS)
print("vLLM gets:", off.vllm_flags, "\n")
print(table_text([r for r in key_rows(off) if r["kind"] == "sliding" and r["mode"] == "decode"],
                 ["kind", "mode", "sglang_kernel", "sglang_keys", "vllm_kernel", "vllm_window_arg", "vllm_keys"]))
for engine, finding in finding_rows(off):
    if finding.severity in ("raises", "memory"):
        print(f"\n{engine} [{finding.severity}] {finding.title} ({finding.where})\n    {finding.detail}")

# %% [markdown]
# SGLang stops: its guard names the layer and the way out (and without the hybrid pool its CK prefill meets the
# full layers' head size, another start-up stop). vLLM runs the same routes and pays in memory instead: its
# sliding layers are sized as full ones. Both answers are loud; neither computes the wrong keys.
#
# `ROCM_AITER_FA`'s routing for Gemma-4's sliding layers, from the kit's transcription of vLLM's
# `AiterFlashAttentionImpl.forward`. vLLM's backend selection would not give Gemma-4 this backend at all: its
# full layers' head size is not one `ROCM_AITER_FA` declares, so naming it stops vLLM at start-up, as the second
# cell shows.

# %%
sliding = report.model.kinds["sliding"]
for mode in ("decode", "verify"):
    for sinks in (False, True):
        r = route("ROCM_AITER_FA", mode, sliding.window.keys, sliding.head_dim, sinks, False)
        print(f"{mode:>6}, sinks={sinks!s:<5}: {r.kernel:<26} window_arg={r.window_arg!s:<10} attends {r.keys}")

# %%
fa = audit_both(model=engines.MODEL, server_args=engines.SGLANG_ARGS, vllm_args="--attention-backend ROCM_AITER_FA")
print("vLLM:", fa.vllm_refusal)

# %% [markdown]
# ## 4 · The draft's KV: a pool resolver against per-layer sharing
#
# Gemma-4's MTP drafter owns no KV: it reads the target's last sliding layer and last full layer. How it finds
# them is where the engines differ most.
#
# * **SGLang** gives the draft worker a dummy pool and swaps in the target's pools per call. A sliding layer must
#   translate full-pool slot ids into the SWA pool, so the backend asks a **resolver** which pool's mapping to
#   use. Before the seed (PR #38756) the resolver looked at the draft's own dummy pool, found no SWA pool, and
#   read untranslated ids.
# * **vLLM** names, for each drafter layer, the target layer whose KV it reads (`kv_sharing_target_layer_name`,
#   set by `Gemma4Speculator._setup_gemma4_kv_sharing`): the drafter layer owns no spec, so there is no pool to
#   resolve and no mapping to get wrong.

# %%
print(table_text(draft_rows(report), ["engine", "what", "value", "how"]), "\n")
frozen_kv_draft = [r for r in decision_table()
                   if r["algorithm"] == "FROZEN_KV_MTP" and r["role"] == "draft" and r["model"] == "hybrid_swa"]
print(table_text(frozen_kv_draft, ["algorithm", "role", "resolver", "returns", "wanted", "consequence"]))

# %% [markdown]
# Both engines read the same two target layers. SGLang gets there through the pool the resolver returns; the
# resolver table, computed on the kit's real pools, shows that only the fixed rule returns the SWA pool the draft
# needs. vLLM's rows place an **illustrative** assistant config (the target's geometry, one layer of each kind: the
# kit bundles no published one, and vLLM's rule does not depend on the count): each drafter layer lands in its
# target layer's KV-cache group and owns no spec, so there is nothing to resolve. With your assistant's
# `config.json`, `swa-kit audit --engine both ... --draft-hf-config PATH` places its real layers.
#
# ## 5 · The memory each engine sizes
#
# Both engines agree on what one token costs when every layer keeps it. They disagree on what the sliding layers
# keep.
#
# * **SGLang** sizes an SWA pool once, at start-up, as a share (`--swa-full-tokens-ratio`) of the full pool, so
#   every token of context pays for a full-layer cell plus that share of a sliding-layer cell.
# * **vLLM**'s hybrid KV-cache manager gives the sliding layers their own KV-cache groups and frees each request's
#   blocks once they leave its window: a token of context pays for the full layers only, and each running request
#   pays for one window per sliding group.
#
# **Exercise 7.2 (predict, then run).** From the cells below (per GPU), how many times vLLM's KV bytes per token of
# context does SGLang's default sizing spend?

# %%
pools = report.sglang.decisions.pools
print(f"full-layer cell {pools.full_cell_bytes:,} B, sliding-layer cell {pools.swa_cell_bytes:,} B, "
      f"SGLang's share of the SWA pool {pools.ratio}")
my_ratio = ...  # your answer: SGLang's bytes per token of context / vLLM's
engines.check_context_token_ratio(my_ratio)

# %%
print(table_text(memory_rows(report), ["quantity", "sglang", "vllm", "how"]))

# %% tags=["solution"]
engines.check_context_token_ratio(engines.context_token_ratio())

# %% [markdown]
# vLLM's tokens per GPU is an upper bound (every block in the full group); each running request takes a window's
# blocks per sliding group from the same pool. SGLang's full pool is what it logs. The budgets differ too: each
# engine sizes its own, so compare tokens per GiB, not tokens per GPU.
#
# ## Takeaway
#
# The same aiter kernels, two engines: SGLang's unified call sites pass a window one key short where vLLM's pass
# FlashAttention's pair; SGLang guards a route vLLM never takes; SGLang resolves a pool where vLLM aliases a layer;
# SGLang sizes sliding memory once for the server, vLLM per request. `swa-kit audit --engine both` prints this
# side by side for your own config and flags.
