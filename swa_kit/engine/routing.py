"""Which kernel SGLang's aiter backend runs for each layer and forward mode, and where that is unsafe.

:func:`plan` mirrors the routing of ``AiterAttnBackend`` in SGLang 0.5.23
(``python/sglang/srt/layers/attention/aiter_backend.py``, non-MLA layers, NHD KV layout):

* at construction it resolves the SWA pool (``_resolve_swa_kv_pool``; the decision table is in
  :mod:`swa_kit.engine.resolver`), sets ``use_sliding_window_kv_pool``, forces Triton ``unified_attention`` when
  that is true (otherwise ``SGLANG_USE_AITER_UNIFIED_ATTN`` decides), and enables unified verify only with
  ``topk == 1`` and ``SGLANG_AITER_UNIFIED_VERIFY`` (default on);
* ``forward_decode``: ``unified_attention`` with ``(sws - 1, 0)``, else ``paged_attention_ragged`` behind the
  seed's guard ``_reject_paged_decode_sliding_window``;
* ``forward_extend``: target verify through ``unified_attention`` when unified verify is on, else SGLang's own
  Triton ``extend_attention_fwd`` (custom mask, *no window argument*, untranslated ``req_to_token`` slots); draft
  extend (v2) through ``unified_attention`` when unified verify and ``SGLANG_AITER_UNIFIED_DRAFT_EXTEND`` are on;
  otherwise prefill / extend through ``unified_attention`` with ``(sws - 1, 0)`` (PR #38757) or CK
  ``mha_batch_prefill_func`` with ``(sws, -1)``, which refuses a head dim over 256;
* a sliding layer reads the SWA page table (``translate_loc_from_full_to_swa``) only where the backend built one:
  on an SWA pool, at the unified and CK call sites;
* with ``SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d`` (and ``SGLANG_USE_AITER=1``) the pool is the SHUFFLE 5D
  layout: decode goes to ``pa_decode_gluon(sliding_window=sws)``, which keeps the newest ``sws - 1`` keys of
  ``seq_lens`` (aiter's ``pa_decode_gluon.py`` mask: two short), and extend to ``forward_extend_vectorized_5d``
  (CK ``mha_batch_prefill_func`` with ``(sws, -1)``), before any unified route (``layers/attention/aiter_utils.py``).

``backend="triton"`` plans SGLang's own Triton backend (``layers/attention/triton_backend.py``, Gemma-4's default):
window layers read one rail of the newest slots, cut at the runner's ``sliding_window_size`` (no rail: it asserts);
decode attends that many keys, the query's among them; extend / verify ``sws + 1`` (:func:`triton_rail`).

``backend="trtllm_mha"`` plans SGLang's TRT-LLM MHA backend (``layers/attention/trtllm_mha_backend.py``): every
mode passes ``window_left=sws`` (``sws + 1`` keys), and ``_get_layer_page_table`` picks the SWA page table by the
resolved pool's ``layers_mapping`` at the layer's own id, so a draft that resolves the target's pool reads its
own layers through the target's layer kinds. Before PR #18970 (``before-18970``) there is no SWA page table:
sliding layers index the SWA pool with full-pool slot ids, window_left unchanged.

Each call site is one :class:`CallSite`; its window argument is SGLang's expression of the layer's
``sliding_window_size`` (sws), read back into keys through the path's convention (:mod:`swa_kit.window`). The guards
read only the chosen path's declaration and the page table against the layer's buffer. Two verdicts per layer:

* ``sglang_guard``: what SGLang itself raises: ``_reject_paged_decode_sliding_window`` (``sliding_window_size > -1``
  only, so chunked Llama-4 layers pass); before PR #38756 nothing.
* ``judgement``: what the kit judges: the route runs but attends the wrong keys (or reads wrong slots).

With ``strict`` a route with either raises :class:`~swa_kit.errors.DispatchGuardError` before any kernel
runs. The kit judges:

* a windowed layer on a path that declares no window (the seed's paged-decode guard, and the legacy verify route,
  which SGLang does not guard);
* a window that reaches SGLang as none (a model file that passes no window, or ``sliding_window_size`` 0, which
  RadixAttention stores as -1), or an argument the path reads as "no window";
* a page table that does not match the buffer (full-pool slots into an SWA buffer, or SWA slots into a full
  buffer: the EAGLE draft bug, SGLang #25103);
* chunked local attention, which aiter cannot express (inferred: Llama-4's layers keep ``sliding_window_size = -1``);
* an EAGLE tree (topk > 1) whose window the site bounds by flattened draft row, not depth (Triton's extend).

Attending fewer keys than meant (the unified paths' ``(sws - 1, 0)``, Triton's decode) is *not* a refusal: it is
SGLang's behaviour, reported in ``effective_keys`` and ``note`` and measured by :mod:`swa_kit.measure.probe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from swa_kit.attention.paths import AttentionPath, run_path
from swa_kit.engine.call_sites import DECLARED_SITES, SITES, CallSite, site_path, triton_rail
from swa_kit.models.configs import ModelLayout, as_of_version, load_model, runner_sliding_window_size
from swa_kit.models.drafts import default_draft_layout
from swa_kit.engine.environment import ENV_VARS, check_env, env_flag, env_value
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.engine.resolver import RESOLVERS, resolver_for, uses_sliding_window_kv_pool, with_hybrid_draft_pool
from swa_kit.engine.plan_args import check_plan_args
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.sglang_versions import SGLANG_VERSION, has_fix, has_pr_38756
from swa_kit.window import to_keys
from swa_kit.engine.pool_decisions import recorded_decision
from swa_kit.engine.ways_out import FIXED_RESOLVER, KEEP_HYBRID_POOL, TRITON_BACKEND, UNIFIED_ATTN, UNIFIED_VERIFY

if TYPE_CHECKING:  # planning stays torch-free; run_layer gets its batch from a caller that has torch
    from swa_kit.attention.batch import AttentionBatch, AttentionResult

#: Environment variables the launch may set, with SGLang's defaults (routing and SWA pool sizing).
ENV_DEFAULTS = {name: default for name, (default, _, _) in ENV_VARS.items()}


# -- pools and workers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolView:
    """What the backend learns at construction, as ``AiterAttnBackend.__init__`` computes it."""

    worker: str  # "target" or "draft"
    spec: str
    resolver: str
    swa_pool_resolved: bool  # _resolve_swa_kv_pool(...) is an SWA pool with swa_layer_nums > 0
    reads_target_kv: bool  # the worker's attention reads the target's (possibly hybrid) pool
    use_triton_unified_attention: bool
    use_unified_verify: bool
    unified_draft_extend: bool
    kv_cache_vectorized_5d: bool = False
    backend: str = "aiter"
    own_swa_pool: bool = False  # a hybrid-SWA draft (MiMoV2MTP, Step3p5MTP, ...) owns an SWA pool
    hybrid_pool_disabled: bool = False  # the model is hybrid-SWA, but the launch turned its SWA pool off

    @property
    def use_sliding_window_kv_pool(self) -> bool:
        """SGLang's ``use_sliding_window_kv_pool``: by definition, the resolved pool is an SWA pool with SWA layers."""
        return self.swa_pool_resolved

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "use_sliding_window_kv_pool": self.use_sliding_window_kv_pool}


