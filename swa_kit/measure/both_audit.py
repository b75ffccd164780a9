"""One launch on SGLang and on vLLM, side by side: keys per layer kind, memory per GPU, the draft's KV, findings.

Each side is the engine's own audit (:mod:`swa_kit.measure.audit` for SGLang, :mod:`swa_kit.measure.vllm_audit`
for vLLM); this module only lines them up. An engine that refuses the launch at start-up keeps its column, holding
its refusal. Exit status: ``BAD_INPUT`` when an engine refuses the launch (as its own audit would exit), else
``DISAGREES`` when either engine has a finding above info, else ``OK``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swa_kit.errors import LaunchRefusedError, UsageError
from swa_kit.exit_codes import ExitCode
from swa_kit.launch.inputs import GIB, Launch, flag_words, parse_server_args, server_args_text
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.launch.two_engines import MappedFlag, PairedLaunch, pair, split_env
from swa_kit.launch.vllm_args import parse_vllm_flags
from swa_kit.launch.vllm_drafter import Drafter, read_drafter_file
from swa_kit.launch.vllm_plan import VLLM_PLATFORMS, VllmPlan, plan
from swa_kit.measure.audit import SEVERITIES, Audit, Finding, audit
from swa_kit.measure.vllm_audit import VllmAudit, audit_vllm
from swa_kit.models.configs import LayerKind, ModelLayout, load_hf_config, load_model
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.vllm_versions import VLLM_VERSION
from swa_kit.tables import format_table

#: The forward modes compared: SGLang's (worker, mode) and vLLM's mode for the same work (vLLM has no separate
#: extend: a prefill that continues a cached prefix is a prefill).
MODES = (("prefill", ("target", "prefill"), "prefill"), ("extend", ("target", "extend"), "prefill"),
         ("decode", ("target", "decode"), "decode"), ("verify", ("target", "verify"), "verify"),
         ("draft extend", ("draft", "draft_extend"), None), ("draft decode", ("draft", "draft_decode"), None))
NOT_PLACED = "not placed: no drafter config given"
#: vLLM's drafter layers are placed in KV-cache groups (``draft_rows``); the kit routes only the target's layers.
NOT_ROUTED = "not routed: the kit's vLLM plan routes the target's layers only"


@dataclass
class BothAudit:
    model: ModelLayout
    paired: PairedLaunch
    sglang_flags: str  # the flags SGLang gets (the user's and the mapped ones)
    vllm_flags: str
    sglang: Audit | None
    vllm: VllmAudit | None
    # why an engine has no plan: its own start-up refusal, or a surface the kit refuses to guess (the text says which)
    sglang_refusal: str | None = None
    vllm_refusal: str | None = None
    known_bugs: dict[Finding, list[str]] = field(default_factory=dict)  # the corpus's bugs under each finding

    @property
    def exit_code(self) -> ExitCode:
        if self.sglang_refusal or self.vllm_refusal:
            return ExitCode.BAD_INPUT
        sides = [a for a in (self.sglang, self.vllm) if a is not None]
        return ExitCode.DISAGREES if any(a.exit_code == ExitCode.DISAGREES for a in sides) else ExitCode.OK


def _draft_config(paired: PairedLaunch, algorithm: str | None,
                  config: str | Path | None) -> tuple[PairedLaunch, str | Path | None]:
    """Who reads the drafter's config: vLLM always (it places the drafter's layers); SGLang unless its draft reads
    the target's own layers (FROZEN_KV MTP), whose layout the kit takes from the target. Said in the launch table."""
    if config is None:
        return paired, None
    reads_target = algorithm is not None and SpeculativeAlgorithm.from_string(algorithm).traits.reads_target_pool
    row = MappedFlag("drafter config", f"not read: {algorithm}'s draft reads the target's layers" if reads_target
                     else f"--draft-hf-config {config}", f"--draft-hf-config {config}",
                     "vLLM's own" if reads_target else "given on both")
    return replace(paired, rows=(*paired.rows, row)), None if reads_target else config


