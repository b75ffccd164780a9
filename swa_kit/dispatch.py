"""Which kernel SGLang's aiter backend runs for each layer and forward mode, and where that is unsafe.

:func:`plan` mirrors the routing of ``AiterAttnBackend`` in SGLang 0.5.23
(``python/sglang/srt/layers/attention/aiter_backend.py``, non-MLA layers, NHD KV layout):

* at construction it resolves the SWA pool (SGLang 0.5.23 ``_resolve_swa_kv_pool``),
  sets ``use_sliding_window_kv_pool``, forces Triton ``unified_attention`` when that is true
  (otherwise ``SGLANG_USE_AITER_UNIFIED_ATTN`` decides), and enables unified verify only with
  ``topk == 1`` and ``SGLANG_AITER_UNIFIED_VERIFY`` (default on);
* ``forward_decode``: ``unified_attention`` with ``(sws - 1, 0)``, else ``paged_attention_ragged``
  behind the seed's guard ``_reject_paged_decode_sliding_window``;
* ``forward_extend``: target verify through ``unified_attention`` when unified verify is on, else
  SGLang's own Triton ``extend_attention_fwd`` (custom mask, *no window argument*, untranslated
  ``req_to_token`` slots); draft extend (v2) through ``unified_attention`` when unified verify and
  ``SGLANG_AITER_UNIFIED_DRAFT_EXTEND`` are on; otherwise prefill / extend through
  ``unified_attention`` with ``(sws - 1, 0)`` or CK ``mha_batch_prefill_func`` with ``(sws, -1)``;
* a sliding layer reads the SWA page table (``translate_loc_from_full_to_swa``) only where the
  backend built one: on an SWA pool, at the unified and CK call sites.

Each call site is one :class:`CallSite`; its window argument is SGLang's expression of the
layer's ``sliding_window_size`` (sws), read back into keys through the path's declared
convention (:mod:`swa_kit.window`). The guards read only the chosen path's declaration
(``honours_window``, ``modes``, ``convention``) and the page table against the buffer the
layer's KV lives in. They raise :class:`~swa_kit.errors.DispatchGuardError` before any kernel runs:

* a windowed layer on a path that declares no window (the seed's paged-decode guard, and the
  legacy verify route, which SGLang does not guard);
* a window argument that reads as "no window" (``sws == 0`` gives unified ``(-1, 0)``);
* a page table that does not match the buffer (full-pool slots into an SWA buffer, or SWA
  slots into a full buffer: the EAGLE draft bug, SGLang #25103);
* chunked local attention, which the aiter backend cannot express at all (inferred from the code:
  Llama-4's layers keep ``sliding_window_size = -1`` and live in the SWA sub-pool).

Attending fewer keys than meant (the unified paths' ``(sws - 1, 0)``, measured by
``swa-kit probe --sglang-sites``) is *not* a guard: it is SGLang's behaviour, reported per layer in
``effective_keys`` and ``note``, and measured by :mod:`swa_kit.probe`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from swa_kit.attention.backends import Backend, all_backends, run_path
from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.configs import ModelSpec, load_model
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.resolver import RESOLVERS, uses_sliding_window_kv_pool
from swa_kit.window import from_keys, to_keys
from swa_kit.workers import SpeculativeAlgorithm, build_workers

#: Forward modes the planner knows: SGLang's EXTEND (without / with a cached prefix), DECODE,
#: TARGET_VERIFY, DRAFT_EXTEND_V2 and the draft worker's multi-step DECODE.
MODES = ("prefill", "extend", "decode", "verify", "draft_extend", "draft_decode")
#: Speculative algorithms (SGLang's names, lower case); "none" is plain decoding.
SPEC_ALGOS = ("none", "eagle", "eagle3", "standalone", "frozen_kv_mtp")
#: Environment variables the routing reads, with SGLang's defaults.
ENV_DEFAULTS = {
    "SGLANG_USE_AITER_UNIFIED_ATTN": "0",
    "SGLANG_AITER_UNIFIED_VERIFY": "1",
    "SGLANG_AITER_UNIFIED_DRAFT_EXTEND": "1",
}
_TRUE, _FALSE = ("1", "true"), ("0", "false")


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """An SGLang boolean environment variable: "1"/"true" or "0"/"false" (case-insensitive)."""
    value = str(env.get(name, ENV_DEFAULTS[name])).strip().lower()
    if value not in _TRUE + _FALSE:
        raise UsageError(f"{name}={value!r}: SGLang reads booleans as one of {_TRUE + _FALSE}")
    return value in _TRUE


# -- call sites --------------------------------------------------------------------------------


# These two copy SGLang's own expressions on purpose (aiter_backend.py, SGLang 0.5.23): they are
# what the kernels receive, right or wrong. The kit's converters in swa_kit/window.py say what the
# argument *should* be; the planner reads each argument back through them (effective_keys), which is
# how the unified sites' one-key-short shows up in the plan.
def _unified_arg(sws: int) -> tuple[int, int]:
    return (sws - 1, 0) if sws > -1 else (-1, -1)


def _ck_arg(sws: int) -> tuple[int, int]:
    return (sws, -1) if sws > -1 else (-1, -1)


@dataclass(frozen=True)
class CallSite:
    """One place in ``AiterAttnBackend`` that launches attention, and what it passes."""

    name: str
    method: str  # SGLang method that makes the call
    kernel: str  # the entry point called
    paths: tuple[str, ...]  # registered paths that run it, preferred first (native before stand-ins)
    modes: tuple[str, ...]  # kit forward modes the kernel sees at this site
    window_arg: Callable[[int], Any]  # SGLang's expression of the layer's sliding_window_size
    window_expr: str
    swa_page_table: bool  # whether the site swaps in the translated SWA page table for sliding layers


SITES: dict[str, CallSite] = {
    s.name: s
    for s in (
        CallSite("extend.ck", "forward_extend", "mha_batch_prefill_func",
                 ("aiter_native_mha_batch_prefill", "aiter_emulated_mha_batch_prefill"), ("prefill", "extend"),
                 _ck_arg, "(sws, -1)", True),
        CallSite("extend.unified", "_forward_extend_unified", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("prefill", "extend"),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("decode.unified", "forward_decode", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("decode",),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("decode.paged", "forward_decode", "paged_attention_ragged",
                 ("aiter_native_paged_ragged", "aiter_emulated_paged_ragged"), ("decode",),
                 lambda sws: None, "none (no window parameter)", False),
        CallSite("verify.unified", "forward_extend (target_verify)", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("verify",),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("verify.legacy", "forward_extend (target_verify)", "extend_attention_fwd",
                 ("sglang_extend_attention",), ("verify", "tree"),
                 lambda sws: None, "none (not passed)", False),
        CallSite("draft_extend.unified", "forward_extend (draft_extend_v2)", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("extend",),
                 _unified_arg, "(sws - 1, 0)", True),
    )
}


def site_path(site: CallSite) -> Backend:
    """The registered path that runs ``site`` here: the first available, else the last registered."""
    names = {b.name: b for b in all_backends()}
    registered = [names[p] for p in site.paths if p in names]
    if not registered:
        raise DispatchGuardError(
            f"no registered path runs {site.kernel} ({site.name}); expected one of {', '.join(site.paths)}"
        )
    for backend in registered:
        if backend.available()[0]:
            return backend
    return registered[-1]


# -- pools and workers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolView:
    """What the backend learns at construction, as ``AiterAttnBackend.__init__`` computes it."""

    worker: str  # "target" or "draft"
    spec: str
    resolver: str
    swa_pool_resolved: bool  # _resolve_swa_kv_pool(...) is an SWA pool with swa_layer_nums > 0
    reads_target_kv: bool  # the worker's attention reads the target's (possibly hybrid) pool
    use_sliding_window_kv_pool: bool
    use_triton_unified_attention: bool
    use_unified_verify: bool
    unified_draft_extend: bool


def resolve_runner(model_runner: Any, resolver: str) -> tuple[bool, bool]:
    """``(swa_pool_resolved, reads_target_kv)`` for one model runner, the kit's or SGLang's own.

    The named resolver of :mod:`swa_kit.resolver` decides which pool the runner translates
    against (the decision table lives there alone); only an EAGLE-family draft reads a pool of
    its own, every other runner reads the target's KV.
    """
    pool = RESOLVERS[resolver](model_runner)
    is_draft = bool(getattr(model_runner, "is_draft_worker", False))
    return uses_sliding_window_kv_pool(pool), not is_draft or model_runner.spec_algorithm.is_frozen_kv_mtp()


def resolve_pool(model: ModelSpec, worker: str, spec: str, resolver: str) -> tuple[bool, bool]:
    """:func:`resolve_runner` for the model's ``worker``, built with tiny real pools as SGLang wires them."""
    workers = build_workers(model, SpeculativeAlgorithm.from_string(spec))
    return resolve_runner(workers.runner(worker), resolver)