def resolve_runner(model_runner: Any, resolver: str) -> tuple[bool, bool]:
    """``(swa_pool_resolved, reads_target_kv)`` for one model runner, the kit's or SGLang's own.

    The named resolver of :mod:`swa_kit.engine.resolver` decides which pool the runner translates
    against (the decision table lives there alone); only an EAGLE-family draft reads a pool of
    its own, every other runner reads the target's KV.
    """
    pool = RESOLVERS[resolver](model_runner)
    is_draft = bool(getattr(model_runner, "is_draft_worker", False))
    return uses_sliding_window_kv_pool(pool), not is_draft or model_runner.spec_algorithm.is_frozen_kv_mtp()


def resolve_pool(model: ModelLayout, worker: str, spec: str, resolver: str,
                 draft_model: ModelLayout | None = None) -> tuple[bool, bool]:
    """:func:`resolve_runner` for the model's ``worker``, built with tiny real pools as SGLang wires them.

    A hybrid-SWA draft (``draft_model`` with its own hybrid pool) gets a real SWA pool of its own
    (:func:`swa_kit.engine.resolver.with_hybrid_draft_pool`), which the resolver then sees as its active pool.
    """
    from swa_kit.engine.workers import build_workers  # torch: planning reads recorded_decision instead

    workers = build_workers(model, spec)
    if worker == "draft" and draft_model is not None and draft_model.sglang_hybrid_swa_pool:
        workers = with_hybrid_draft_pool(workers, draft_model)
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
class WorkerLayer:
    """A layer a worker runs: its id in its own model, and the layer whose KV and shape it uses.

    For the target both are the same; a FROZEN_KV draft borrows target layers; an EAGLE-family
    draft's layers belong to the draft model (``source_layer`` then indexes the draft's layout).
    """

    layer_id: int
    source_layer: int


