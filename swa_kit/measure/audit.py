"""The report on one launch: SGLang's decisions, then findings ranked by severity, each with its way out.

Severities, worst first: ``wrong`` (the route runs but attends the wrong keys or slots, silently; a window two
or more keys off too), ``raises`` (SGLang or its kernel refuses: its guard, aiter's CK head-dim cap, or a pool too
small to start), ``one-short`` (a window attended
one key short or too many), ``memory`` (what the pools really save against what the user probably
expects), ``info``. Each :class:`Finding` carries its ways out as a tuple of alternatives; text, Markdown
and JSON are rendered from the fields, here at the edge only. The exit status (:class:`~swa_kit.exit_codes.ExitCode`)
is ``OK`` without a finding above info, ``DISAGREES`` with one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from swa_kit.engine.plan_args import BACKENDS
from swa_kit.engine.routing import LayerPlan
from swa_kit.engine.spec_algorithms import PLANNED, decode_evicts_swa
from swa_kit.engine.ways_out import TRITON_BACKEND
from swa_kit.exit_codes import ExitCode
from swa_kit.measure import trace
from swa_kit.errors import LaunchRefusedError
from swa_kit.measure.sglang_check import (FieldCheck, RawLaunch, SGLangCheck, check_launch, differing_items,
                                          on_kit_refusal)
from swa_kit.launch.decide import Decisions, decide
from swa_kit.launch.inputs import GIB, Launch, ServerArgsView
from swa_kit.launch.pool_sizing import PoolSizes
from swa_kit.launch.surface import SURFACE, check_surface
from swa_kit.models.drafts import NO_DRAFT_CONFIG
from swa_kit.sglang_versions import REVERTIBLE_FIXES, SGLANG_VERSION, reverted_fix
from swa_kit.tables import format_table

SEVERITIES = ("wrong", "raises", "one-short", "memory", "info")


@dataclass(frozen=True)
class Finding:
    """One thing the engineer should know, where it occurs, and the ways out (each a whole alternative)."""

    severity: str
    title: str
    detail: str
    ways_out: tuple[str, ...]  # () when none is known beyond the detail
    where: str = ""

    def __post_init__(self) -> None:  # a way out reached by two causes of one route is offered once
        object.__setattr__(self, "ways_out", tuple(dict.fromkeys(self.ways_out)))

    def to_json(self) -> dict[str, Any]:
        """The finding's JSON object: severity, title, detail, ways_out (a list), where."""
        return {"severity": self.severity, "title": self.title, "detail": self.detail,
                "ways_out": list(self.ways_out), "where": self.where}


@dataclass(frozen=True)
class ReportContext:
    """What a bug report carries beyond the audit: versions, the command, and the known bugs under each finding.

    The command layer fills it (the known bugs come from :mod:`swa_kit.measure.bugs`, which imports this
    module, so the audit cannot ask for them itself).
    """

    versions: Mapping[str, str] = field(default_factory=dict)  # e.g. {"swa-kit": ..., "transformers": ...}
    command: str = ""
    known_bugs: Mapping[Finding, Sequence[str]] = field(default_factory=dict)


@dataclass
class Audit:
    launch: Launch
    decisions: Decisions
    findings: list[Finding]
    sglang_check: SGLangCheck | None = None  # the same launch asked of SGLang's own code (--check-with-sglang)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DISAGREES if any(f.severity != "info" for f in self.findings) else ExitCode.OK


_ONE_SHORT_WAYS = ("check whether it matters for your model (W vs W-1 comparison)",
                   "a backend or path that passes the full window (e.g. CK prefill's (sws, -1))")
_KEYS_GAP_WAYS = ("check whether it matters for your model (swa-kit key-gap)",
                  "a backend or path that passes the full window (e.g. CK prefill's (sws, -1))")


def _keys_gap(entry: LayerPlan) -> int | None:
    """Keys meant minus keys attended, where the plan notes a difference (None: none)."""
    if entry.note and entry.effective_keys is not None and entry.intended_keys is not None:
        return entry.intended_keys - entry.effective_keys
    return None


def gap_words(gap: int) -> str:
    """Keys meant minus keys attended, in words: ``one key short``, ``one key too many``, ``2 keys short``."""
    count = "one key" if abs(gap) == 1 else f"{abs(gap)} keys"
    return f"{count} {'short' if gap > 0 else 'too many'}"