def audit_both(*, model: str | None = None, hf_config: str | Path | None = None, server_args: str | None = None,
               vllm_args: str = "", env: dict[str, str] | None = None, platform: str = "rocm-gfx942",
               gpu_memory_gib: float | None = None, weights_gib: float | None = None,
               sglang_version: str = SGLANG_VERSION, draft_hf_config: str | Path | None = None,
               vllm_version: str = VLLM_VERSION, prompt_tokens: int | None = None,
               vllm_drafter: Drafter | None = None) -> BothAudit:
    """One launch on both engines: ``server_args`` are SGLang's flags (or a file holding the command),
    ``vllm_args`` vLLM's; ``env`` holds both engines' variables (``VLLM_*`` are vLLM's); ``draft_hf_config`` is the
    drafter's config, which both engines read (vLLM places its layers), or ``vllm_drafter`` one already read. Bad
    input raises :class:`~swa_kit.errors.UsageError`; an engine's start-up refusal is kept in the report."""
    if platform not in VLLM_PLATFORMS:
        raise UsageError(f"--platform {platform}: --engine both needs a platform both engines are audited on: "
                         f"{', '.join(VLLM_PLATFORMS)}")
    s_text = server_args_text(server_args) or ""
    if "ServerArgs(" in s_text:
        raise UsageError("--engine both needs SGLang's flags or launch command: a logged ServerArgs(...) line holds "
                         "SGLang's resolved values, which cannot be told from the flags given")
    layout = load_model(model) if model is not None else load_hf_config(hf_config) if hf_config is not None else None
    if layout is None:
        raise UsageError("give exactly one of --hf-config PATH (a config.json or model directory) or --model NAME")
    s_env, v_env = split_env(env or {})
    paired = pair(parse_server_args(s_text), parse_vllm_flags(vllm_args), layout)
    s_flags = shlex.join(flag_words(s_text) + list(paired.sglang_words))
    v_flags = " ".join(w for w in (vllm_args.strip(), shlex.join(paired.vllm_words)) if w)
    paired, s_draft = _draft_config(paired, parse_server_args(s_flags).speculative_algorithm, draft_hf_config)
    launch = Launch.from_inputs(hf_config=hf_config, model=model, server_args=s_flags or None, env=s_env,
                                platform=platform, gpu_memory_gib=gpu_memory_gib, sglang_version=sglang_version,
                                draft_hf_config=s_draft, weights_gib=weights_gib)
    report = BothAudit(layout, paired, s_flags, v_flags, None, None)
    try:
        report.sglang = audit(launch)
    except LaunchRefusedError as error:
        report.sglang_refusal = str(error)
    v_parsed = parse_vllm_flags(v_flags)  # bad flags are bad input, not vLLM's refusal
    if vllm_drafter is not None and draft_hf_config is not None:
        raise UsageError("give the drafter once: its config file or the drafter read from it")
    drafter = vllm_drafter if draft_hf_config is None else read_drafter_file(draft_hf_config)
    try:
        report.vllm = audit_vllm(plan(layout, v_parsed, v_env, platform, gpu_memory_gib, weights_gib, vllm_version,
                                      drafter, prompt_tokens))
    except UsageError as error:  # the vLLM plan's refusals: vLLM's own at start-up, or a surface not modelled
        report.vllm_refusal = str(error)
    report.known_bugs = _known_bugs(report)
    return report


def _known_bugs(report: BothAudit) -> dict[Finding, list[str]]:
    """The known bugs of the corpus under each engine's findings, as each engine's own audit names them."""
    from swa_kit.measure.bugs import match
    from swa_kit.measure.vllm_bug_match import match_vllm

    found = [] if report.sglang is None else match(report.sglang)
    found += [] if report.vllm is None else match_vllm(report.vllm)
    return {m.finding: list(m.lines()) for m in found}