def worker_layers(model: ModelLayout, worker: str, spec: str,
                  draft_model: ModelLayout | None = None) -> list[WorkerLayer]:
    """Layers the worker attends with.

    Target: every layer. FROZEN_KV MTP draft: SGLang's drafter borrows the target's last sliding
    and last full layer caches. EAGLE / EAGLE3 / standalone / MTP draft: the layers of the draft's
    own config (``draft_model``); without one, :func:`swa_kit.models.drafts.default_draft_layout`
    (the MTP rewrite SGLang makes, else the target's own config, as SGLang reads it without a draft path).
    """
    if worker == "target":
        return [WorkerLayer(i, i) for i in range(model.num_layers)]
    algorithm = SpeculativeAlgorithm.from_string(spec)
    if algorithm.traits.reads_target_pool:
        ids = range(model.num_layers)
        picks = [max((i for i in ids if model.layer_kind(i).attention == a), default=None)
                 for a in ("sliding", "chunked", "full")]
        return [WorkerLayer(i, i) for i in sorted(p for p in picks if p is not None)]
    if draft_model is None:
        draft_model, _ = default_draft_layout(model, algorithm.traits.mtp_draft_from_target)
    return [WorkerLayer(i, i) for i in range(draft_model.num_layers)]


# -- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A refused route: what goes wrong, and the ways out, each a whole alternative (kept apart, never re-parsed)."""

    problem: str
    ways_out: tuple[str, ...] = ()
    title: str = ""  # who refuses, for a report ("" : SGLang's own guard)

    @property
    def message(self) -> str:
        """The problem and its ways out in one line, as the error names them."""
        return self.problem + (". Ways out: " + "; or ".join(self.ways_out) if self.ways_out else "")


@dataclass(frozen=True)
class LayerPlan:
    """One layer's route: what SGLang launches, with what, over which slots; what SGLang raises; what the kit judges."""

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
    effective_keys: int | None  # the keys the call attends, read through the path's convention
    buffer: str  # "full" | "swa": the sub-pool the layer's KV lives in
    page_table: str  # "full" | "swa": the slot ids the kernel indexes with
    sglang_verdict: Verdict | None  # what SGLang itself raises on this route (None: it runs)
    kit_verdict: Verdict | None  # the kit's verdict when the route runs but attends wrong keys / slots
    note: str | None = None
    target_layer: int | None = None

    @property
    def sglang_guard(self) -> str | None:
        """The error SGLang itself raises on this route, ways out included (None: it runs)."""
        return self.sglang_verdict.message if self.sglang_verdict else None

    @property
    def judgement(self) -> str | None:
        """The kit's verdict in one line, ways out included (None: the route attends the keys it should)."""
        return self.kit_verdict.message if self.kit_verdict else None

    @property
    def guard(self) -> str | None:
        """Why the kit refuses this route: SGLang's own error and the kit's judgement (None: neither)."""
        return " | the kit also judges: ".join(m for m in (self.sglang_guard, self.judgement) if m) or None

    def to_json(self) -> dict[str, Any]:
        """The fields, each verdict as its one-line message and its ways out, and the combined ``guard``."""
        row = {k: v for k, v in asdict(self).items() if k not in ("sglang_verdict", "kit_verdict")}
        for key, verdict in (("sglang_guard", self.sglang_verdict), ("judgement", self.kit_verdict)):
            row[key] = verdict.message if verdict else None
            row[f"{key}_ways_out"] = list(verdict.ways_out) if verdict else []
        row["window_arg"] = list(self.window_arg) if isinstance(self.window_arg, tuple) else self.window_arg
        row["guard"] = self.guard
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
    sglang_version: str = SGLANG_VERSION

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

    def check(self) -> Plan:
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
            "sglang_version": self.sglang_version, "flags": self.pool.to_json(),
            "layers": [p.to_json() for p in self.layers], "error": self.error,
        }