def _route_finding(entry: LayerPlan) -> tuple[tuple, Finding] | None:
    """The finding one planned layer gives (keyed so identical findings across modes merge), or None."""
    if entry.sglang_verdict:
        title = entry.sglang_verdict.title or "SGLang's guard refuses this route"
        return ("raises", entry.site, title), Finding("raises", title, entry.sglang_verdict.problem,
                                                      entry.sglang_verdict.ways_out)
    if entry.kit_verdict:
        return ("wrong", entry.kind, entry.site), Finding(
            "wrong", "runs, but attends the wrong keys (silently)", entry.kit_verdict.problem,
            entry.kit_verdict.ways_out)
    gap = _keys_gap(entry)
    if gap is not None:
        # One key either way is the one-short class (SGLang's W vs W - 1 conventions); more is wrong keys outright.
        severity = "one-short" if abs(gap) == 1 else "wrong"
        return (severity, entry.kind, entry.effective_keys), Finding(
            severity, f"{entry.kind} layers attend {entry.effective_keys} of {entry.intended_keys} keys "
                      f"({gap_words(gap)})",
            f"{entry.kernel}: window argument {entry.window_arg} = {entry.window_expr}; {entry.note}",
            _ONE_SHORT_WAYS if abs(gap) == 1 else _KEYS_GAP_WAYS)
    return None


def route_verdict(entry: LayerPlan) -> str:
    """The routes table's ``kit`` column: the severity of the finding this layer gives, or ``ok`` (none)."""
    keyed = _route_finding(entry)
    if keyed is None:
        return "ok"
    gap = _keys_gap(entry)
    if gap is not None and not entry.sglang_verdict and not entry.kit_verdict:
        return gap_words(gap).upper()
    return {"raises": "RAISES", "wrong": "WRONG KEYS"}[keyed[1].severity]


def _route_findings(decisions: Decisions) -> list[Finding]:
    """One finding per distinct problem, naming every (worker, mode) where it occurs."""
    found: dict[tuple, tuple[Finding, list[str]]] = {}
    for (worker, mode), plan in decisions.routes.items():
        for entry in plan.layers:
            keyed = _route_finding(entry)
            if keyed is None:
                continue
            key, finding = keyed
            where = found.setdefault(key, (finding, []))[1]
            if f"{worker} {mode}" not in where:
                where.append(f"{worker} {mode}")
    backend = {plan.pool.backend for plan in decisions.routes.values()}
    # Triton's verify bounds an EAGLE tree's window by draft row (call_sites triton.extend tree_rows): on a tree
    # launch, switching to it trades one wrong route for another, so it is no way out there.
    tree = any(plan.topk > 1 for (_, mode), plan in decisions.routes.items() if mode == "verify")
    return [replace(f, where=f"{', '.join(where)} ({'/'.join(sorted(backend))})",
                    ways_out=tuple(w for w in f.ways_out if not (tree and w == TRITON_BACKEND.text)))
            for f, where in found.values()]


def _unified_finding(decisions: Decisions) -> Finding:
    """``--enable-unified-memory``: one buffer, the ratio only its boot split (swa_kit.launch.unified_memory)."""
    pools, unified = decisions.pools, decisions.unified_memory.value
    slots = unified["max_slots"]
    fused = unified["draft_lanes"]
    return Finding(
        "info", f"one unified buffer of {unified['total_bytes'] / GIB:.1f} GiB per GPU holds the full and SWA pools",
        f"the ratio sets only the boot split ({pools.full_tokens:,} full, {pools.swa_tokens:,} SWA tokens); at run "
        f"time either side can grow into the other's bytes, up to {slots['full']:,} full or {slots['swa']:,} SWA "
        f"slots alone (entries of {unified['entry_bytes']['full']:,} and {unified['entry_bytes']['swa']:,} B"
        + (f", the draft's KV fused in: lanes {fused}" if fused else "") + f"); {decisions.unified_memory.source}",
        ("none needed: SGLang logs 'UNIFIED MEMORY POOL ENABLED' with the buffer's total_bytes and capacities",),
        "pools")