def _meant(kind: LayerKind) -> str:
    if kind.attention == "chunked":
        return f"chunks of {kind.chunk_size}"
    return "all" if kind.window.keys is None else str(kind.window.keys)


def _sglang_cell(report: Audit | None, key: tuple[str, str], kind: str) -> dict[str, Any] | None:
    """SGLang's kernel, window argument and keys for ``kind`` layers in one (worker, mode); None: no such route."""
    if report is None or key not in report.decisions.routes:
        return None
    entries = [e for e in report.decisions.routes[key].layers if e.kind == kind]
    if not entries:
        return None
    calls = dict.fromkeys((e.kernel, str(e.window_arg), "RAISES" if e.sglang_guard else
                           "all" if e.effective_keys is None else str(e.effective_keys)) for e in entries)
    return {"kernel": "; ".join(c[0] for c in calls), "window_arg": "; ".join(c[1] for c in calls),
            "keys": "; ".join(c[2] for c in calls), "layers": len(entries)}


def _vllm_cell(plan: VllmPlan | None, mode: str | None, kind: str) -> dict[str, str] | None:
    if plan is None or mode is None:
        return None
    for kp in plan.kinds:
        for r in kp.routes:
            if kp.kind.name == kind and r.mode == mode:
                keys = "RAISES" if r.raises else "all" if r.keys is None else str(r.keys)
                return {"kernel": f"{r.kernel} ({kp.selection.backend})", "window_arg": str(r.window_arg),
                        "keys": keys}
    return None


def key_rows(report: BothAudit) -> list[dict[str, Any]]:
    """Per layer kind and forward mode: each engine's kernel, window argument and keys attended, and keys meant."""
    plan = report.vllm.plan if report.vllm else None
    speculative = bool(report.sglang and report.sglang.launch.spec_algorithm.is_some()) or \
        bool(plan and plan.args.speculative_config)
    rows = []
    for name, kind in report.model.kinds.items():
        for label, sglang_key, vllm_mode in MODES:
            if not speculative and label in ("verify", "draft extend", "draft decode"):
                continue
            s, v = _sglang_cell(report.sglang, sglang_key, name), _vllm_cell(plan, vllm_mode, name)
            if s is None and v is None and vllm_mode is not None:
                continue
            if v is None and vllm_mode is None:
                v = {"kernel": NOT_ROUTED, "window_arg": "", "keys": ""}
            empty = {"kernel": "-", "window_arg": "", "keys": ""}
            s, v = s or empty, v or empty
            # a draft runs its own layers (SGLang's FROZEN_KV MTP: one of each kind), the target the model's
            layers = s["layers"] if sglang_key[0] == "draft" and "layers" in s else \
                report.model.layer_types.count(name)
            rows.append({"kind": name, "layers": layers, "mode": label,
                         "sglang_kernel": s["kernel"], "sglang_window_arg": s["window_arg"],
                         "sglang_keys": s["keys"], "vllm_kernel": v["kernel"], "vllm_window_arg": v["window_arg"],
                         "vllm_keys": v["keys"], "meant": _meant(kind)})
    return rows


def _full_block_tokens(plan: VllmPlan) -> int:
    """Tokens one pool block holds in the full-attention group (the first group when there is none)."""
    group = next((g for g in plan.kv.groups if g.kind == "FullAttentionSpec"), plan.kv.groups[0])
    return group.specs[0].block_size