def _choose_site(pool: PoolView, mode: str, sglang_version: str = SGLANG_VERSION) -> CallSite:
    if pool.backend == "trtllm_mha":  # verify and draft extend run the decode kernel; #18970: the SWA page table
        name = "trtllm_mha.extend" if mode in ("prefill", "extend") else "trtllm_mha.decode"
        return DECLARED_SITES[name if has_fix(sglang_version, 18970) else f"{name}.before_18970"]
    if pool.backend == "triton":
        return DECLARED_SITES["triton.decode" if mode in ("decode", "draft_decode") else "triton.extend"]
    if mode in ("decode", "draft_decode"):
        if pool.kv_cache_vectorized_5d:
            return DECLARED_SITES["decode.gluon_5d"]
        return SITES["decode.unified" if pool.use_triton_unified_attention else "decode.paged"]
    if mode == "verify":
        return SITES["verify.unified" if pool.use_unified_verify else "verify.legacy"]
    if mode == "draft_extend" and pool.use_unified_verify and pool.unified_draft_extend:
        return SITES["draft_extend.unified"]
    if pool.kv_cache_vectorized_5d:
        return DECLARED_SITES["extend.ck_5d"]
    unified = pool.use_triton_unified_attention and has_fix(sglang_version, 38757)  # before PR #38757: CK only
    return SITES["extend.unified" if unified else "extend.ck"]


def _kernel_mode(mode: str, topk: int) -> str:
    if mode == "verify":
        return "verify" if topk == 1 else "tree"
    return {"draft_decode": "decode", "draft_extend": "extend"}.get(mode, mode)


@dataclass(frozen=True)
class _Route:
    """Everything both verdicts read about one layer's route."""

    pool: PoolView
    mode: str
    topk: int
    layer: int
    kind: str
    sws: int
    intended: int | None
    site: CallSite
    path: AttentionPath | None  # None for a declared-only site
    window_arg: Any
    buffer: str
    page_table: str
    head_dim: int = 0  # the layer's q/k head dim (a kernel's cap reads it)
    rail: int | None = None  # the runner's sliding_window_size: SGLang's Triton backend reads window layers by it

    @property
    def who(self) -> str:
        meant = f"chunk {self.intended}" if self.kind == "chunked" else f"meant to attend {self.intended} keys"
        return f"layer {self.layer} ({self.kind}, sliding_window_size={self.sws}, {meant})"

    @property
    def honours_window(self) -> bool:
        return self.path is None or self.path.honours_window  # every declared site passes its kernel a window

    def effective_keys(self) -> int | None:
        if self.path is None:
            if self.site.keys_of is None:
                raise UsageError(f"call site {self.site.name} runs no registered path and declares no keys_of: "
                                 "give it one of the two")
            return triton_rail(self.site, self.sws, self.rail, self.mode)[1] if self.pool.backend == "triton" \
                else self.site.keys_of(self.window_arg)
        return to_keys(self.path.convention, self.window_arg) if self.path.convention else None


