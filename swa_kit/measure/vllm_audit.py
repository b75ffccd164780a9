"""The report on one vLLM 0.34 launch: decisions with their sources, routes, KV-cache groups, then findings.

The same shape and severities as the SGLang audit (:mod:`swa_kit.measure.audit`): findings worst first, each with
its ways out; exit status ``DISAGREES`` when a finding is above info.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swa_kit.exit_codes import ExitCode
from swa_kit.launch.vllm_args import VLLM_KV_CONNECTORS
from swa_kit.launch.vllm_plan import VllmPlan
from swa_kit.measure.audit import SEVERITIES, Finding
from swa_kit.measure.vllm_drafter_audit import admission_findings, admission_rows, drafter_findings, drafter_rows
from swa_kit.tables import format_table
from swa_kit.vllm_versions import VLLM_VERSION


@dataclass
class VllmAudit:
    plan: VllmPlan
    findings: list[Finding]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DISAGREES if any(f.severity != "info" for f in self.findings) else ExitCode.OK


def _meant(kind_plan: Any) -> int | None:
    kind = kind_plan.kind
    return kind.window.keys if kind.attention == "sliding" else None


def _route_findings(plan: VllmPlan) -> list[Finding]:
    found = []
    for kp in plan.kinds:
        for r in kp.routes:
            where = f"{kp.kind.name} layers, {r.mode}, {kp.selection.backend}"
            if r.raises:
                found.append(Finding("raises", f"{r.kernel} stops at the first {r.mode}", r.raises,
                                     ("unset VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT",
                                      "--attention-backend ROCM_AITER_UNIFIED_ATTN"), where))
            if r.wrong:
                found.append(Finding("wrong", f"{r.kernel} computes a wrong {r.mode}", f"{r.wrong}; source: {r.source}",
                                     (f"vLLM {VLLM_VERSION}", "--attention-backend ROCM_AITER_UNIFIED_ATTN"), where))
            meant = _meant(kp)
            if r.keys != meant and kp.kind.attention != "chunked":
                gap = None if r.keys is None or meant is None else r.keys - meant
                title = f"{r.kernel} gets no window: it attends the whole context, {meant} keys meant" \
                    if r.keys is None else f"{r.kernel} attends {r.keys} keys, {meant} meant"
                found.append(Finding("wrong" if gap is None or abs(gap) > 1 else "one-short", title,
                                     f"window argument {r.window_arg!r} ({r.convention}); source: {r.source}",
                                     ("a backend whose call passes the window in the kernel's convention",), where))
    return found


def _memory_findings(plan: VllmPlan) -> list[Finding]:
    local = [k for k in plan.kinds if k.kind.attention != "full"]
    if not local or not plan.kv.hybrid_disabled:
        return []
    every_layer = sum(s.bytes_per_token for s in plan.kv.specs)
    windows = {k.kind.name: k.kind.retained_tokens for k in local}
    full_only = sum(s.bytes_per_token for s, t in zip(plan.kv.specs, plan.model.layer_types) if t not in windows)
    names = ", ".join(windows)
    return [Finding("memory", f"{names} layers pay for the whole context",
                    f"with the hybrid KV-cache manager off ({plan.kv.hybrid_rule}) vLLM promotes their local specs "
                    "to FullAttentionSpec (unify_hybrid_kv_cache_specs): every token costs "
                    f"{every_layer:,} B across the layers, against {full_only:,} B for the full layers with the "
                    f"manager on, where {names} layers keep only {windows} tokens (plus in-flight ones) per "
                    "request (vLLM #39254)",
                    _hybrid_ways(plan.kv.hybrid_rule), "KV-cache groups")]


def _hybrid_ways(rule: str) -> tuple[str, ...]:
    """How to turn the manager back on, by the rule that turned it off."""
    if "PR #41847" in rule:
        return (f"vLLM {VLLM_VERSION} (PR #41847 keeps it on for a connector that supports it)",
                "--no-disable-hybrid-kv-cache-manager")
    if "--kv-transfer-config" in rule:
        return ("a KV connector whose class supports the hybrid manager (SupportsHMA): " +
                ", ".join(name for name, hma in VLLM_KV_CONNECTORS.items() if hma),)
    if "chunked" in rule:
        return ("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (without a drafter on hidden states)",)
    return ("drop --disable-hybrid-kv-cache-manager",)


def _info_findings(plan: VllmPlan) -> list[Finding]:
    found = []
    if "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION" in plan.env:
        found.append(Finding("info", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION does not choose a backend",
                             "vLLM 0.34 reads it into rocm_aiter_ops.is_triton_unified_attn_enabled, which no "
                             "backend selection code calls; ROCM_AITER_UNIFIED_ATTN is tried whenever aiter is "
                             "installed (_get_backend_priorities)",
                             ("--attention-backend ROCM_AITER_UNIFIED_ATTN",), "environment"))
    for kp in plan.kinds:
        if kp.selection.rejected:
            found.append(Finding("info", f"{kp.kind.name} layers fall through to {kp.selection.backend}",
                                 kp.selection.rejected_text,
                                 (), f"{kp.kind.name} layers"))
    return found


def audit_vllm(plan: VllmPlan) -> VllmAudit:
    findings = (_route_findings(plan) + _memory_findings(plan) + drafter_findings(plan) + admission_findings(plan)
                + _info_findings(plan))
    findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    return VllmAudit(plan, findings)


def _route_rows(plan: VllmPlan) -> list[dict[str, Any]]:
    rows = []
    for kp in plan.kinds:
        meant = _meant(kp)
        for r in kp.routes:
            keys = "all" if r.keys is None and meant is None else f"{'all' if r.keys is None else r.keys}/{meant}"
            if kp.kind.attention == "chunked":
                keys = f"chunks of {kp.kind.chunk_size} (ChunkedLocalAttention's virtual batches)"
            rows.append({"mode": r.mode, "backend": kp.selection.backend, "kind": kp.kind.name, "layers": kp.layers,
                         "kernel": r.kernel, "window_arg": r.window_arg, "keys": keys,
                         "vllm": "RAISES" if r.raises else "runs"})
    return rows


def _group_rows(plan: VllmPlan) -> list[dict[str, Any]]:
    return [{"group": i, "spec": g.kind, "layers": len(g.layers), "block_size": g.specs[0].block_size,
             "sliding_window": g.specs[0].sliding_window, "page_bytes": g.specs[0].page_size_bytes,
             "bytes_per_token_per_layer": g.specs[0].bytes_per_token, "token_slots": plan.num_blocks
             * g.specs[0].block_size} for i, g in enumerate(plan.kv.groups)]


#: The known bugs under each finding ("matches vLLM #28539, fixed in #29234"), filled by the command layer.
KnownBugs = Mapping[Finding, Sequence[str]]


def to_json(report: VllmAudit, known_bugs: KnownBugs | None = None) -> dict[str, Any]:
    plan = report.plan
    return {"engine": "vllm", "model": {"name": plan.model.name, "architecture": plan.model.architecture},
            "platform": plan.platform, "vllm_args": plan.args.given(), "env": plan.env,
            "decisions": [{"decision": d.decision, "value": d.value, "source": d.source} for d in plan.decisions],
            "routes": _route_rows(plan), "kv_cache_groups": _group_rows(plan),
            "drafter_layers": drafter_rows(plan), "admission": admission_rows(plan),
            "findings": [{**f.to_json(), "known_bugs": list((known_bugs or {}).get(f, ()))} for f in report.findings],
            "exit_code": int(report.exit_code)}


def render_vllm(report: VllmAudit, markdown: bool = False, known_bugs: KnownBugs | None = None) -> str:
    plan, h = report.plan, ("## " if markdown else "== ")
    lines = [f"{'# ' if markdown else ''}swa-kit audit: {plan.model.display_name} ({plan.model.architecture}) on "
             f"{plan.platform}, vLLM {plan.decisions[0].value}", ""]
    if plan.args.given():
        lines += ["vllm serve flags: " + ", ".join(f"{k}={v!r}" for k, v in plan.args.given().items()), ""]
    if plan.env:
        lines += ["environment: " + " ".join(f"{k}={v}" for k, v in plan.env.items()), ""]
    lines += [f"{h}Decisions (what vLLM does; each names what it mirrors)", ""]
    lines += format_table([{"decision": d.decision, "value": d.value, "source": d.source} for d in plan.decisions],
                          ["decision", "value", "source"], markdown=markdown).splitlines()
    lines += ["", f"{h}Routes per layer kind (keys = attended / meant)", ""]
    lines += format_table(_route_rows(plan), ["mode", "backend", "kind", "layers", "kernel", "window_arg", "keys",
                                              "vllm"], markdown=markdown).splitlines()
    lines += ["", f"{h}KV-cache groups (one pool of block ids shared by all groups)", ""]
    lines += format_table(_group_rows(plan), ["group", "spec", "layers", "block_size", "sliding_window", "page_bytes",
                                              "bytes_per_token_per_layer", "token_slots"],
                          markdown=markdown).splitlines()
    if plan.drafter is not None:
        lines += ["", f"{h}Drafter layers ({plan.drafter.method}; KV writes: {plan.drafter.writes})", ""]
        lines += format_table(drafter_rows(plan), ["layer", "attention", "window", "spec", "block_size", "group",
                                                   "reads_kv_of", "writes_through_group"],
                              markdown=markdown).splitlines()
    if plan.admission is not None:
        gate = plan.admission
        lines += ["", f"{h}Admission of a {gate.prompt_tokens}-token prompt ({gate.blocks(gate.prompt_tokens)} of "
                      f"{gate.pool_blocks} blocks; longest admitted: {gate.largest_prompt} tokens)", ""]
        lines += format_table(admission_rows(plan), ["group", "spec", "drafter", "block_size", "cap", "blocks",
                                                     "tokens"], markdown=markdown).splitlines()
    lines += ["", f"{h}Findings (worst first)", ""]
    for i, f in enumerate(report.findings, 1):
        ways = f"way out: {'; or '.join(f.ways_out)}" if f.ways_out else "way out: see the detail"
        if markdown:
            lines += [f"{i}. **[{f.severity}]** {f.title} ({f.where})", f"   - {f.detail}", f"   - {ways}"]
            bugs = list((known_bugs or {}).get(f, ()))
            lines += ["   - known bugs:", *(f"     - {bug}" for bug in bugs)] if bugs else []
        else:
            lines += [f"{i}. [{f.severity}] {f.title} ({f.where})", f"   {f.detail}", f"   {ways}",
                      *(f"   {bug}" for bug in (known_bugs or {}).get(f, ()))]
    if not report.findings:
        lines.append("none")
    code = report.exit_code
    lines += ["", f"exit code {int(code)} ({'findings' if code == ExitCode.DISAGREES else 'no finding above info'})"]
    return "\n".join(lines)


def render_vllm_json(report: VllmAudit, known_bugs: KnownBugs | None = None) -> str:
    return json.dumps(to_json(report, known_bugs), indent=2, default=str)