def _runner_role(model_runner: Any, worker: str | None, spec: str | None) -> tuple[str, str]:
    """The worker role and algorithm a model runner declares, checked against any given explicitly."""
    role = "draft" if getattr(model_runner, "is_draft_worker", False) else "target"
    algorithm = str(getattr(model_runner.spec_algorithm, "name", model_runner.spec_algorithm)).lower()
    for given, found, what in ((worker, role, "worker"), (spec, algorithm, "spec")):
        if given is not None and given != found:
            raise UsageError(f"{what}={given!r} contradicts the model runner, which is {what} {found!r}: "
                             f"drop {what}= or pass the matching runner")
    return role, algorithm


@dataclass(frozen=True)
class DraftLayer:
    """A layer a worker runs: its id in its own model, and the target layer it mirrors or reads."""

    layer_id: int
    target_layer: int


def worker_layers(model: ModelSpec, worker: str, spec: str) -> list[DraftLayer]:
    """Layers the worker attends with.

    Target: every layer. FROZEN_KV MTP draft: SGLang's drafter borrows the target's last
    sliding and last full layer caches. EAGLE / EAGLE3 / standalone draft: its own model; the
    kit assumes one layer shaped like each distinct target kind (real drafts vary).
    """
    ids = range(model.num_layers)
    if worker == "target":
        return [DraftLayer(i, i) for i in ids]
    if spec == "frozen_kv_mtp":
        picks = [max((i for i in ids if model.layer_kind(i).attention == a), default=None)
                 for a in ("sliding", "chunked", "full")]
        return [DraftLayer(i, i) for i in sorted(p for p in picks if p is not None)]
    first: dict[str, int] = {}
    for i in ids:
        first.setdefault(model.layer_types[i], i)
    return [DraftLayer(n, t) for n, t in enumerate(sorted(first.values()))]


