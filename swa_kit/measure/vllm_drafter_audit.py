"""The vLLM audit's drafter and admission parts: where the drafter's layers land and write, what a request is
charged at admission, and the findings they raise (vLLM #50169, #55800)."""

from __future__ import annotations

from typing import Any

from swa_kit.launch.vllm_drafter import NO_DRAFT_MODEL
from swa_kit.launch.vllm_plan import VllmPlan
from swa_kit.measure.audit import Finding

#: Title text that marks each finding class (what the bug corpus looks for).
MISROUTED = "is written through another group's block table"
NEVER_ADMITTED = "is never admitted"


def drafter_findings(plan: VllmPlan) -> list[Finding]:
    method = (plan.args.speculative_config or {}).get("method")
    drafter = plan.drafter
    if drafter is None:
        if method is None or method in NO_DRAFT_MODEL:
            return []
        return [Finding("info", "drafter layers not placed",
                        f"vLLM builds the {method} drafter's layers from the drafter's own config.json (the "
                        "speculative config's model); without it the audit cannot say which KV-cache groups they "
                        "land in", ("--draft-hf-config PATH (the drafter's config.json)",), "drafter")]
    found = []
    for layer in drafter.layers:
        if not layer.misrouted:
            continue
        assert layer.writes_group is not None
        owner = "the target's" if layer.writes_group in drafter.groups_shared_with_target else "another drafter"
        found.append(Finding(
            "wrong", f"drafter layer {layer.index}'s KV {MISROUTED}",
            f"the layer lands in group {layer.group}, but its context KV is written through group "
            f"{layer.writes_group}'s block table ({owner} group's): {drafter.writes}. Its attention then reads "
            f"group {layer.group}'s blocks, which hold no such KV, so drafts are guessed from garbage (vLLM #50169: "
            "acceptance 0.29% against 26.67% with the layers in their own group)",
            ("a vLLM whose DFlash speculator writes each drafter layer through its own group's slot mapping "
             "(0.34.0, for drafters that declare get_draft_kv_cache_layer_names)",
             "a drafter whose layers all share one spec, so they land in one group"), "drafter layers"))
    shared = [layer for layer in drafter.layers if layer.shares_kv_with is not None]
    if shared:
        pairs = ", ".join(f"{layer.index} -> layer {layer.shares_kv_with}" for layer in shared)
        found.append(Finding("info", "drafter layers own no KV: they read the target's",
                             f"kv_sharing_target_layer_name ({pairs}): each joins its target layer's group "
                             "(add_kv_sharing_layers_to_kv_cache_groups) and adds no page to the pool", (),
                             "drafter layers"))
    elif drafter.groups_shared_with_target:
        found.append(Finding("info", "drafter layers share KV-cache groups with target layers",
                             f"groups {list(drafter.groups_shared_with_target)}: KVCacheSpec leaves is_draft out of "
                             "equality, so a drafter layer whose spec equals a target layer's lands in its group and "
                             "shares its block table", (), "drafter layers"))
    return found


def admission_findings(plan: VllmPlan) -> list[Finding]:
    """A launch that starts but cannot admit a prompt it was started for: the request waits until it times out."""
    gate = plan.admission
    if gate is None or not gate.starts or gate.largest_prompt >= gate.max_model_len:
        return []
    longest, charges = gate.largest_prompt, gate.charges(gate.max_model_len)
    drafter = "; ".join(f"group {c.group} ({c.kind}) {c.blocks} blocks" for c in charges
                        if c.group in gate.drafter_groups and c.kind == "SlidingWindowSpec")
    return [Finding(
        "raises", f"a prompt of {longest + 1} to {gate.max_model_len} tokens {NEVER_ADMITTED}: it waits until it "
                  "times out",
        f"the start-up check passed on {gate.startup_blocks} blocks"
        + (f" (drafter groups {sorted(gate.sized_for_window)} sized for their window)" if gate.sized_for_window
           else "")
        + f", but admission (allocate_slots, full_sequence_must_fit) charges a {gate.max_model_len}-token prompt "
        f"{gate.blocks(gate.max_model_len)} of the pool's {gate.pool_blocks} blocks, the drafter's sliding group "
        f"for the prompt, not its window ({drafter}). The request stays WAITING with the KV cache empty "
        "(vLLM #55800)",
        ("a vLLM that sizes start-up and admission from one rule, max_admission_blocks_per_request (PR #40946, "
         "in 0.34.0)",
         f"--max-model-len {longest}"), "admission")]


def drafter_rows(plan: VllmPlan) -> list[dict[str, Any]]:
    if plan.drafter is None:
        return []
    return [{"layer": layer.index, "attention": layer.attention, "window": layer.window, "spec": layer.spec,
             "block_size": layer.block_size, "group": layer.group,
             "reads_kv_of": layer.shares_kv_with, "writes_through_group": layer.writes_group}
            for layer in plan.drafter.layers]


def admission_rows(plan: VllmPlan) -> list[dict[str, Any]]:
    gate = plan.admission
    if gate is None:
        return []
    return [{"group": c.group, "spec": c.kind, "drafter": c.drafter, "block_size": c.block_size, "cap": c.cap,
             "blocks": c.blocks, "tokens": c.tokens} for c in gate.prompt_charges]