def _memory_findings(launch: Launch, decisions: Decisions) -> list[Finding]:
    pools = decisions.pools
    out = []
    if pools.refused:
        out.append(Finding("raises", "the SWA pool is too small to start", pools.refused,
                           ("raise --swa-full-tokens-ratio", "raise the KV budget (--mem-fraction-static)"),
                           "start-up"))
    saved = decisions.bytes_saved_vs_one_pool.value
    if pools.unified is not None:
        out.append(_unified_finding(decisions))
    elif decisions.hybrid_swa_memory.value and saved is not None:  # None: the full pool's size is unknown
        minimum = decisions.per_request_minimum_bytes.value
        one_pool = decisions.per_request_one_pool_bytes.value
        ideal = 1 - minimum / one_pool
        out.append(Finding(
            "memory", f"the hybrid pool saves {100 * saved:.1f}% of KV bytes per token, not {100 * ideal:.0f}%",
            f"SGLang sizes the SWA pool at start-up as full tokens x ratio ({decisions.pool_configurator.value}); "
            f"{100 * ideal:.0f}% is the per-request minimum at 32k tokens, reached only when the SWA pool holds just "
            "the window of each running request",
            ("lower --swa-full-tokens-ratio", "set --max-running-requests with --disable-radix-cache so the "
             "request-cap configurator sizes the SWA pool from the running requests"), "pools"))
    elif launch.model.has_window:
        # The model is hybrid-SWA and the launch switched its pool off: turning it back on is a real way out.
        way = ("drop --disable-hybrid-swa-memory so SGLang builds the SWA pool (cost: the routes change with it; "
               "on aiter the sliding layers then run unified_attention, one key short)"
               if launch.model.sglang_hybrid_swa_pool else
               "nothing to do on this SGLang version: it gives this architecture no hybrid pool; the routes say "
               "whether the sliding layers still attend their window")
        out.append(Finding("memory", "one full-size pool: the window saves no KV memory",
                           f"hybrid SWA memory is off: {decisions.hybrid_swa_memory.source}", (way,), "pools"))
    if pools is not None and pools.parallel.gpus > 1:
        out.append(Finding("info", f"pools are per GPU, {pools.parallel.gpus} GPUs in all",
                           f"{decisions.parallel.source}; KV bytes on all GPUs: {decisions.kv_bytes_all_gpus.value}",
                           ("none needed: SGLang logs each GPU's pool; --weights-gib is the weights on one GPU",),
                           "pools"))
    out += _draft_pool_findings(launch, pools)
    algorithm = launch.spec_algorithm
    if decisions.hybrid_swa_memory.value and pools is not None and pools.swa_tokens and \
            not decode_evicts_swa(algorithm, launch.sglang_version):
        out.append(Finding(
            "memory", f"out-of-window SWA slots are never freed under {algorithm.name} decode",
            f"{algorithm.name}'s decode preparation runs no SWA eviction (maybe_evict_swa) and advances no "
            "decode_batch_idx, so every generated token keeps its SWA slot: the SWA pool "
            f"({pools.swa_tokens:,} tokens) fills after that many generated tokens across the running requests, "
            f"while the full pool ({pools.full_tokens or 0:,}) is far from full, and the scheduler retracts requests",
            (f"upgrade to SGLang {SGLANG_VERSION} (DFlashDraftInputV2.prepare_for_decode evicts)",
             "raise --swa-full-tokens-ratio (up to 1: the SWA pool then holds as many tokens as the full pool)"),
            "pools"))
    if pools is not None and pools.draft is not None and pools.draft.total:
        out.append(Finding("info", f"{pools.draft.total} draft layers are in the target's pool", pools.draft.how,
                           ("none needed: SGLang sizes the pool with them (pool_configurator.py)",), "draft"))
    if pools is not None and launch.weights_bytes is None and pools.full_tokens:
        out.append(Finding("info", "pool token counts are upper bounds", pools.budget_how,
                           ("pass --weights-gib (and --gpu-memory-gib) for the pool SGLang will log",), "pools"))
    return out