def sglang_guard(route: _Route, sglang_version: str = SGLANG_VERSION) -> Verdict | None:
    """What SGLang raises on a route (aiter's ``_reject_paged_decode_sliding_window``, Triton's rail assert), or None.

    Both fire only for ``sliding_window_size > -1``, so chunked Llama-4 layers (-1) pass; the paged-decode
    guard only at aiter's paged decode, and the release before PR #38756 has none.
    """
    if route.pool.backend == "triton" and route.sws > -1 and not (route.rail or 0) > 0:
        return Verdict(f"SGLang's Triton backend asserts for {route.who} at {route.site.name}: the model runner has "
                       "no sliding_window_size, so init_forward_metadata builds no window_kv_indices to read",
                       (KEEP_HYBRID_POOL.text,) if route.pool.hybrid_pool_disabled else ())
    if not has_pr_38756(sglang_version) or route.site.name != "decode.paged" or route.sws <= -1:
        return None
    why = " (no SWA pool: hybrid SWA memory is off, so nothing forces unified_attention)" \
        if route.pool.hybrid_pool_disabled else ""
    return Verdict(f"aiter paged decode cannot honour a sliding window: SGLang raises ValueError for {route.who} at "
                   f"{route.site.name} (_reject_paged_decode_sliding_window) at the first decode{why}",
                   _ways_out(route.pool))


def kernel_refusal(route: _Route, sglang_version: str = SGLANG_VERSION) -> Verdict | None:
    """What the kernel itself raises on this route (a head dim over its cap: aiter's CK prefill), or None."""
    if (cap := route.site.max_head_dim) is None or route.head_dim <= cap:
        return _ck_window_dispatch(route, sglang_version)
    first = ("drop SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d (its extend always runs CK batch prefill)"
             if route.pool.kv_cache_vectorized_5d else UNIFIED_ATTN.text if has_fix(sglang_version, 38757) else
             f"SGLang {SGLANG_VERSION} (PR #38757 sends extend through unified_attention when it is on)")
    return Verdict(f"aiter's CK {route.site.kernel} supports a head dimension of at most {cap}: layer {route.layer} "
                   f"({route.kind} attention) has head_dim {route.head_dim}, so {route.site.name} raises at the first "
                   "prefill", (first, TRITON_BACKEND.text), title="aiter's CK prefill refuses this head dimension")


def _ck_window_dispatch(route: _Route, sglang_version: str) -> Verdict | None:
    """Before ROCm/aiter PR #2170: CK batch prefill's Python side picks its masked module from the window argument,
    while its kernel drops a window at least as long as the keys (mha_batch_prefill_kernels.cu) and computes no
    mask, so a batch of one-token queries whose keys fit the window fails to dispatch."""
    if has_fix(sglang_version, 2170) or route.site.kernel != "mha_batch_prefill_func" or route.sws <= -1:
        return None
    return Verdict(f"aiter's {route.site.kernel} (without ROCm/aiter PR #2170) loads its masked module for window "
                   f"{route.window_arg}, but its kernel drops a window at least as long as the keys and computes no "
                   f"mask: for {route.who}, a batch of one-token queries whose sequences hold at most "
                   f"{route.sws} keys raises 'invalid argument for batch_prefill'",
                   (f"an aiter with ROCm/aiter PR #2170 (the one SGLang {SGLANG_VERSION} installs)", UNIFIED_ATTN.text,
                    TRITON_BACKEND.text), title="aiter's CK prefill fails to dispatch this window")


def _ways_out(pool: PoolView) -> tuple[str, ...]:
    if pool.hybrid_pool_disabled:
        return KEEP_HYBRID_POOL.text, UNIFIED_ATTN.text, TRITON_BACKEND.text
    if pool.worker == "draft" and pool.reads_target_kv and not pool.swa_pool_resolved:
        return FIXED_RESOLVER.text, TRITON_BACKEND.text
    return UNIFIED_ATTN.text, TRITON_BACKEND.text


def _verdict(problem: str, *ways: str) -> tuple[list[str], list[str]]:
    return [problem], list(ways)