# -- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerPlan:
    """One layer's route: what SGLang would launch, with what, over which slots; and whether it is safe."""

    layer: int
    kind: str  # "sliding" | "full" | "chunked"
    sliding_window_size: int  # RadixAttention.sliding_window_size (-1: none)
    intended_keys: int | None
    site: str
    kernel: str
    path: str
    tier: str
    window_arg: Any
    window_expr: str
    effective_keys: int | None  # window_arg read through the path's declared convention
    buffer: str  # "full" | "swa": the sub-pool the layer's KV lives in
    page_table: str  # "full" | "swa": the slot ids the kernel indexes with
    guard: str | None
    note: str | None = None
    target_layer: int | None = None

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["window_arg"] = list(self.window_arg) if isinstance(self.window_arg, tuple) else self.window_arg
        return row


@dataclass
class Plan:
    """Routes of every layer of one worker in one forward mode, and the backend flags behind them."""

    model: str
    mode: str
    spec: str
    topk: int
    env: dict[str, str]
    pool: PoolView
    layers: list[LayerPlan] = field(default_factory=list)

    @property
    def guards(self) -> list[str]:
        return [p.guard for p in self.layers if p.guard]

    @property
    def error(self) -> str | None:
        """Why the plan is refused (the first guard, and how many layers are affected), or None."""
        guards = self.guards
        if not guards:
            return None
        more = f" ({len(guards)} layers refused; first shown)" if len(guards) > 1 else ""
        return guards[0] + more

    def check(self) -> "Plan":
        """Raise :class:`DispatchGuardError` if any layer is refused; return self otherwise."""
        if self.error:
            raise DispatchGuardError(self.error)
        return self

    def layer(self, layer_id: int) -> LayerPlan:
        for entry in self.layers:
            if entry.layer == layer_id:
                return entry
        raise DispatchGuardError(f"layer {layer_id} is not in this plan (layers {[p.layer for p in self.layers]})")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "mode": self.mode, "spec": self.spec, "topk": self.topk, "env": self.env,
            "flags": asdict(self.pool), "layers": [p.to_json() for p in self.layers], "error": self.error,
        }


def _sws_and_keys(model: ModelSpec, kind: str) -> tuple[int, int | None]:
    """The layer's ``sliding_window_size`` as SGLang stores it, and the keys it is meant to attend."""
    shapes = {k.attention: k for k in model.kinds.values()}
    if kind == "sliding":
        keys = shapes["sliding"].window.keys
        return from_keys("sglang", keys), keys
    if kind == "chunked":  # SGLang's Llama-4 RadixAttention keeps the default -1
        return -1, shapes["chunked"].chunk_size
    return -1, None