def _draft_pool_findings(launch: Launch, pools: PoolSizes | None) -> list[Finding]:
    """The draft's own pool against the budget and the target's full pool (``MemoryPoolConfig``, shared)."""
    if pools is None:
        return []
    out = []
    if pools.draft_outside_bytes:
        out.append(Finding(
            "raises", "the draft's KV pool is allocated outside the KV budget",
            f"{pools.configurator} sized the pools to the whole budget for the target's layers alone; the draft "
            f"worker then allocates its own {pools.draft_outside_bytes / GIB:.2f} GiB per GPU on top, past "
            "--mem-fraction-static (out of memory at launch unless that much more is free)",
            (f"upgrade to SGLang {SGLANG_VERSION} (PR #29622 counts the draft's layers in the budget)",
             "lower --mem-fraction-static by the draft's share"), "draft"))
    target, draft = pools.full_tokens, pools.draft_full_tokens
    if target and draft is not None and draft < target:
        out.append(Finding(
            "wrong", "the draft's full pool is smaller than the target's",
            f"the draft's pool holds {draft:,} tokens, the target's full pool {target:,}: the draft indexes its "
            "pool with the target's full-pool slot ids, so every id at or past its size writes and reads out of "
            "bounds (index-out-of-bounds asserts under load); the draft took the token count before the "
            "hybrid-SWA adjustment, the budget over one cell of every layer",
            (f"upgrade to SGLang {SGLANG_VERSION} (PR #17630 sizes the draft's pool from the target's)",
             "--disable-hybrid-swa-memory (one pool: both sides take the same token count)"), "draft"))
    return out


def _input_findings(launch: Launch, decisions: Decisions) -> list[Finding]:
    out, args = [], launch.server_args
    if launch.model.sources.get("architecture", "").startswith("INFERRED"):
        out.append(Finding("info", "the architecture is inferred", launch.model.sources["architecture"],
                           ("none needed if it is the model you serve; else add \"architectures\" to the config",),
                           "inputs"))
    # A surface the kit refuses by name (e.g. --enable-page-major-kv-layout, which changes the pools) has its own
    # finding when set, and at SGLang's default changes nothing; one it models outside ServerArgsView (the draft
    # sink, the prefix tails, UNO's LoRA) is read where it applies: neither is one of these.
    unread = [name for name in launch.server_args.not_read
              if getattr(SURFACE.get(("server_arg", name)), "status", None) not in ("refused", "modelled")]
    if unread:
        out.append(Finding("info", "server arguments the kit does not read", ", ".join(unread),
                           ("check them by hand: the kit models the flags that route attention and size the KV "
                            "pools (backends, pages, hybrid switch, ratio, speculation, memory, tp/pp/dp), not these",),
                           "inputs"))
    if decisions.route_note:
        algorithms = ", ".join(a.upper() for a in PLANNED if a != "none")
        out.append(Finding("info", "routes not planned", decisions.route_note,
                           (f"none in the kit: it plans SGLang's {', '.join(BACKENDS)} backends, without "
                            f"speculation or with {algorithms}",), "routes"))
    drafts = decisions.draft_pool.value
    if drafts.layout_from.startswith(NO_DRAFT_CONFIG):
        out.append(Finding("info", "no draft config: the draft is read as the target itself", drafts.layout_from,
                           ("pass --draft-hf-config with the draft model's config.json",), "draft"))
    asked = (args.prefill_attention_backend or args.attention_backend,
             args.decode_attention_backend or args.attention_backend)
    runs = (decisions.prefill_attention_backend.value, decisions.decode_attention_backend.value)
    if any(a is not None and a != r for a, r in zip(asked, runs)):
        out.append(Finding("info", "SGLang replaces the attention backend given",
                           f"the flags ask for prefill {asked[0]}, decode {asked[1]}; SGLang runs prefill {runs[0]}, "
                           f"decode {runs[1]} ({decisions.attention_backend.source})",
                           (f"drop the backend flags: {runs[0]} is what runs (the routes are planned on it)",),
                           "inputs"))
    undone = reverted_fix(launch.sglang_version)
    if undone is not None:
        detail = (f"no _resolve_swa_kv_pool and no paged-decode guard: routes {SGLANG_VERSION} refuses run silently "
                  "wrong here") if undone == 38756 else \
            f"SGLang {SGLANG_VERSION} with this PR's change undone as the kit models it: {REVERTIBLE_FIXES[undone]}"
        out.append(Finding("info", f"{launch.sglang_version}: PR #{undone} undone", detail,
                           (f"upgrade to SGLang {SGLANG_VERSION} (and the aiter it installs)",), "version"))
    return out


