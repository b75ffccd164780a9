"""What SGLang decides for a launch, each decision with the SGLang source it mirrors.

:func:`decide` reads a :class:`~swa_kit.launch.inputs.Launch` and returns :class:`Decisions`, whose
fields are :class:`Decided` (value, source, how). ``how`` is :data:`BUNDLED`: the kit's own
reading of SGLang 0.5.23 (``swa_kit.launch.sglang_oracle`` computes the same decisions with SGLang's own
code where it imports). The per-layer routes come from :func:`swa_kit.engine.routing.plan`, for the backend
SGLang picked, on the target and (with speculation) the draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from swa_kit.engine import routing
from swa_kit.engine.plan_args import BACKENDS
from swa_kit.errors import UsageError
from swa_kit.models.configs import ModelLayout, as_of_version
from swa_kit.launch.backend import choose_backend, choose_page_size
from swa_kit.launch.drafts import DraftPool, draft_pool, fused_draft_pool
from swa_kit.launch.inputs import Launch, Platform, parse_server_args
from swa_kit.launch.pool_sizing import PoolSizes, kv_dtype_bytes, size_pools
from swa_kit.launch.refusals import (check_backend_names, check_config_reading, check_context_length,
                                     check_quantization, check_startup)
from swa_kit.launch.speculation import settle
from swa_kit.launch.surface import check_modelled, check_surface
from swa_kit.models.memory import request_bytes
from swa_kit.engine.resolver import resolver_for
from swa_kit.sglang_versions import SGLANG_VERSION, reverted_fix

BUNDLED = f"bundled {SGLANG_VERSION} table"
#: Context at which the per-request minimum is shown beside SGLang's sizing.
MINIMUM_CONTEXT = 32 * 1024


@dataclass(frozen=True)
class Decided:
    """One decision: its value, the SGLang file / function it mirrors, and how the kit obtained it."""

    value: Any
    source: str
    how: str = BUNDLED


@dataclass
class Decisions:
    """Every decision the kit reproduces for one launch."""

    attention_backend: Decided
    prefill_attention_backend: Decided
    decode_attention_backend: Decided
    hybrid_swa_memory: Decided  # value: bool; source says why
    page_size: Decided
    pool_configurator: Decided
    full_tokens: Decided
    swa_tokens: Decided
    full_bytes: Decided
    swa_bytes: Decided
    bytes_saved_vs_one_pool: Decided  # fraction of KV bytes per token of context
    swa_pool_floor: Decided  # validate_swa_pool_size: refused at start-up when not above it
    per_request_minimum_bytes: Decided  # labelled: one request at MINIMUM_CONTEXT, SWA holding only the window
    per_request_one_pool_bytes: Decided
    draft_pool: Decided
    draft_layers_in_pool: Decided  # value: {"full": n, "swa": n} counted in the target's cells
    parallel: Decided  # value: GPUs the launch spans; every token and byte figure above is per GPU
    kv_bytes_all_gpus: Decided  # full + SWA pool bytes of one GPU x GPUs
    unified_memory: Decided  # --enable-unified-memory's one buffer per GPU (None without it)
    resolver: Decided
    pools: PoolSizes  # the sizes the Decided pool fields read
    routes: dict[tuple[str, str], routing.Plan] = field(default_factory=dict)  # (worker, mode) -> plan
    route_note: str = ""

    def rows(self) -> list[dict[str, Any]]:
        """The decisions as rows (name, value, source, how) for tables and JSON."""
        names = [f for f in self.__dataclass_fields__ if isinstance(getattr(self, f), Decided)]
        return [{"decision": n, "value": _plain(getattr(self, n).value), "source": getattr(self, n).source,
                 "how": getattr(self, n).how} for n in names]


def _plain(value: Any) -> Any:
    if isinstance(value, DraftPool):
        return {"algorithm": value.algorithm, "pool": value.pool, "layout_from": value.layout_from,
                "layers": None if value.layout is None else value.layout.num_layers,
                "window_size": value.window_size, "backend": value.backend, "sink_size": value.sink_size}
    return value


MODES_BY_ROLE = {"target": ("prefill", "extend", "decode", "verify"), "draft": ("draft_extend", "draft_decode")}


def _routes(launch: Launch, backend_of: dict[str, str], drafts: DraftPool, topk: int,
            hybrid: bool) -> tuple[dict, str]:
    """Per (worker, mode) plans for the backends and algorithms the planner knows; a note naming the others.

    ``hybrid`` is the resolved hybrid switch (not the target's eligibility): off, no SWA pool exists, so the routes
    are planned on one pool; on, a hybrid-SWA draft owns an SWA pool even behind a target that has none.
    """
    algorithm = launch.spec_algorithm  # an alias is planned as its algorithm (NEXTN as EAGLE)
    plans, skipped = {}, []
    if drafts.backend is not None:  # a DFLASH-family draft: one block forward on its own backend, not planned
        skipped.append(f"draft block on {drafts.backend}")
    for worker, modes in MODES_BY_ROLE.items():
        if worker == "draft" and (not algorithm.traits.draft_model or drafts.backend is not None):
            continue
        # the DFLASH family's target is EAGLE's target (routing.plan's spec): same backend, same linear verify
        spec = algorithm.name.lower() if algorithm.traits.kit_plans else algorithm.traits.target_routes_as
        for mode in modes:
            if mode == "verify" and algorithm.is_none():
                continue
            backend = backend_of["decode" if "decode" in mode else "prefill"]
            if backend not in BACKENDS or spec is None:
                skipped.append(f"{worker} {mode} on {backend}")
                continue
            plans[(worker, mode)] = routing.plan(
                launch.model, mode, spec=spec, topk=topk if mode == "verify" else 1, env=launch.env,
                worker=worker, strict=False, backend=backend, draft_model=drafts.layout,
                sglang_version=launch.sglang_version, hybrid_swa_memory=hybrid)
    if not skipped:
        return plans, ""
    why = (f"the kit routes {', '.join(BACKENDS)} only" if algorithm.traits.kit_plans else
           f"the kit plans {algorithm.name}'s target routes as EAGLE's, on {', '.join(BACKENDS)} only, and not its "
           "draft block" if algorithm.traits.target_routes_as else f"the kit plans no routes for {algorithm.name}")
    return plans, f"not planned ({why}): {', '.join(skipped)}"


def decide(launch: Launch, plan_unmodelled: bool = False) -> Decisions:
    """SGLang's decisions for ``launch``, each naming what it mirrors.

    A launch that sets a surface the kit does not model is refused by name (:class:`NotModelledError`), unless
    ``plan_unmodelled``: the audit then answers for the launch without it, and says so in its findings.
    """
    # the windows the version's model file hands SGLang (a fix undone may change them)
    launch = replace(launch, model=as_of_version(launch.model, launch.sglang_version))
    model = launch.model
    check_backend_names(launch)
    choice = choose_backend(launch)
    check_config_reading(launch)
    check_startup(launch, choice)
    check_quantization(launch)
    check_context_length(launch)
    check_surface(launch)  # SGLang's start-up refusals for unified memory, drafts' sinks, DSPARK, UNO, prefix tails
    if not plan_unmodelled:
        check_modelled(launch)
    eligible = model.sglang_hybrid_swa_pool
    hybrid = eligible and not choice.disable_hybrid_swa_memory
    if hybrid:
        why = f"{model.architecture} is hybrid-SWA ({model.sources['hybrid pool eligibility']})"
    elif eligible:
        why = f"disabled by {choice.hybrid_why}"
    else:
        why = model.sources["hybrid pool eligibility"] + (f"; and {choice.hybrid_why}" if choice.hybrid_why else "")
    page_size, page_source = choose_page_size(launch, choice)
    speculation = settle(launch, choice, page_size)
    pools = size_pools(launch, hybrid, page_size, choice.attention_backend)
    dtype_bytes = kv_dtype_bytes(model, launch.server_args.kv_cache_dtype)
    scale = dtype_bytes / model.dtype_bytes
    minimum = int(request_bytes(model, MINIMUM_CONTEXT, hybrid=True) * scale)
    one_pool = int(request_bytes(model, MINIMUM_CONTEXT, hybrid=False) * scale)
    drafts = draft_pool(launch)
    if pools.unified is not None and pools.unified.fused is not None:
        drafts = fused_draft_pool(drafts, pools.unified.fused)
    backends = {"prefill": choice.prefill_attention_backend, "decode": choice.decode_attention_backend}
    routes, note = _routes(launch, backends, drafts, speculation.topk or 1, not choice.disable_hybrid_swa_memory)
    pc = pools.source
    label = (f"PER-REQUEST MINIMUM, not SGLang's sizing: one request of {MINIMUM_CONTEXT} tokens with its SWA "
             "layers holding only the window (what an SWA pool sized by the request cap approaches)")
    saved = pools.saved_fraction_vs_one_pool if hybrid else 0.0
    per_token = pools.bytes_per_context_token
    saved_how = (f"1 - {round(per_token):,} / {pools.one_pool_cell_bytes:,} B per token of context"
                 if per_token is not None else "unknown without the full pool's size: give --gpu-memory-gib or "
                 "--max-total-tokens")
    decode = choice.decode_attention_backend
    rule = resolver_for(decode, launch.sglang_version)
    resolver = {"fixed": "fixed _resolve_swa_kv_pool" + ("" if decode == "trtllm_mha" else " (PR #38756)"),
                "legacy": "legacy: isinstance on the active pool",
                "naive": "naive: the allocator's pool for every worker"}[rule]
    if rule != "fixed":
        resolver += f" (before PR #{reverted_fix(launch.sglang_version)})"
    return Decisions(
        attention_backend=Decided(choice.attention_backend, choice.source),
        prefill_attention_backend=Decided(choice.prefill_attention_backend, choice.why),
        decode_attention_backend=Decided(choice.decode_attention_backend, choice.why),
        hybrid_swa_memory=Decided(hybrid, why),
        page_size=Decided(page_size, page_source),
        pool_configurator=Decided(pools.configurator, pc),
        full_tokens=Decided(pools.full_tokens, f"{pc}; budget: {pools.budget_how}"),
        swa_tokens=Decided(pools.swa_tokens, pc),
        full_bytes=Decided(pools.full_bytes, f"{pools.full_cell_bytes} B per token x full tokens"),
        swa_bytes=Decided(pools.swa_bytes, f"{pools.swa_cell_bytes} B per token x SWA tokens"),
        bytes_saved_vs_one_pool=Decided(None if saved is None else round(saved, 4), saved_how),
        swa_pool_floor=Decided(pools.floor_tokens, pools.refused or (
            "validate_swa_pool_size: sliding_window_size + page_size" if pools.unified is None else
            "none: _solve_pool_sizes skips validate_swa_pool_size under --enable-unified-memory (the buffer's bs=1 "
            "floor stands in)")),
        per_request_minimum_bytes=Decided(minimum, label, "swa_kit.models.memory.request_bytes"),
        per_request_one_pool_bytes=Decided(one_pool, f"one request of {MINIMUM_CONTEXT} tokens, every layer "
                                                     "holding every token", "swa_kit.models.memory.request_bytes"),
        draft_pool=Decided(drafts, f"{drafts.source}; layout: {drafts.layout_from}"),
        draft_layers_in_pool=Decided(
            None if pools.draft is None else {"full": pools.draft.full, "swa": pools.draft.swa},
            "no draft layers" if pools.draft is None else pools.draft.how),
        parallel=Decided(pools.parallel.gpus, f"{pools.parallel.describe()}; pools per GPU"
                         + (f", {pools.stage_layers} layers on the smallest-pool stage" if pools.parallel.pp_size > 1
                            else "")),
        kv_bytes_all_gpus=Decided(None if pools.full_bytes is None else
                                  (pools.full_bytes + (pools.swa_bytes or 0)) * pools.parallel.gpus,
                                  f"(full + SWA bytes per GPU) x {pools.parallel.gpus} GPUs"),
        unified_memory=Decided(None if pools.unified is None else pools.unified.as_dict(),
                               "--enable-unified-memory not set" if pools.unified is None else pools.unified.how),
        resolver=Decided(resolver, f"sglang layers/attention/{'trtllm_mha' if decode == 'trtllm_mha' else 'aiter'}"
                                   "_backend.py _resolve_swa_kv_pool"),
        routes=routes, route_note=note, pools=pools,
    )


def default_sizing(model: str | ModelLayout, platform: str = "rocm-gfx942",
                   ratio: float | None = None) -> dict[str, Any]:
    """SGLang's default start-up sizing for a bundled model (no server arguments), for tables and notebooks.

    ``sglang_saved_pct`` is what the pool configurator saves per token of context against one pool of
    every layer; the per-request minimum is :func:`swa_kit.models.memory.savings` (label it as such beside this).
    ``ratio``: ``--swa-full-tokens-ratio`` (default: SGLang's own).
    """
    args = None if ratio is None else f"--swa-full-tokens-ratio {ratio!r}"
    launch = Launch(model=model, server_args=parse_server_args(args), platform=Platform.parse(platform)) \
        if isinstance(model, ModelLayout) else Launch.from_inputs(model=model, server_args=args, platform=platform)
    decisions = decide(launch)
    per_token = decisions.pools.bytes_per_context_token
    if per_token is None:  # only a request-capped SWA pool (server arguments this function never passes) has none
        raise UsageError(f"{launch.model.name}: SGLang's default sizing has no per-token cost on {platform}")
    return {"model": launch.model.name, f"backend_{platform}": decisions.attention_backend.value,
            "sglang_hybrid_pool": decisions.hybrid_swa_memory.value,
            "sglang_bytes_per_token": round(per_token),
            "one_pool_bytes_per_token": decisions.pools.one_pool_cell_bytes,
            "sglang_saved_pct": round(100 * decisions.bytes_saved_vs_one_pool.value, 1)}