def _choose_site(pool: PoolView, mode: str) -> CallSite:
    if mode in ("decode", "draft_decode"):
        return SITES["decode.unified" if pool.use_triton_unified_attention else "decode.paged"]
    if mode == "verify":
        return SITES["verify.unified" if pool.use_unified_verify else "verify.legacy"]
    if mode == "draft_extend" and pool.use_unified_verify and pool.unified_draft_extend:
        return SITES["draft_extend.unified"]
    return SITES["extend.unified" if pool.use_triton_unified_attention else "extend.ck"]


def _kernel_mode(mode: str, topk: int) -> str:
    if mode == "verify":
        return "verify" if topk == 1 else "tree"
    return {"draft_decode": "decode", "draft_extend": "extend"}.get(mode, mode)


def _ways_out(pool: PoolView) -> str:
    if pool.worker == "draft" and pool.reads_target_kv and not pool.swa_pool_resolved:
        return ("resolve the pool the draft reads (the fixed _resolve_swa_kv_pool returns the allocator's "
                "SWAKVPool for FROZEN_KV MTP), or select a different attention backend")
    return ("set SGLANG_USE_AITER_UNIFIED_ATTN=1 (unified_attention takes a window, but SGLang passes it (sws - 1, 0): "
            "one key short) or select a different attention backend (--attention-backend triton has its own "
            "one-key-short decode window, SGLang PR #32087); measure either with swa-kit probe")


def _guard(pool: PoolView, mode: str, topk: int, layer: int, kind: str, sws: int, intended: int | None,
           site: CallSite, backend: Backend, window_arg: Any, buffer: str,
           page_table: str) -> tuple[str | None, int | None]:
    """The guard message for one route (None when safe) and the keys the path is declared to attend."""
    meant = f"chunk {intended}" if kind == "chunked" else f"meant to attend {intended} keys"
    who = f"layer {layer} ({kind}, sliding_window_size={sws}, {meant})"
    problems: list[str] = []
    ways: list[str] = []
    effective = to_keys(backend.convention, window_arg) if backend.convention else None
    kernel_mode = _kernel_mode(mode, topk)
    if kind == "chunked":
        problems.append(f"chunked local attention (chunk {intended}) cannot be expressed at any aiter call site: "
                        f"the layer keeps sliding_window_size=-1, so {site.kernel} attends the whole context")
        ways.append("serve the model with a backend that implements chunked attention (e.g. --attention-backend fa3)")
    elif kernel_mode not in backend.modes:
        problems.append(f"path {backend.name} does not declare forward mode {kernel_mode!r} "
                        f"(it declares {sorted(backend.modes)})")
    elif intended is not None and not backend.honours_window:
        # paged_attention_ragged has no window parameter; extend_attention_fwd has one SGLang does not pass
        why = ("takes no window" if "no window parameter" in site.window_expr else
               "gets no window (it takes sliding_window_size, but SGLang's aiter backend does not pass it)")
        problems.append(f"{site.kernel} ({site.name}) {why}, so the layer would attend the whole "
                        "context and return wrong numbers silently")
        if site.name == "decode.paged":
            ways.append(_ways_out(pool))
        else:
            ways.append(f"unified verify needs speculative topk=1 (got {topk}) and SGLANG_AITER_UNIFIED_VERIFY=1 "
                        "(plus SGLANG_USE_AITER_UNIFIED_ATTN=1 without a hybrid pool); or select a different "
                        "attention backend")
    elif intended is not None and effective is None:
        problems.append(f"{site.kernel} gets window_size={window_arg} = {site.window_expr}, which the "
                        f"{backend.convention} convention reads as 'no window': the layer attends the whole context")
        ways.append("a path whose convention can express this window, e.g. CK prefill's (sws, -1)")
    if buffer != page_table:
        if buffer == "swa":
            problems.append("untranslated full-pool slot ids would index the layer's SWA buffer (other tokens' KV, "
                            "or out of bounds)")
            # Advise the fixed resolver only where the pool went unresolved; where it is resolved (the fixed
            # resolver already in force) the call site itself never swaps in the SWA page table.
            ways.append("resolve the SWA pool for this worker so the SWA page table is built (the fixed resolver)"
                        if not pool.swa_pool_resolved else
                        f"a call site that swaps in the translated SWA page table ({site.name} does not)")
        else:
            problems.append("SWA-translated slot ids would index a full-size buffer the SWA mapping does not "
                            "describe (the EAGLE draft bug, SGLang #25103)")
            ways.append("never apply the target's full->SWA mapping to a draft that owns its pool (the fixed "
                        "resolver)")
    if not problems:
        return None, effective
    prefix = "aiter paged decode cannot honour a sliding window: " if site.name == "decode.paged" and ways else ""
    return f"{prefix}{who} at {site.name}: " + "; ".join(problems) + ". Ways out: " + "; or ".join(ways), effective


