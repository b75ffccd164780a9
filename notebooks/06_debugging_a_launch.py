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
# # 06 · Debugging a launch: "Gemma-4 drifts from Hugging Face after about a thousand tokens"
#
# **Goal.** In about 20 minutes you will diagnose a reported drift with the kit's audit, trace and probe.
#
# A bug report as it arrives (the first of the two worked through in `docs/debugging.md`):
#
# > We serve Gemma-4 31B on MI300X with `--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP`.
# > Greedy outputs match transformers for short prompts. Past roughly a thousand tokens of context they
# > start to differ, with or without speculation. No error, no crash.
#
# The runbook's row for *"divergence only after about W tokens"* says: window handling. Four steps, each
# with the kit's own tool:
#
# 1. **audit** the launch as the user runs it: which backend, which kernels, which window arguments;
# 2. **trace** a server to confirm what the kernels really receive (here: a trace recorded from SGLang's
#    own `AiterAttnBackend.forward_decode`, see below);
# 3. **measure** whether one key short changes a model's outputs (`key_gap`, transformers' own model);
# 4. pick the way out.
#
# Everything runs on a CPU in seconds.
#
# **Goal:** take a real-sounding report from symptom to cause with the kit's tools, and know which
# measurement settles it. Terms: [forward modes](../docs/glossary.md#forward-modes),
# [unified](../docs/glossary.md#unified), [FROZEN_KV MTP](../docs/glossary.md#frozen-kv-mtp).

# %%
import json

import torch
import transformers

from swa_kit.measure import audit
from swa_kit.engine import routing, ways_out
from swa_kit.measure import trace
from swa_kit.lessons.workshop import debugging
from swa_kit.launch.inputs import Launch
from swa_kit.measure.key_gap import compare_window, tiny_model_from_config
from swa_kit.resources import data_path
from swa_kit.window import to_keys

# %% [markdown]
# ## 1 · Audit the launch
#
# The same as `swa-kit audit --model gemma4-31b --server-args "--attention-backend aiter
# --speculative-algorithm FROZEN_KV_MTP"`. With a real server, pass its `config.json` with `--hf-config`.
#
# **Exercise 6.1 (predict, then run).** Gemma-4's sliding layers attend W = 1024 keys, and its model file
# passes SGLang `sliding_window_size = W - 1`. What `window_size` does the aiter backend's unified decode
# call site hand the kernel, and how many keys does the kernel then attend? Answer before the audit runs.

# %%
my_window_arg = ...  # your answer: a (left, right) pair
my_attended_keys = ...  # your answer: a number of keys
debugging.check_decode_window(my_window_arg, my_attended_keys)

# %%
launch = Launch.from_inputs(model="gemma4-31b", platform="rocm-gfx942",
                            server_args="--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP")
report = audit.audit(launch)
print("attention backend:", report.decisions.attention_backend.value, "-", report.decisions.attention_backend.source)
for finding in report.findings:
    print(f"[{finding.severity}] {finding.title} ({finding.where})")

# %% [markdown]
# Every sliding layer on every aiter route gets `window_size = (sws - 1, 0)`: with `sliding_window_size =
# W - 1` that is `(W - 2, 0)`, and aiter's unified kernel attends `1 + left` keys, one fewer than the model
# was trained with. The audit ranks it *one-short*: SGLang runs, and nothing is refused.

# %% tags=["solution"]
sliding = routing.plan("gemma4-31b", "decode", strict=False).layer(0)
print(f"layer 0: {sliding.kind}, sliding_window_size={sliding.sliding_window_size}, {sliding.kernel} "
      f"window_arg={sliding.window_arg} -> attends {sliding.effective_keys} of {sliding.intended_keys} keys")
debugging.check_decode_window(tuple(sliding.window_arg), sliding.effective_keys)

# %% [markdown]
# ## 2 · What the server passes: a trace
#
# In the server process, `import swa_kit.measure.trace; swa_kit.measure.trace.install("/tmp/swa-trace.jsonl")`
# before the model loads writes one JSON line per kernel call. The file below was **recorded on a CPU** by the kit's
# test `tests/test_trace_sglang.py`: SGLang 0.5.23's real `AiterAttnBackend` built over SGLang's own
# `SWAKVPool`, its real `forward_decode` called for Gemma-4's layer 0 (sliding) and layer 5 (full), and
# aiter's kernels (which need ROCm) supplied by the kit's float64 reference. The window argument and page
# table are SGLang's own; only the arithmetic inside the kernel is the kit's.

# %%
decode = routing.plan("gemma4-31b", "decode", strict=False)
records = trace.read_records(data_path("traces", "gemma4-31b_decode_aiter_cpu.jsonl"))
for record in records:
    print(json.dumps(record.to_json()))