def vllm_memory(plan: VllmPlan) -> dict[str, Any]:
    """vLLM's KV figures per GPU, read from its plan."""
    layer_of = {name: plan.model.layer_types.index(name) for name in plan.model.kinds}
    tokens = plan.num_blocks * _full_block_tokens(plan)
    local = [k.name for k in plan.model.kinds.values() if k.attention != "full"]
    if not local:
        keeps = "no sliding layers"
    elif plan.kv.hybrid_disabled:
        keeps = f"every token (hybrid KV-cache manager off: {plan.kv.hybrid_rule})"
    else:
        keeps = "per request: W - 1 + tokens in flight (SlidingWindowSpec); older blocks freed"
    return {"heads": {n: plan.kv.specs[i].num_kv_heads for n, i in layer_of.items()},
            "every_layer": sum(s.bytes_per_token for s in plan.kv.specs),
            "per_context_token": plan.kv.bytes_per_block / _full_block_tokens(plan), "keeps": keeps,
            "budget": plan.available_bytes, "tokens": tokens, "gpus": plan.args.tensor_parallel_size}


def sglang_memory(report: Audit) -> dict[str, Any]:
    """SGLang's KV figures per GPU, read from its decisions."""
    pools, model = report.decisions.pools, report.launch.model
    if not pools.hybrid:
        keeps = "every token: one pool" + ("" if not model.has_window else
                                            f" ({report.decisions.hybrid_swa_memory.source})")
    else:
        ratio = "" if pools.ratio is None else f" (ratio {pools.ratio} x the full pool)"
        keeps = (f"SWA pool: {pools.swa_tokens:,} tokens{ratio}, shared; out-of-window slots freed"
                 if pools.swa_tokens is not None else "an SWA pool")
    return {"heads": {n: pools.parallel.kv_heads_per_gpu(k.num_kv_heads) for n, k in model.kinds.items()},
            "every_layer": pools.one_pool_cell_bytes, "per_context_token": pools.bytes_per_context_token,
            "keeps": keeps, "budget": pools.budget_bytes, "tokens": pools.full_tokens, "gpus": pools.parallel.gpus}


def _per_gib(tokens: int | None, budget: int | None) -> float | None:
    return None if not tokens or not budget else round(tokens / (budget / GIB), 1)


_MEMORY_ROWS = (
    ("GPUs (tensor parallel)", "gpus", "every figure below is per GPU"),
    ("KV heads per GPU", "heads", "heads split over the ranks, or replicated when fewer than the ranks"),
    ("KV bytes per token, every layer keeping it", "every_layer", "one pool of every layer, at each engine's KV dtype"),
    ("KV bytes per token of context", "per_context_token", "SGLang: full cell + ratio x SWA cell; vLLM: one pool "
     "block over the full-attention group's block size (sliding groups take their window per request on top)"),
    ("sliding layers keep", "keeps", "SGLang sizes an SWA pool at start-up; vLLM's hybrid manager keeps windows"),
    ("KV budget per GPU (bytes)", "budget", "each engine's own budget: SGLang's --mem-fraction-static estimate, "
     "vLLM's --gpu-memory-utilization; weights subtracted only where --weights-gib is given"),
    ("tokens per GPU", "tokens", "SGLang: the full pool's tokens; vLLM: pool blocks x the full group's block "
     "size (upper bound: no block held by a sliding group)"),
)


def memory_rows(report: BothAudit) -> list[dict[str, Any]]:
    """Memory per GPU on each engine: the same quantities, each engine's value and how it is found."""
    s = sglang_memory(report.sglang) if report.sglang else {}
    v = vllm_memory(report.vllm.plan) if report.vllm else {}
    rows = [{"quantity": label, "sglang": s.get(key), "vllm": v.get(key), "how": how}
            for label, key, how in _MEMORY_ROWS]
    rows.append({"quantity": "tokens per GiB of KV budget", "sglang": _per_gib(s.get("tokens"), s.get("budget")),
                 "vllm": _per_gib(v.get("tokens"), v.get("budget")), "how": "tokens per GPU / budget: the budgets "
                 "differ, this does not"})
    return rows