def _note(intended: int | None, effective: int | None, backend: Backend) -> str | None:
    if intended is None or effective is None or intended == effective:
        return None
    diff = intended - effective
    return (f"declared to attend {effective} keys, {abs(diff)} {'short' if diff > 0 else 'too many'} "
            "(SGLang's aiter backend passes (sws - 1, 0) to unified_attention; measure with "
            "swa-kit probe --sglang-sites)")


def _check_args(mode: str, spec: str, topk: int, worker: str, resolver: str) -> None:
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    if spec not in SPEC_ALGOS:
        raise UsageError(f"unknown speculative algorithm {spec!r}; one of {', '.join(SPEC_ALGOS)}")
    if resolver not in RESOLVERS:
        raise UsageError(f"unknown resolver {resolver!r}; one of {', '.join(RESOLVERS)}")
    if worker not in ("target", "draft"):
        raise UsageError(f"worker {worker!r}: 'target' or 'draft'")
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise UsageError(f"topk {topk!r}: speculative topk is an int >= 1")
    needs_spec = mode in ("verify", "draft_extend", "draft_decode") or worker == "draft"
    if needs_spec and spec == "none":
        raise UsageError(f"mode {mode!r} / worker {worker!r} happens only with speculative decoding: pass a spec "
                         f"algorithm ({', '.join(SPEC_ALGOS[1:])})")
    if mode.startswith("draft_") and worker != "draft":
        raise UsageError(f"mode {mode!r} runs on the draft worker: pass worker='draft'")
    if mode == "verify" and worker != "target":
        raise UsageError("target verify runs on the target worker: pass worker='target'")
    if spec == "frozen_kv_mtp" and topk != 1:
        raise UsageError(f"FROZEN_KV MTP drafts a single chain: topk must be 1, got {topk}")


def plan(
    model: ModelSpec | str,
    mode: str,
    *,
    spec: str | None = None,
    topk: int = 1,
    env: Mapping[str, str] | None = None,
    worker: str | None = None,
    resolver: str = "fixed",
    strict: bool = True,
    model_runner: Any = None,
) -> Plan:
    """Route every layer of ``model`` the way SGLang's aiter backend does in forward ``mode``.

    ``env`` holds the routing variables (:data:`ENV_DEFAULTS`; unset ones take SGLang's default).
    ``spec`` is the speculative algorithm ("none" by default). ``worker`` defaults to "draft" for
    the draft modes, else "target". ``resolver`` picks the pool resolver ("fixed" is SGLang's).
    ``model_runner``: plan for this runner instead of one the kit builds: the kit's or SGLang's
    own (read by duck typing: ``token_to_kv_pool``, ``token_to_kv_pool_allocator``,
    ``is_draft_worker``, ``spec_algorithm``); its role and algorithm then come from it. With
    ``strict`` (default) a refused route raises :class:`DispatchGuardError` naming the layer, its
    window and the way out; with ``strict=False`` the plan carries the guard messages per layer.
    """
    spec_model = load_model(model) if isinstance(model, str) else model
    if model_runner is not None:
        worker, spec = _runner_role(model_runner, worker, spec)
    spec = spec or "none"
    worker = worker or ("draft" if mode.startswith("draft_") else "target")
    _check_args(mode, spec, topk, worker, resolver)
    env = {k: str(v) for k, v in (env or {}).items()}
    unknown = sorted(set(env) - set(ENV_DEFAULTS))
    if unknown:
        raise UsageError(f"environment {unknown} does not affect aiter routing; known: {', '.join(ENV_DEFAULTS)}")
    flags = {name: env_flag(env, name) for name in ENV_DEFAULTS}  # every value checked, read or not
    if model_runner is not None:
        swa_resolved, reads_target = resolve_runner(model_runner, resolver)
    else:
        swa_resolved, reads_target = resolve_pool(spec_model, worker, spec, resolver)
    unified = swa_resolved or flags["SGLANG_USE_AITER_UNIFIED_ATTN"]
    unified_verify = unified and topk == 1 and flags["SGLANG_AITER_UNIFIED_VERIFY"]
    pool = PoolView(worker, spec, resolver, swa_resolved, reads_target, swa_resolved, unified, unified_verify,
                    flags["SGLANG_AITER_UNIFIED_DRAFT_EXTEND"])
    site = _choose_site(pool, mode)
    backend = site_path(site)
    result = Plan(spec_model.name, mode, spec, topk, env, pool)
    hybrid = spec_model.sglang_hybrid_swa_pool
    for entry in worker_layers(spec_model, worker, spec):
        kind = spec_model.layer_kind(entry.target_layer).attention
        sws, intended = _sws_and_keys(spec_model, kind)
        window_arg = site.window_arg(sws)
        in_swa_pool = kind != "full" and hybrid and reads_target
        buffer = "swa" if in_swa_pool else "full"
        page_table = "swa" if (site.swa_page_table and swa_resolved and sws > -1) else "full"
        guard, effective = _guard(pool, mode, topk, entry.layer_id, kind, sws, intended, site, backend,
                                  window_arg, buffer, page_table)
        result.layers.append(LayerPlan(
            layer=entry.layer_id, kind=kind, sliding_window_size=sws, intended_keys=intended, site=site.name,
            kernel=site.kernel, path=backend.name, tier=backend.tier, window_arg=window_arg,
            window_expr=site.window_expr, effective_keys=effective, buffer=buffer, page_table=page_table,
            guard=guard, note=_note(intended, effective, backend),
            target_layer=None if worker == "target" else entry.target_layer,
        ))
    return result.check() if strict else result