_WHOLE_CONTEXT = "so the layer would attend the whole context and return wrong numbers silently"
_UNTRANSLATED = ("untranslated full-pool slot ids would index the layer's SWA buffer (other tokens' KV, or out of "
                 "bounds)")
_MISTRANSLATED = ("SWA-translated slot ids would index a full-size buffer the SWA mapping does not describe (the EAGLE "
                  "draft bug, SGLang #25103)")


def _window_problems(route: _Route, effective: int | None) -> tuple[list[str], list[str]]:
    """The kit's verdict on the keys: chunks it cannot express, windows dropped or read as 'none'."""
    kernel, mode = route.site.kernel, _kernel_mode(route.mode, route.topk)
    if route.kind == "chunked":
        return _verdict(f"chunked local attention (chunk {route.intended}) cannot be expressed at this call site: the "
                        f"layer keeps sliding_window_size=-1, so {kernel} attends the whole context",
                        "serve the model with a backend that implements chunked attention (e.g. --attention-backend "
                        "fa3)")
    if route.path is not None and mode not in route.path.modes:
        return _verdict(f"path {route.path.name} does not declare forward mode {mode!r} (it declares "
                        f"{sorted(route.path.modes)})")
    if route.intended is None:
        return [], []
    if route.sws <= -1:
        return _verdict(f"the layer reaches SGLang with sliding_window_size=-1 (its model file passes no window, or a "
                        f"window of 1 key whose sliding_window_size 0 RadixAttention stores as -1), so {kernel} "
                        f"attends the whole context where the model attends {route.intended} keys",
                        "serve it with a model file that passes the window, or accept full attention knowingly")
    if not route.honours_window:
        ways = _ways_out(route.pool) if route.site.name == "decode.paged" else (UNIFIED_VERIFY.text,
                                                                                  TRITON_BACKEND.text)
        # paged_attention_ragged has no window parameter; extend_attention_fwd has one SGLang does not pass
        why = ("takes no window" if "no window parameter" in route.site.window_expr else
               f"gets no window (it takes one, but SGLang's {route.pool.backend} backend does not pass it)")
        return _verdict(f"{kernel} ({route.site.name}) {why}, {_WHOLE_CONTEXT}", *ways)
    if effective is None:
        return _verdict(f"{kernel} gets window_size={route.window_arg} = {route.site.window_expr}, which its "
                        "convention reads as 'no window': the layer attends the whole context",
                        "a path whose convention can express this window, e.g. CK prefill's (sws, -1)")
    if mode == "tree" and route.site.tree_rows:
        return _verdict(f"{kernel} {route.site.tree_rows}", "--speculative-eagle-topk 1 (a chain: each row is a depth)")
    return [], []


def _slot_problems(route: _Route) -> tuple[list[str], list[str]]:
    """The kit's verdict on the slots: a page table that does not match the buffer."""
    if route.buffer == route.page_table:
        return [], []
    if route.buffer == "swa" and route.pool.backend == "trtllm_mha" and not route.site.swa_page_table:
        return _verdict(_UNTRANSLATED, f"SGLang {SGLANG_VERSION}, whose trtllm_mha gives sliding layers the "
                                       "translated SWA page table (PR #18970)", TRITON_BACKEND.text)
    if route.buffer == "swa":
        # Advise the fixed resolver only where the pool went unresolved; where it is resolved (the fixed resolver
        # already in force) the call site itself never swaps in the SWA page table.
        way = (FIXED_RESOLVER.text if not route.pool.swa_pool_resolved else
               f"a call site that swaps in the translated SWA page table ({route.site.name} does not)")
        return _verdict(_UNTRANSLATED, way)
    return _verdict(_MISTRANSLATED, "never apply the target's full->SWA mapping to a draft that owns its pool (the "
                                    "fixed resolver)")