def _vllm_drafter_rows(plan: VllmPlan) -> list[dict[str, Any]]:
    """Each drafter layer's place in vLLM's KV-cache groups, from the plan (placed only with the drafter's config)."""
    config = plan.args.speculative_config
    rows = [{"engine": "vLLM", "what": "drafter", "value": "none" if config is None else config.get("method"),
             "how": "--speculative-config"}]
    if config is None:
        return rows
    if plan.drafter is None:
        return rows + [{"engine": "vLLM", "what": "drafter layers' KV-cache groups", "value": NOT_PLACED,
                        "how": "give the drafter's config (--draft-hf-config) to place its layers"}]
    for layer in plan.drafter.layers:
        if layer.shares_kv_with is not None:
            value = f"reads target layer {layer.shares_kv_with}'s KV (group {layer.group}); owns none"
        else:
            writes = "" if layer.writes_group in (None, layer.group) else f", writes through group {layer.writes_group}"
            value = f"own {layer.spec} in group {layer.group}{writes}"
        rows.append({"engine": "vLLM", "what": f"drafter layer {layer.index} ({layer.attention})", "value": value,
                     "how": plan.drafter.origin})
    return rows + [{"engine": "vLLM", "what": "drafter KV writes", "value": plan.drafter.writes,
                    "how": "vllm/v1/worker/gpu/spec_decode/"}]


def draft_rows(report: BothAudit) -> list[dict[str, Any]]:
    """The draft's KV on each engine: SGLang's draft pool and resolver, vLLM's drafter layers in its groups."""
    rows: list[dict[str, Any]] = []
    if report.sglang is not None:
        d = report.sglang.decisions
        rows += [{"engine": "SGLang", "what": "draft pool", "value": d.draft_pool.value.pool,
                  "how": d.draft_pool.source},
                 {"engine": "SGLang", "what": "draft layers in the target's pool",
                  "value": d.draft_layers_in_pool.value, "how": d.draft_layers_in_pool.source},
                 {"engine": "SGLang", "what": "pool the draft translates slots against", "value": d.resolver.value,
                  "how": d.resolver.source}]
        decode = d.routes.get(("draft", "draft_decode"))
        if report.sglang.launch.spec_algorithm.traits.reads_target_pool and decode is not None:
            read = ", ".join(f"{e.kind} layer {e.target_layer} ({e.page_table} pool)" for e in decode.layers)
            rows.append({"engine": "SGLang", "what": "target layers the draft reads", "value": read,
                         "how": "the draft's layers borrow the target's caches, through the pool the resolver "
                                "returns"})
    if report.vllm is not None:
        rows += _vllm_drafter_rows(report.vllm.plan)
    return rows


def finding_rows(report: BothAudit) -> list[tuple[str, Finding]]:
    """Each engine's findings, worst first within the engine; a refusal is the engine's one ``raises`` finding."""
    out: list[tuple[str, Finding]] = []
    for engine, side, refusal in (("SGLang", report.sglang, report.sglang_refusal),
                                  ("vLLM", report.vllm, report.vllm_refusal)):
        if refusal:
            out.append((engine, Finding("raises", f"no {engine} plan: the launch is refused", refusal, (),
                                        "start-up")))
        elif side is not None:
            out += [(engine, f) for f in sorted(side.findings, key=lambda f: SEVERITIES.index(f.severity))]
    return out


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def to_json(report: BothAudit) -> dict[str, Any]:
    from swa_kit.measure.audit import to_json as sglang_json
    from swa_kit.measure.vllm_audit import to_json as vllm_json

    return {
        "engine": "both", "model": {"name": report.model.name, "architecture": report.model.architecture},
        "launch": [vars(r) for r in report.paired.rows],
        "sglang": {"version": SGLANG_VERSION, "flags": report.sglang_flags, "refused": report.sglang_refusal,
                   "audit": None if report.sglang is None else sglang_json(report.sglang)},
        "vllm": {"version": VLLM_VERSION, "flags": report.vllm_flags, "refused": report.vllm_refusal,
                 "audit": None if report.vllm is None else vllm_json(report.vllm)},
        "keys": key_rows(report), "memory": memory_rows(report), "draft": draft_rows(report),
        "findings": [{"engine": e, **f.to_json(), "known_bugs": report.known_bugs.get(f, [])}
                     for e, f in finding_rows(report)],
        "exit_code": int(report.exit_code)}