mismatches = trace.compare(records, decode)
print("trace vs plan:", "agree" if not mismatches else [str(m) for m in mismatches])

# %% [markdown]
# The trace agrees with the plan: layer 0 receives `[1022, 0]` and the SWA-translated page table. So the
# drift is not a routing bug of this launch (no wrong pool, no dropped window): it is the one key short.
#
# ## 3 · Does one key short matter? Measure it
#
# `swa-kit key-gap --model DIR --prompt-file FILE` runs *your* checkpoint with transformers' own code at W
# and at W-1 keys. Here, without weights, a **randomly initialised** model built from the Gemma-3 27B config
# the kit bundles (same architecture and attention pattern), shrunk to 2 layers and a window of 16 keys:
# it shows the mechanism, not Gemma-4's numbers.
#
# **Exercise 6.2 (predict, then run).** With a window of W = 16 keys against W - 1 = 15, from which prompt
# position (counting from 0) on can the two runs' logits differ at all?

# %%
my_first_position = ...  # your answer: a position in the prompt
debugging.check_first_changed_position(my_first_position, window=16)

# %%
bundled = json.loads(data_path("models", "gemma3-27b.json").read_text())["hf_config"]
model = tiny_model_from_config(transformers.AutoConfig.for_model(**bundled), window=16, seed=0)
prompt = torch.randint(0, model.config.vocab_size, (64,), generator=torch.Generator().manual_seed(0))
gap = compare_window(model, prompt, new_tokens=16)
print(gap.summary())

# %% tags=["solution"]
debugging.check_first_changed_position(gap.first_changed_position, window=16)

# %% [markdown]
# Positions before W-1 attend the same keys under both windows, so their logits are identical; from
# position W-1 on, every prediction moves a little, and greedy decoding parts ways once a near-tie flips.
# That is the report's "after about a thousand tokens" with W = 1024.
#
# ## 4 · Ways out, and what each still costs
#
# Measure with your checkpoint first (`swa-kit key-gap`): if W - 1 keys do not change its tokens, there is
# nothing to fix. If they do, look at what each way out really attends before taking it. SGLang's default for
# Gemma-4 on ROCm, the Triton backend, is the obvious candidate. Take it on this launch and audit again:

# %%
SERVER_ARGS = "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP"
server_args, env = ways_out.TRITON_BACKEND.applied_to(SERVER_ARGS, {})
on_triton = audit.audit(Launch.from_inputs(model="gemma4-31b", platform="rocm-gfx942", server_args=server_args,
                                           env=env))
print(server_args)
for finding in on_triton.findings:
    if finding.severity == "one-short":
        print(f"[{finding.severity}] {finding.title} ({finding.where})")
        print("   ", finding.detail)

# %% [markdown]
# The Triton backend honours the window at prefill, extend and verify, but its decode keeps the newest `sws`
# keys counting the query itself (SGLang's `triton_backend.py`, `update_sliding_window_buffer`): one key short
# again, exactly where this report's long decodes spend their time. No flag or variable of SGLang 0.5.23 gives
# Gemma-4's sliding layers all W keys at decode. Every way out the kit recommends, with its cost, is in
# `docs/debugging.md` ("Ways out, and what each still costs"), and `tests/test_ways_out.py` audits each one.
#
# The fix is a code change at aiter's four unified call sites: pass `(sws, 0)` instead of `(sws - 1, 0)`.
# aiter's unified kernel attends `1 + left` keys, so that is W keys:

# %%
fix = ways_out.UNIFIED_CALL_SITE_FIX
layer_0 = routing.plan("gemma4-31b", "decode", strict=False).layer(0)
sws = layer_0.sliding_window_size
for label, window_arg in (("SGLang 0.5.23", (sws - 1, 0)), ("the fix", (sws, 0))):
    print(f"{label:>14}: window_size={window_arg} -> {to_keys('aiter_unified', window_arg)} of "
          f"{layer_0.intended_keys} keys")
print(f"at the {', '.join(fix['call_sites'])} call sites of {fix['file']}: {fix['in_sglang']}")

# %% [markdown]
# Report upstream with `swa-kit audit ... --markdown`: it names the call sites and SGLang's issues #32087 /
# #34354 on the window convention.
#
# ## Takeaway
#
# A report that drifts only after about W tokens points at window handling. `swa-kit audit` names the call
# site and its window argument, a trace confirms what a live server passes, and `swa-kit key-gap` measures
# whether one key short matters for the checkpoint: three measurements, no guessing. Audit a way out before you
# recommend it: on SGLang 0.5.23 each one, the Triton backend included, is one key short somewhere; only
# `(sws, 0)` at the unified call sites attends W keys, and SGLang 0.5.23 does not have it.