def kit_judgement(route: _Route) -> tuple[Verdict | None, int | None]:
    """The kit's verdict (None: the route attends the keys it should) and the keys the call attends."""
    effective = route.effective_keys()
    problems, ways = _window_problems(route, effective)
    slot_problems, slot_ways = _slot_problems(route)
    problems, ways = problems + slot_problems, ways + slot_ways
    if not problems:
        return None, effective
    prefix = "aiter paged decode cannot honour a sliding window: " if route.site.name == "decode.paged" and ways \
        else ""
    return Verdict(f"{prefix}{route.who} at {route.site.name}: " + "; ".join(problems), tuple(ways)), effective


def _note(intended: int | None, effective: int | None, site: CallSite) -> str | None:
    if intended is None or effective is None or intended == effective:
        return None
    diff = intended - effective
    how = "measure with swa-kit probe --sglang-sites" if site.keys_of is None else site.source
    return f"declared to attend {effective} keys, {abs(diff)} {'short' if diff > 0 else 'too many'} ({how})"


def _pool_view(model: ModelLayout, worker: str, spec: str, topk: int, env: dict[str, str], resolver: str,
               backend: str, model_runner: Any, draft_model: ModelLayout | None, hybrid_disabled: bool) -> PoolView:
    if model_runner is not None:
        swa_resolved, reads_target = resolve_runner(model_runner, resolver)
    else:
        # recorded from resolve_pool on real pools (no torch); an input resolve_pool gains must join decision_key
        swa_resolved, reads_target = recorded_decision(model, worker, spec, resolver, draft_model) \
            or resolve_pool(model, worker, spec, resolver, draft_model)
    own_swa = worker == "draft" and not reads_target and draft_model is not None \
        and draft_model.sglang_hybrid_swa_pool
    vec5d = env_value(env, "SGLANG_AITER_KV_CACHE_LAYOUT") == "vectorized_5d" and env_flag(env, "SGLANG_USE_AITER")
    unified = swa_resolved or env_flag(env, "SGLANG_USE_AITER_UNIFIED_ATTN")
    if backend != "aiter":  # only aiter has the unified switch and the 5D layout
        unified, vec5d = False, False
    return PoolView(
        worker=worker, spec=spec, resolver=resolver, swa_pool_resolved=swa_resolved, reads_target_kv=reads_target,
        use_triton_unified_attention=unified,
        use_unified_verify=unified and topk == 1 and env_flag(env, "SGLANG_AITER_UNIFIED_VERIFY"),
        unified_draft_extend=env_flag(env, "SGLANG_AITER_UNIFIED_DRAFT_EXTEND"), kv_cache_vectorized_5d=vec5d,
        backend=backend, own_swa_pool=own_swa, hybrid_pool_disabled=hybrid_disabled,
    )