def render_json(report: BothAudit) -> str:
    return json.dumps(to_json(report), indent=2, default=str)


def table_text(rows: list[dict[str, Any]], columns: list[str], markdown: bool = False) -> str:
    """Rows of this report as a text (or Markdown) table: numbers with thousands separators, dicts as ``k v``."""
    return format_table(rows, columns, markdown=markdown, cell=_cell)


def _table(rows: list[dict[str, Any]], columns: list[str], markdown: bool) -> list[str]:
    return table_text(rows, columns, markdown).splitlines()


def render(report: BothAudit, markdown: bool = False, command: str = "") -> str:
    """The side by side as text, or as Markdown for a bug report (with ``command``, the audit's own line)."""
    h, model = ("## " if markdown else "== "), report.model
    lines = [f"{'# ' if markdown else ''}swa-kit audit --engine both: {model.display_name} ({model.architecture}): "
             f"SGLang {SGLANG_VERSION} and vLLM {VLLM_VERSION}", ""]
    if markdown and command:
        lines += ["```sh", command, "```", ""]
    if markdown and model.path is not None:
        lines += [f"config: `{model.path}` (SHA-256 `{model.sha256}`)", ""]
    lines += [f"SGLang gets: {report.sglang_flags or '(no flags)'}", f"vLLM gets: {report.vllm_flags or '(no flags)'}",
              "", f"{h}The launch on each engine (a flag of the launch reaches both; an engine's own stays with it)",
              ""]
    lines += _table([vars(r) for r in report.paired.rows], ["meaning", "sglang", "vllm", "how"], markdown) \
        if report.paired.rows else ["no flags: each engine's defaults"]
    lines += ["", f"{h}Keys per layer kind (kernel, window argument, keys attended; meant = the model's window)", ""]
    lines += _table(key_rows(report), ["kind", "layers", "mode", "sglang_kernel", "sglang_window_arg", "sglang_keys",
                                       "vllm_kernel", "vllm_window_arg", "vllm_keys", "meant"], markdown)
    lines += ["", f"{h}KV memory per GPU", ""]
    memory = memory_rows(report)
    if markdown:
        lines += _table(memory, ["quantity", "sglang", "vllm", "how"], True)
    else:  # a terminal: the table, then how each row is found
        lines += _table(memory, ["quantity", "sglang", "vllm"], False)
        lines += ["", *(f"  {row['quantity']}: {row['how']}" for row in memory)]
    lines += ["", f"{h}The draft's KV", ""]
    drafts = draft_rows(report)
    lines += _table(drafts, ["engine", "what", "value", "how"], markdown) if drafts else ["no speculation"]
    lines += ["", f"{h}Findings of each engine (its own audit; worst first)", ""]
    found = finding_rows(report)
    for i, (engine, f) in enumerate(found, 1):
        ways = f"way out: {'; or '.join(f.ways_out) or 'see the detail'}"
        bugs = report.known_bugs.get(f, [])
        if markdown:
            lines += [f"{i}. **{engine} [{f.severity}]** {f.title} ({f.where})", f"   - {f.detail}", f"   - {ways}",
                      *(f"   - {bug}" for bug in bugs)]
        else:
            lines += [f"{i}. {engine} [{f.severity}] {f.title} ({f.where})", f"   {f.detail}", f"   {ways}",
                      *(f"   {bug}" for bug in bugs)]
    if not found:
        lines.append("none")
    code = report.exit_code
    meaning = {ExitCode.OK: "no finding above info", ExitCode.DISAGREES: "findings",
               ExitCode.BAD_INPUT: "a launch refused on one engine"}[code]
    lines += ["", f"exit code {int(code)} ({meaning})"]
    return "\n".join(lines)