def trace_findings(records: Sequence[trace.TraceRecord],
                   compare_one: Callable[[trace.TraceRecord], list[trace.TraceFinding]],
                   meant: Callable[[int], int | None], ways_out: dict[str, tuple[str, ...]],
                   window_name: str = "sliding_window_size") -> list[Finding]:
    """Traced kernel calls held against a plan (``compare_one`` per record); one finding per distinct difference,
    ranked by :func:`trace.rank` on the keys the traced call attends against ``meant(layer)``."""
    found: dict[tuple, tuple[Finding, list[str]]] = {}
    for record in records:
        for mismatch in compare_one(record):
            layer = None if mismatch.field in ("mode", "layer") else mismatch.layer  # a layer the model has, or None
            layer_meant = None if layer is None else meant(layer)
            severity, title = trace.rank(mismatch, layer_meant, trace.traced_keys(record.kernel, record.window_arg))
            detail = (f"traced {record.kernel} with {mismatch.field}={mismatch.traced!r}; the plan says "
                      f"{mismatch.planned!r} ({window_name}={record.sliding_window_size})")
            key = (severity, title, mismatch.field, str(mismatch.traced), str(mismatch.planned))
            where = found.setdefault(key, (Finding(severity, title, detail, ways_out[severity]), []))[1]
            if f"layer {record.layer} {record.mode}" not in where:
                where.append(f"layer {record.layer} {record.mode}")
    if not found:
        return [Finding("info", f"the trace agrees with the plan: {len(records)} kernel calls",
                        "every traced call has the planned kernel and window argument, and the planned page table "
                        "(SGLang) or backend (vLLM)",
                        ("none needed",), "trace")]
    return [replace(f, where=f"trace: {', '.join(where)}") for f, where in found.values()]


def _trace_findings(launch: Launch, decisions: Decisions, records: Sequence[trace.TraceRecord]) -> list[Finding]:
    """Traced kernel calls held against the plan (``trace.compare``)."""
    return trace_findings(records, lambda record: trace.compare([record], decisions.routes),
                          launch.model.window_keys, _TRACE_WAYS_OUT)


_TRACE_WAYS_OUT = {
    "wrong": ("check the server's SGLang version, backend and environment against this launch; the traced call "
              "is what really ran",),
    "one-short": ("check whether it matters for your model (swa-kit key-gap)", "a path that passes the full window"),
    "info": ("record the trace from the launch you audit (same server arguments and environment)",),
}


def _check_cell(value: Any) -> str:
    """A compared value in a few words: per-layer windows as each window's count of layers, routes as each mode's
    count of layers."""
    if isinstance(value, dict) and value and all(isinstance(k, int) for k in value):
        counts: dict[Any, int] = {}
        for window in value.values():
            counts[window] = counts.get(window, 0) + 1
        return f"{len(value)} layers: " + ", ".join(f"{w} ({n})" for w, n in counts.items())
    if isinstance(value, dict) and value and all(isinstance(v, dict) or v is None for v in value.values()):
        return ", ".join(f"{mode}: {'none' if layers is None else f'{len(layers)} layers'}"
                         for mode, layers in value.items())
    return _fmt(value)


def _row_differences(row: FieldCheck, shown: int = 6) -> str:
    """Where a per-layer field differs: ``layer 5: kit 1023, SGLang 1022; ...`` (the first ``shown`` items)."""
    items = differing_items(row)
    parts = [f"{item}: kit {_fmt(kit)}, SGLang {_fmt(sglang)}" for item, kit, sglang in items[:shown]]
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(parts) + more


def _check_findings(check: SGLangCheck) -> list[Finding]:
    """One ``wrong`` finding per field where the kit and SGLang's own code disagree, naming both values."""
    out = []
    for row in check.differences:
        differ = _row_differences(row)
        out.append(Finding(
            "wrong", f"the kit and SGLang {check.version} disagree on {row.name}",
            f"kit: {_check_cell(row.kit)}; SGLang {check.version}'s own code on the raw launch: "
            f"{_check_cell(row.sglang)}{f' ({differ})' if differ else ''}: the kit's report is wrong on this field",
            (f"trust SGLang's value for {row.name}, and report the kit's to swa_kit with this report (--markdown)",),
            "sglang check"))
    return out


