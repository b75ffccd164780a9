"""Notebook 07, one model on two engines: the window argument each engine hands aiter's ``unified_attention`` for a
sliding layer, and what a token of context costs on each engine's KV cache.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from swa_kit.launch.vllm_drafter import Drafter, read_drafter
from swa_kit.lessons.workshop.verdict import Verdict, check, number, pair
from swa_kit.measure.both_audit import BothAudit, audit_both, sglang_memory, vllm_memory
from swa_kit.models.configs import load_model

#: The notebook's launch: Gemma-4 on SGLang's aiter backend with its MTP drafter, and on vLLM's aiter unified
#: backend (the one aiter backend vLLM 0.34 accepts for every Gemma-4 layer); the drafter reaches vLLM mapped.
MODEL = "gemma4-31b"
SGLANG_ARGS = "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP --tp 2"
VLLM_ARGS = "--attention-backend ROCM_AITER_UNIFIED_ATTN"


ASSISTANT_ORIGIN = ("ILLUSTRATIVE Gemma-4 assistant config: the target's attention geometry, one sliding and one "
                    "full layer (the kit bundles no published assistant config; vLLM's rule does not depend on the "
                    "layer count)")


def illustrative_assistant(model: str = MODEL) -> Drafter:
    """A Gemma-4 assistant drafter as vLLM reads one (``gemma4_assistant``: every layer Q-only), labelled as
    illustrative: the target's text config with one layer of each kind."""
    text = load_model(model).hf_config["text_config"]
    raw = {"model_type": "gemma4_assistant", "architectures": ["Gemma4AssistantForCausalLM"],
           "text_config": {**text, "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}}
    return read_drafter(raw, ASSISTANT_ORIGIN)


@cache
def the_launch(model: str = MODEL, sglang_args: str = SGLANG_ARGS, vllm_args: str = VLLM_ARGS) -> BothAudit:
    """The notebook's launch on both engines (:func:`swa_kit.measure.both_audit.audit_both`), vLLM's drafter
    placed from :func:`illustrative_assistant`."""
    return audit_both(model=model, server_args=sglang_args, vllm_args=vllm_args,
                      vllm_drafter=illustrative_assistant(model))


def unified_window_args(mode: str = "decode") -> dict[str, Any]:
    """Exercise 7.1: what each engine hands aiter's ``unified_attention`` for a sliding layer in ``mode``, and the
    keys that kernel then attends (read from each engine's plan)."""
    report = the_launch()
    assert report.sglang is not None and report.vllm is not None  # the notebook's launch runs on both
    s = next(e for e in report.sglang.decisions.routes[("target", mode)].layers if e.kind == "sliding")
    v = next(r for k in report.vllm.plan.kinds if k.kind.name == "sliding" for r in k.routes if r.mode == mode)
    return {"sglang": tuple(s.window_arg), "vllm": tuple(v.window_arg), "sglang_keys": s.effective_keys,
            "vllm_keys": v.keys, "meant": s.intended_keys}


@check("7.1")
def check_unified_window_args(sglang_arg: Any, vllm_arg: Any) -> Verdict:
    """Exercise 7.1: the ``window_size`` pair each engine passes aiter's ``unified_attention`` for a Gemma-4
    sliding layer at decode."""
    sglang_arg = pair(sglang_arg, "SGLang's window argument as a (left, right) pair of whole numbers")
    vllm_arg = pair(vllm_arg, "vLLM's window argument as a (left, right) pair of whole numbers")
    truth = unified_window_args()
    right = [sglang_arg == truth["sglang"], vllm_arg == truth["vllm"]]
    if all(right):
        return Verdict("7.1", True, f"SGLang passes {truth['sglang']}, vLLM {truth['vllm']}: one kernel, which "
                                    f"attends 1 + left keys, so {truth['sglang_keys']} against {truth['vllm_keys']} "
                                    f"of the {truth['meant']} keys meant.")
    hints = ["SGLang: start from sliding_window_size (W - 1) and apply its unified call sites' (sws - 1, 0)",
             "vLLM: every ROCm backend stores the window as FlashAttention's (W - 1, 0) and passes that pair"]
    return Verdict("7.1", False, "; ".join(h for h, ok in zip(hints, right) if not ok) + ".")


def context_token_ratio() -> float:
    """Exercise 7.2: SGLang's KV bytes per token of context over vLLM's, at each engine's default sizing."""
    report = the_launch()
    assert report.sglang is not None and report.vllm is not None
    return sglang_memory(report.sglang)["per_context_token"] / vllm_memory(report.vllm.plan)["per_context_token"]


@check("7.2")
def check_context_token_ratio(ratio: Any) -> Verdict:
    """Exercise 7.2: how many times vLLM's KV bytes per token of context SGLang's default sizing spends (within
    0.05)."""
    ratio = number(ratio, "the ratio SGLang / vLLM, a number")
    truth = context_token_ratio()
    if abs(ratio - truth) <= 0.05:
        return Verdict("7.2", True, f"{truth:.2f}x: SGLang's SWA pool is sized at start-up as a share of the full "
                                    "pool, so every token of context pays for it; vLLM's sliding groups hold only each "
                                    "request's window, paid per request, not per token.")
    return Verdict("7.2", False, "SGLang: full cell + ratio x SWA cell per token of context; vLLM: only the full "
                                 "layers grow with the context (the sliding groups keep a window per request).")