def run_layer(entry: LayerPlan, batch: AttentionBatch) -> AttentionResult:
    """Run one planned layer on ``batch`` with the window argument SGLang passes; refuse a guarded route.

    ``batch`` must already hold the slots the plan's ``page_table`` names (SWA-translated for
    ``"swa"``) over the layer's buffer: the same contract as the kernel.
    """
    if entry.guard:
        raise DispatchGuardError(entry.guard)
    result = run_path(entry.path, batch, entry.window_arg)
    result.notes.append(f"dispatched: layer {entry.layer} {entry.site} window_arg={entry.window_arg}")
    return result


# -- explain -------------------------------------------------------------------------------------

TABLE_COLUMNS = ["layer", "kind", "path", "window_arg", "effective_keys", "page_table", "buffer", "guard"]


def explain(plan_: Plan, *, as_json: bool = False, group: bool = True) -> str:
    """The plan as text (a table; with ``group`` consecutive identical routes share one row) or JSON."""
    if as_json:
        return json.dumps(plan_.to_json(), indent=2)
    flags = plan_.pool
    lines = [
        f"{plan_.model} · mode {plan_.mode} · worker {flags.worker} · spec {plan_.spec} · topk {plan_.topk} · "
        f"resolver {flags.resolver}",
        f"use_sliding_window_kv_pool={flags.use_sliding_window_kv_pool} "
        f"use_triton_unified_attention={flags.use_triton_unified_attention} "
        f"use_unified_verify={flags.use_unified_verify} env={plan_.env or '{}'}",
    ]
    groups: dict[tuple, list[int]] = {}
    for entry in plan_.layers:
        row = {c: getattr(entry, c) for c in TABLE_COLUMNS[1:]}
        row["guard"] = "REFUSED" if entry.guard else ("ok, " + entry.note if entry.note else "ok")
        key = tuple(str(row[c]) for c in TABLE_COLUMNS[1:]) if group else (entry.layer,)
        groups.setdefault(key, []).append(entry.layer)
        groups[key + ("row",)] = row  # type: ignore[assignment]
    table = [{"layer": layer_ranges(ids), **groups[key + ("row",)]}  # type: ignore[dict-item]
             for key, ids in groups.items() if key[-1] != "row"]
    lines += _format_table(table, TABLE_COLUMNS)
    if plan_.error:
        lines.append(f"REFUSED: {plan_.error}")
    return "\n".join(lines)


def layer_ranges(ids: list[int], shown: int = 3) -> str:
    """``[0, 1, 2, 4]`` as ``0-2,4``; long lists keep the first ``shown`` runs and the count."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    if len(text) > shown:
        return ",".join(text[:shown]) + f",... ({len(ids)} layers)"
    return ",".join(text) + (f" ({len(ids)} layers)" if len(ids) > 1 else "")


def _format_table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    cells = [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return out