def audit(launch: Launch, records: Sequence[trace.TraceRecord] | None = None,
          check_with: RawLaunch | None = None) -> Audit:
    """Decide everything for ``launch`` and rank what the engineer should know.

    ``records``: kernel calls recorded by :mod:`swa_kit.measure.trace` in the live server, held against the plan.
    ``check_with``: the launch as given, asked of the installed SGLang's own code too; each field where the two
    disagree is a finding.
    """
    try:
        surface = check_surface(launch)  # raises LaunchRefusedError where SGLang refuses the launch at start-up
        decisions = decide(launch, plan_unmodelled=True)  # each surface it leaves out is a finding (``surface``)
    except LaunchRefusedError as error:
        if check_with is None:
            raise
        raise LaunchRefusedError(on_kit_refusal(launch, check_with, str(error))) from error
    findings = _route_findings(decisions) + _memory_findings(launch, decisions) + _input_findings(launch, decisions)
    findings += [Finding(n.severity, n.title, n.detail, n.ways_out, n.where) for n in surface]
    if records is not None:
        findings += _trace_findings(launch, decisions, records)
    check = None
    if check_with is not None:  # imports SGLang: only when asked
        check = check_launch(launch, decisions, check_with)
        findings += _check_findings(check)
    findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    return Audit(launch, decisions, findings, check)


# -- output ------------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) and value >= GIB:
        return f"{value:,} B ({value / GIB:.1f} GiB)"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and 0 <= value < 1:
        return f"{value} ({100 * value:.1f}%)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
    return str(value)


def _route_rows(report: Audit) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (worker, mode), plan in report.decisions.routes.items():
        seen: dict[tuple, dict] = {}
        for e in plan.layers:
            key = (e.kind, e.kernel, str(e.window_arg), e.effective_keys, e.page_table, route_verdict(e))
            row = seen.setdefault(key, {"worker": worker, "mode": mode, "backend": plan.pool.backend, "kind": e.kind,
                                        "layers": 0, "kernel": e.kernel, "window_arg": e.window_arg,
                                        "keys": f"{e.effective_keys}/{e.intended_keys}" if e.intended_keys else "all",
                                        "page_table": e.page_table, "sglang": "RAISES" if e.sglang_guard else "runs",
                                        "kit": route_verdict(e)})
            row["layers"] += 1
        rows += seen.values()
    return rows


def server_args_line(args: ServerArgsView, model_path: str) -> str:
    """The launch as SGLang logs it, ``server_args=ServerArgs(...)``, of the fields the kit read.

    :func:`swa_kit.launch.inputs.parse_server_args` reads the line back into the same fields.
    """
    values = {f.name: getattr(args, f.name) for f in fields(args) if f.name not in ("not_read", "not_read_values")}
    values["model_path"] = values["model_path"] or model_path
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")"


def _bugs(context: ReportContext | None, finding: Finding) -> list[str]:
    return list(context.known_bugs.get(finding, ())) if context else []


def to_json(report: Audit, context: ReportContext | None = None) -> dict[str, Any]:
    model, launch = report.launch.model, report.launch
    out = {
        "model": {"name": model.name, "architecture": model.architecture, "sources": model.sources,
                  "config_path": None if model.path is None else str(model.path), "config_sha256": model.sha256},
        "sglang_version": launch.sglang_version, "platform": launch.platform.name,
        "server_args_line": server_args_line(launch.server_args, model.hf_repo or model.name),
        "env": dict(launch.env), "decisions": report.decisions.rows(), "routes": _route_rows(report),
        "findings": [{**f.to_json(), "known_bugs": _bugs(context, f)} for f in report.findings],
        "exit_code": int(report.exit_code),
    }
    if report.sglang_check is not None:
        out["sglang_check"] = {"version": report.sglang_check.version,
                               "fields": [{"field": r.name, "kit": r.kit, "sglang": r.sglang, "agree": r.agree}
                                          for r in report.sglang_check.rows]}
    if context is not None:
        out |= {"versions": dict(context.versions), "command": context.command}
    return out


def _table(rows: list[dict[str, Any]], columns: list[str], markdown: bool) -> list[str]:
    return format_table(rows, columns, markdown=markdown, cell=_fmt).splitlines()


def _ways_out(finding: Finding) -> str:
    """``way out: ...`` for one (or none: see the detail), ``ways out: A; or B`` for several."""
    label = "ways out" if len(finding.ways_out) > 1 else "way out"
    return f"{label}: {'; or '.join(finding.ways_out) or 'see the detail'}"