def plan(model: ModelLayout | str, mode: str, *, spec: str | None = None, topk: int = 1,
         env: Mapping[str, str] | None = None, worker: str | None = None, resolver: str | None = None,
         strict: bool = True, model_runner: Any = None, backend: str = "aiter", draft_model: ModelLayout | None = None,
         sglang_version: str = SGLANG_VERSION, hybrid_swa_memory: bool = True) -> Plan:
    """Route every layer of ``model`` the way SGLang's attention ``backend`` does in forward ``mode``.

    ``env`` holds the launch's variables (:data:`ENV_DEFAULTS`; unset ones take SGLang's default). ``spec`` is the
    speculative algorithm ("none" by default). ``worker`` defaults to "draft" for the draft modes, else "target".
    ``resolver`` picks the pool resolver (default: the one ``backend`` runs on ``sglang_version``,
    :func:`~swa_kit.engine.resolver.resolver_for`). ``draft_model``: the draft's own layout for EAGLE-family drafts
    (a hybrid-SWA draft owns an SWA pool). ``model_runner``: plan for this runner
    (the kit's or SGLang's own, read by duck typing); its role and algorithm then come from it. With ``strict``
    (default) a refused route raises :class:`DispatchGuardError` naming the layer, its window and the way out; with
    ``strict=False`` the plan carries SGLang's error and the kit's judgement per layer. ``hybrid_swa_memory=False``
    is ``--disable-hybrid-swa-memory``: ``ModelConfig._derive_hybrid_model`` sets ``is_hybrid_swa`` False for target
    and draft alike, so no SWA pool exists and aiter decodes on the paged path. ``sglang_version`` may undo a fix
    (``before-<N>``): its model-file window rule and routes apply.
    """
    target = as_of_version(load_model(model) if isinstance(model, str) else model, sglang_version)
    hybrid_disabled = not hybrid_swa_memory and (target.sglang_hybrid_swa_pool or (
        draft_model is not None and draft_model.sglang_hybrid_swa_pool))
    if not hybrid_swa_memory:
        target = replace(target, sglang_hybrid_swa_pool=False)
        draft_model = None if draft_model is None else replace(draft_model, sglang_hybrid_swa_pool=False)
    if model_runner is not None:
        worker, spec = _runner_role(model_runner, worker, spec)
    spec = spec or "none"
    worker = worker or ("draft" if mode.startswith("draft_") else "target")
    resolver = resolver or resolver_for(backend, sglang_version)
    check_plan_args(mode, spec, topk, worker, resolver, backend, sglang_version)
    env = check_env(env)
    algorithm = SpeculativeAlgorithm.from_string(spec)
    own = worker == "draft" and algorithm.traits.owns_kv_pool
    if own and draft_model is None:  # before the pool view: a hybrid-SWA draft owns an SWA pool
        draft_model, _ = default_draft_layout(target, algorithm.traits.mtp_draft_from_target)
    pool = _pool_view(target, worker, spec, topk, env, resolver, backend, model_runner, draft_model, hybrid_disabled)
    site = _choose_site(pool, mode, sglang_version)
    path = site_path(site) if site.paths else None
    result = Plan(target.name, mode, spec, topk, env, pool, sglang_version=sglang_version)
    layout = draft_model if own and draft_model is not None else target  # own: draft_model is set just above
    rail = runner_sliding_window_size(layout)  # the one window SGLang's Triton backend cuts its rail at
    for entry in worker_layers(target, worker, spec, draft_model if own else None):
        kind = layout.layer_kind(entry.source_layer)
        sws, intended = kind.sliding_window_size, kind.retained_tokens
        in_swa_pool = kind.uses_swa_pool and (pool.own_swa_pool if own else target.sglang_hybrid_swa_pool
                                              and pool.reads_target_kv)
        buffer = "swa" if in_swa_pool else "full"
        translated = site.swa_page_table and pool.swa_pool_resolved and sws > -1
        if backend == "triton":  # window_kv_indices go through full_to_swa whenever the pool read is an SWAKVPool
            translated = in_swa_pool and sws > 0
        elif backend == "trtllm_mha":  # the resolved pool's layers_mapping at the layer's own id picks the table
            mapping = layout if pool.own_swa_pool else target
            translated = site.swa_page_table and pool.swa_pool_resolved and entry.layer_id < mapping.num_layers \
                and mapping.layer_kind(entry.layer_id).uses_swa_pool
        window_arg = triton_rail(site, sws, rail, mode)[0] if backend == "triton" else site.window_arg(sws)
        route = _Route(pool, mode, topk, entry.layer_id, kind.attention, sws, intended, site, path,
                       window_arg, buffer, "swa" if translated else "full", kind.head_dim, rail)
        judgement, effective = kit_judgement(route)
        result.layers.append(LayerPlan(
            layer=entry.layer_id, kind=kind.attention, sliding_window_size=sws, intended_keys=intended,
            site=site.name, kernel=site.kernel, path=path.name if path else "-",
            tier=path.tier if path else "declared (no runnable path in the kit)", window_arg=route.window_arg,
            window_expr=site.window_expr, effective_keys=effective, buffer=buffer, page_table=route.page_table,
            sglang_verdict=sglang_guard(route, sglang_version) or kernel_refusal(route, sglang_version),
            kit_verdict=judgement,
            note=_note(intended, effective, site), target_layer=None if worker == "target" else entry.source_layer,
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