def _code(text: str, language: str = "") -> list[str]:
    """A fenced Markdown code block that no backtick run in ``text`` can close."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return [f"{fence}{language}", text, fence]


def _md_finding(i: int, finding: Finding, bugs: list[str]) -> list[str]:
    """One finding as a list item; its detail, ways out and known bugs as a list nested under it."""
    lines = [f"{i}. **[{finding.severity}]** {finding.title} ({finding.where})", f"   - {finding.detail}"]
    if len(finding.ways_out) == 1:
        lines.append(f"   - way out: {finding.ways_out[0]}")
    elif finding.ways_out:
        lines += ["   - ways out (any one):", *(f"     - {way}" for way in finding.ways_out)]
    if bugs:
        lines += ["   - known bugs:", *(f"     - {bug}" for bug in bugs)]
    return lines


def _md_head(report: Audit, context: ReportContext | None) -> list[str]:
    """Versions, the command, the config and its hash, and the launch as SGLang logs it."""
    launch, model = report.launch, report.launch.model
    lines = ["## Where this report comes from", ""]
    for name, value in (context.versions if context else {}).items():
        lines.append(f"- {name}: {value}")
    lines.append(f"- SGLang version audited: {launch.sglang_version}")
    if model.path is not None:
        lines.append(f"- config: `{model.path}` (SHA-256 `{model.sha256}`)")
    if context and context.command:
        lines += ["- command:", "", *(f"  {line}" for line in _code(context.command, "sh")), ""]
    lines += ["", "## The launch (as SGLang would log the fields the kit read)", "",
              *_code(server_args_line(launch.server_args, model.hf_repo or model.name), "text"), ""]
    if launch.env:
        lines += ["Environment:", "", *(f"- `{k}={v}`" for k, v in launch.env.items()), ""]
    return lines


def render(report: Audit, markdown: bool = False, context: ReportContext | None = None) -> str:
    """The report as text, or as Markdown ready to paste into a bug report."""
    launch, h = report.launch, ("## " if markdown else "== ")
    model = launch.model
    title = (f"{'# ' if markdown else ''}swa-kit audit: {model.display_name} ({model.architecture}) on "
             f"{launch.platform.name}, SGLang {launch.sglang_version}")
    lines = [title, ""]
    if markdown:
        lines += _md_head(report, context)
    else:
        if launch.server_args.given():
            lines += ["server args: " + ", ".join(f"{k}={v!r}" for k, v in launch.server_args.given().items()), ""]
        if launch.env:
            lines += ["environment: " + " ".join(f"{k}={v}" for k, v in launch.env.items()), ""]
    lines += [f"{h}Decisions (what SGLang does; each names what it mirrors)"]
    rows = report.decisions.rows()
    if markdown:
        lines += [""] + _table([{**r, "value": _fmt(r["value"])} for r in rows], ["decision", "value", "source"], True)
    else:
        width = max(len(r["decision"]) for r in rows)
        for r in rows:
            lines += [f"{r['decision'].ljust(width)}  {_fmt(r['value'])}", f"{' ' * width}    from: {r['source']}"]
    lines += ["", f"{h}Routes per layer kind (keys = attended / meant)"] + ([""] if markdown else [])
    lines += _table(_route_rows(report), ["worker", "mode", "backend", "kind", "layers", "kernel", "window_arg", "keys",
                                          "page_table", "sglang", "kit"], markdown)
    if report.sglang_check is not None:
        lines += ["", f"{h}SGLang {report.sglang_check.version} on this launch (its own code, given the launch raw)"]
        rows = [{"field": r.name, "kit": _check_cell(r.kit), "SGLang": _check_cell(r.sglang),
                 "agree": "yes" if r.agree else "NO"} for r in report.sglang_check.rows]
        lines += ([""] if markdown else []) + _table(rows, ["field", "kit", "SGLang", "agree"], markdown)
    lines += ["", f"{h}Findings (worst first)"] + ([""] if markdown else [])
    if not report.findings:
        lines.append("none")
    for i, f in enumerate(report.findings, 1):
        if markdown:
            lines += _md_finding(i, f, _bugs(context, f))
        else:
            lines += [f"{i}. [{f.severity}] {f.title} ({f.where})", f"   {f.detail}", f"   {_ways_out(f)}",
                      *(f"   {bug}" for bug in _bugs(context, f))]
    code = report.exit_code
    lines += ["", f"exit code {int(code)} ({'findings' if code == ExitCode.DISAGREES else 'no finding above info'})"]
    return "\n".join(lines)


def render_json(report: Audit, context: ReportContext | None = None) -> str:
    return json.dumps(to_json(report, context), indent=2, default=str)
