"""Full and SWA pool sizes as SGLang 0.5.23's pool configurators compute them at start-up.

Mirrors ``model_executor/pool_configurator.py``:

* ``HybridSWAPoolConfigurator`` (the default for a hybrid model): bytes per full-pool token =
  ``full_cell + swa_full_tokens_ratio x swa_cell``; full tokens = budget // that, page-aligned; SWA
  tokens = full tokens x ratio, page-aligned. The ratio falls back to 0.8
  (``arg_groups/fields/schedule.py``, ``fallback=0.8``).
* ``SWARequestCapPoolConfigurator`` when ``--max-running-requests`` is set, the radix cache is off and
  chunked prefill is on: the SWA pool is the worst case of the running requests
  (``compute_swa_request_cap``), the rest of the budget goes to the full pool.
* ``DefaultPoolConfigurator`` (one pool): every layer for every token, each at ``ModelConfig``'s one geometry
  (``_compute_cell_size``: ``get_num_kv_heads(tp) x (head_dim + v_head_dim) x layers``), the full-attention
  layers' geometry; so where SWA layers differ (Gemma-4, MiMo-V2) one pool is not the sum of the real layers.
* ``validate_swa_pool_size``: start-up fails when ``sliding_window_size + page_size >= swa_tokens``.

Every size is per GPU: KV heads split over the attention-TP ranks and layers over the pipeline stages
(:mod:`swa_kit.launch.parallel`). An EAGLE / EAGLE3 / STANDALONE draft's layers are counted in the target's cells
(``eagle_draft_num_layers``, its SWA share ``eagle_draft_swa_num_layers``, PR #29622), each at the target's
per-layer size. The same pool config sizes the draft's own pool (``MemoryPoolConfig``, shared by target and
draft): its full side holds the target's full tokens. Two releases before that are modelled
(:data:`~swa_kit.sglang_versions.REVERTIBLE_FIXES`): before PR #29622 the hybrid configurators count no draft
layers, so the draft's KV lands outside the budget; before PR #17630 the draft's pool takes the token count before
the hybrid-SWA adjustment (the budget over one cell of every layer), below the target's full pool.

The budget is ``GPU memory x mem_fraction_static - weights on one GPU``, the fraction as SGLang
resolves it (:mod:`swa_kit.launch.memory_fraction`); ``--max-total-tokens`` instead caps the full pool directly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from swa_kit.engine.spec_algorithms import EAGLE_FAMILY_HANDLER
from swa_kit.models.configs import DTYPE_BYTES, LayerKind, ModelLayout, text_fields
from swa_kit.engine.environment import env_value
from swa_kit.launch.backend import choose_backend, hybrid_swa_memory_off
from swa_kit.launch.drafts import dflash_draft_backend, published_draft_backend
from swa_kit.launch.inputs import GIB, Launch
from swa_kit.launch.memory_fraction import derived_context_length, resolve_fraction
from swa_kit.launch.parallel import Parallel, parallel_of
from swa_kit.launch.unified_memory import (DraftRails, UnifiedCells, UnifiedPool, fused_decision, max_full_tokens,
                                           unified_pool)
from swa_kit.errors import LaunchRefusedError, UsageError
from swa_kit.sglang_versions import has_fix

RATIO_FALLBACK = 0.8
_PC = "sglang 0.5.23 model_executor/pool_configurator.py"
_PROFILE = "sglang 0.5.23 model_executor/model_runner.py: available KV memory after the static fraction"
_KV_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class PoolSizes:
    """What the configurator decides, with the cells it used and how the budget was found."""

    configurator: str  # SGLang's class name, e.g. HybridSWAPoolConfigurator
    source: str  # the file and class it mirrors, and why it applies
    hybrid: bool
    ratio: float | None
    full_cell_bytes: int  # one token in every full-attention layer (all layers without a hybrid pool)
    swa_cell_bytes: int  # one token in every sliding / chunked layer (0 without a hybrid pool)
    budget_bytes: int | None
    budget_how: str
    full_tokens: int | None
    swa_tokens: int | None
    floor_tokens: int | None  # validate_swa_pool_size refuses swa_tokens <= this
    refused: str | None  # the start-up error SGLang raises, or None
    parallel: Parallel = Parallel(1, 1, 1, 1)
    draft: DraftLayers | None = None  # draft layers counted in the cells above
    draft_outside_bytes: int = 0  # the draft's KV allocated on top of the budget (before PR #29622)
    draft_full_tokens: int | None = None  # the full side of an EAGLE-family draft's own pool (None: no such pool)
    stage_layers: int = 0  # target layers this GPU's pipeline stage holds
    default_pool_cell_bytes: int = 0  # one token in DefaultPoolConfigurator's one pool (what it sizes tokens by)
    unified: UnifiedPool | None = None  # --enable-unified-memory's one buffer (swa_kit.launch.unified_memory)

    @property
    def full_bytes(self) -> int | None:
        return None if self.full_tokens is None else self.full_tokens * self.full_cell_bytes

    @property
    def swa_bytes(self) -> int | None:
        return None if self.swa_tokens is None else self.swa_tokens * self.swa_cell_bytes

    @property
    def one_pool_cell_bytes(self) -> int:
        """One token in every layer at its own geometry: the bytes one pool of every layer would really hold."""
        return self.full_cell_bytes + self.swa_cell_bytes

    @property
    def bytes_per_context_token(self) -> float | None:
        """KV bytes the pools spend per token of full-pool capacity (the unit the ratio is set in).

        None for a request-capped SWA pool beside a full pool of unknown size (no KV budget, no --max-total-tokens).
        """
        if not self.hybrid:
            return float(self.full_cell_bytes)
        if self.ratio is not None:  # the configurator's own cell: full + ratio x SWA (before page rounding)
            return self.full_cell_bytes + self.ratio * self.swa_cell_bytes
        full, swa = self.full_bytes, self.swa_bytes
        if full is None or swa is None or not self.full_tokens:
            return None
        return (full + swa) / self.full_tokens

    @property
    def saved_fraction_vs_one_pool(self) -> float | None:
        """Share of KV bytes per token of context the hybrid pool saves against one pool of every layer."""
        per_token = self.bytes_per_context_token
        return None if per_token is None else 1 - per_token / self.one_pool_cell_bytes


def kv_dtype_bytes(model: ModelLayout, kv_cache_dtype: str) -> int:
    """Bytes per KV element as SGLang stores them (``mem_cache/kv_cache_dtype.py configure_kv_cache_dtype``).

    ``auto`` is the model's dtype after ``configs/model_config.py _get_and_verify_dtype``, which serves a float32
    checkpoint in float16 (bfloat16 for Gemma): 2 bytes, never 4.
    """
    if kv_cache_dtype == "auto":
        return 2 if model.dtype == "float32" else DTYPE_BYTES[model.dtype]
    if kv_cache_dtype not in _KV_DTYPE_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r}: the kit sizes auto, {', '.join(_KV_DTYPE_BYTES)}")
    return _KV_DTYPE_BYTES[kv_cache_dtype]


def _layer_bytes(kind: LayerKind, dtype_bytes: int, parallel: Parallel) -> int:
    return parallel.kv_heads_per_gpu(kind.num_kv_heads) * (kind.head_dim + kind.v_head_dim) * dtype_bytes


def _cell(model: ModelLayout, layer_ids: list[int], dtype_bytes: int, parallel: Parallel) -> int:
    return sum(_layer_bytes(model.layer_kind(i), dtype_bytes, parallel) for i in layer_ids)


def _full_kind(model: ModelLayout) -> LayerKind:
    return next((k for k in model.kinds.values() if not k.uses_swa_pool), next(iter(model.kinds.values())))


def _one_pool_cell(model: ModelLayout, layers: list[int], dtype_bytes: int, parallel: Parallel,
                   drafts: DraftLayers) -> int:
    """``DefaultPoolConfigurator``: every layer at the full-attention geometry, an EAGLE draft's layers at the same
    per-layer size (``int(cell x draft_layers / layers)``), a DFLASH-family draft at its own bytes per token
    (``dflash_utils.py scale_kv_cell_size_per_token_for_dflash`` with ``draft_cell_size_per_token``)."""
    cell = len(layers) * _layer_bytes(_full_kind(model), dtype_bytes, parallel)
    if drafts.own_cell_bytes:
        return cell + drafts.own_cell_bytes
    return cell + int(cell * drafts.total / len(layers)) if drafts.total and layers else cell


@dataclass(frozen=True)
class DraftLayers:
    """The draft layers SGLang counts in the target's pool cell (0 and 0 when it counts none)."""

    full: int
    swa: int
    how: str
    own_cell_bytes: int = 0  # a DFLASH-family draft: its bytes per token at its own geometry, on the full side

    @property
    def total(self) -> int:
        return self.full + self.swa


_AUX = "sglang 0.5.23 model_runner_components/spec_aux_hidden_state.py resolve_spec_aux_hidden_state_config"


def _nextn_layers(model: ModelLayout) -> int | None:
    value = text_fields(model).get("num_nextn_predict_layers")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def draft_layers(launch: Launch) -> DraftLayers:
    """``eagle_draft_num_layers`` / ``eagle_draft_swa_num_layers`` for EAGLE, EAGLE3 and STANDALONE.

    With a draft path, the draft's ``num_nextn_predict_layers`` or else its layer count; without one, the
    target's ``num_nextn_predict_layers`` (none: no draft layers counted). The SWA share is the draft config's
    SWA layers where that config is hybrid-SWA (``is_hybrid_swa``, so not with hybrid SWA memory off by the flag or
    by the target's override, :func:`~swa_kit.launch.backend.hybrid_swa_memory_off`), at most all of them.
    """
    args = launch.server_args
    if launch.spec_algorithm.traits.dflash_family:
        return dflash_draft_layers(launch)
    if launch.spec_algorithm.traits.handler != EAGLE_FAMILY_HANDLER:  # EAGLE, EAGLE3, STANDALONE
        return DraftLayers(0, 0, "no EAGLE / STANDALONE draft in the target's pool")
    if args.speculative_draft_model_path is None and launch.draft_model is None:
        config, origin = launch.model, "path-less: the target's config"
        count = _nextn_layers(config)
        if count is None:
            return DraftLayers(0, 0, f"{_AUX}: no draft path and no num_nextn_predict_layers, no draft layers")
    elif launch.draft_model is None:
        path = str(args.speculative_draft_model_path)[:200]
        return DraftLayers(0, 0, f"ASSUMED none: the draft's config at {path!r} is "
                                 "not on this machine (SGLang counts its layers); give --draft-hf-config")
    else:
        config, origin = launch.draft_model, f"the draft's config ({launch.draft_model.architecture})"
        count = _nextn_layers(config) or config.num_layers
    hybrid = config.sglang_hybrid_swa_pool and not hybrid_swa_memory_off(launch)[0]  # the target's override too
    swa = min(len(config.swa_attention_layer_ids), count) if hybrid else 0
    return DraftLayers(count - swa, swa, f"{_AUX}: {count} draft layers from {origin}, {swa} of them SWA")


_DFLASH_BUDGET = ("sglang 0.5.23 mem_cache/draft_kv_budget.py resolve_dflash_draft_cell_size, "
                  "speculative/dflash_utils.py dflash_draft_cell_size_per_token")


def dflash_draft_layers(launch: Launch) -> DraftLayers:
    """A DFLASH / DSPARK draft in the target's budget: ``dflash_draft_num_layers`` (the draft config's
    ``num_hidden_layers``, ``_resolve_dflash_aux_hidden_state``), priced at the draft's own geometry: its KV heads
    on one GPU (``get_num_kv_heads`` at the draft's attention-TP width) x ``head_dim + v_head_dim`` x layers x the
    draft's KV dtype (``configure_kv_cache_dtype`` for the draft worker: the target's ``--kv-cache-dtype``, a draft
    whose published backend is fa4 in its model dtype). The configurators add it to the full side's cell
    (``_dflash_draft_cell_size``)."""
    draft = launch.draft_model
    if draft is None:
        path = str(launch.server_args.speculative_draft_model_path)[:200]
        return DraftLayers(0, 0, f"ASSUMED none: the draft's config at {path!r} is not on this machine (SGLang "
                                 "prices its KV from it); give --draft-hf-config")
    # the backend resolution published: DSPARK's fa4 prefill is not (so its budget keeps the target's KV dtype)
    kv_dtype = "auto" if published_draft_backend(launch) == "fa4" else launch.server_args.kv_cache_dtype
    layers = draft.num_layers
    per_layer = _layer_bytes(_full_kind(draft), kv_dtype_bytes(draft, kv_dtype), parallel_of(launch.server_args))
    return DraftLayers(layers, 0, f"{_DFLASH_BUDGET}: {layers} draft layers of the draft's config "
                                  f"({draft.architecture}) at {per_layer} B per token each", layers * per_layer)


def default_chunked_prefill_size(gpu_memory_bytes: int | None) -> int:
    """SGLang's GPU-memory-dependent default (``arg_groups/memory_hook.py``)."""
    mib = (gpu_memory_bytes or 0) / (1 << 20)
    for limit, size in ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192)):
        if mib < limit:
            return size
    return 16384


def _budget(launch: Launch, attention_backend: str, parallel: Parallel) -> tuple[int | None, str]:
    """Bytes per GPU for the KV pools: GPU memory x the resolved fraction, minus the weights on that GPU."""
    memory = launch.platform.gpu_memory_bytes
    if memory is None:
        return None, "no GPU memory (platform cpu): give --gpu-memory-gib for pool sizes"
    chunked = launch.server_args.chunked_prefill_size or default_chunked_prefill_size(memory)
    fraction = resolve_fraction(launch, attention_backend, chunked, parallel)
    weights = launch.weights_bytes
    weights_how = "minus --weights-gib (per GPU)" if weights is not None else \
        "weights NOT subtracted (give --weights-gib, the weights on one GPU)"
    assumed = " (assumed for the platform)" if launch.platform.memory_assumed else ""
    budget = int(memory * fraction.value) - (weights or 0)
    text = (f"{memory / GIB:.1f} GiB GPU memory{assumed} x {fraction.value:.4g} ({fraction.how}) {weights_how} "
            f"= {budget / GIB:.1f} GiB per GPU")
    if budget <= 0:
        raise LaunchRefusedError(
            f"SGLang refuses this launch: the KV budget is {budget / GIB:.1f} GiB per GPU ({text}), so no pool fits "
            f"({_PROFILE}); lower --weights-gib, raise --mem-fraction-static, or add GPUs (--tp-size)")
    return budget, text


def max_running_requests(launch: Launch) -> int | None:
    """``--max-running-requests``, else what the speculative handler declares (48, ``speculative_hook.py``)."""
    return launch.server_args.max_running_requests or launch.spec_algorithm.traits.default_max_running_requests


def swa_request_cap(launch: Launch, sws: int, page_size: int, chunked_prefill_size: int, attn_dp_size: int = 1) -> int:
    """``compute_swa_request_cap``: worst-case SWA slots the scheduler holds at max_running_requests."""
    args = launch.server_args
    running = max_running_requests(launch)
    if running is None:
        raise UsageError("the SWA request cap counts running requests: give --max-running-requests")
    draft_tokens = args.speculative_num_draft_tokens or 1
    interval = max(1, int(env_value(launch.env, "SGLANG_SWA_EVICTION_INTERVAL")))
    trailing = sws + interval * draft_tokens + page_size
    if args.speculative_algorithm is None:
        decode_alloc = page_size
    else:  # spec-v2 overlap keeps 2 x the per-decode allocation outstanding (allocation_sizing.py)
        steps, topk = args.speculative_num_steps or 1, args.speculative_eagle_topk or 1
        if launch.spec_algorithm.traits.dflash_family:  # _handle_dflash / _handle_dspark: one step of topk 1
            steps, topk = 1, 1
        decode_alloc = 2 * max(steps * topk, draft_tokens)
    chunks = 1 if args.disable_overlap_schedule else 2
    requests = max(1, running // attn_dp_size)  # each attention-DP group schedules its share
    return (trailing + decode_alloc) * requests + chunks * chunked_prefill_size + page_size


def _align(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def size_pools(launch: Launch, hybrid: bool, page_size: int, attention_backend: str = "triton") -> PoolSizes:
    """The pools SGLang sizes at start-up for ``launch`` on one GPU; with PP, the stage with the fewest tokens."""
    parallel = parallel_of(launch.server_args)
    budget, how = _budget(launch, attention_backend, parallel)
    drafts = draft_layers(launch)
    stages = [_size_stage(launch, hybrid, page_size, budget, how, list(layers), parallel, drafts)
              for layers in parallel.stage_layers(launch.model.num_layers)]
    return min(stages, key=lambda p: (p.full_tokens is None, p.full_tokens or 0))


def _size_stage(launch: Launch, hybrid: bool, page_size: int, budget: int | None, how: str, layers: list[int],
                parallel: Parallel, drafts: DraftLayers) -> PoolSizes:
    model, args = launch.model, launch.server_args
    dtype_bytes = kv_dtype_bytes(model, args.kv_cache_dtype)
    if args.max_total_tokens is not None:
        how = f"--max-total-tokens {args.max_total_tokens} caps the full pool"
    one_pool = _one_pool_cell(model, layers, dtype_bytes, parallel, drafts)
    if not hybrid:
        cell = one_pool
        tokens = args.max_total_tokens or (budget // cell if budget else None)
        tokens = _align(tokens, page_size) if tokens else None
        name = "DefaultPoolConfigurator"
        return PoolSizes(name, f"{_PC} {name}", False, None, cell, 0, budget, how, tokens, None, None, None,
                         parallel=parallel, draft=drafts, stage_layers=len(layers), default_pool_cell_bytes=one_pool)
    full_ids = [i for i in model.full_attention_layer_ids if i in layers]
    swa_ids = [i for i in model.swa_attention_layer_ids if i in layers]
    full_kind = _full_kind(model)
    swa_kind = next(k for k in model.kinds.values() if k.uses_swa_pool)
    full_layer, swa_layer = (_layer_bytes(k, dtype_bytes, parallel) for k in (full_kind, swa_kind))
    outside = DraftLayers(0, 0, "")
    eagle = not drafts.own_cell_bytes
    if eagle and drafts.total and not has_fix(launch.sglang_version, 29622):  # the configurator counts no draft layers
        drafts, outside = DraftLayers(0, 0, f"before PR #29622: {drafts.how}, none counted in the budget"), drafts
    # HybridSWAPoolConfigurator: EAGLE's draft layers take the target's full / SWA per-token geometry; a DFLASH
    # draft's own bytes per token join the full side (_dflash_draft_cell_size)
    full_cell = _cell(model, full_ids, dtype_bytes, parallel) + \
        (drafts.full * full_layer if eagle else drafts.own_cell_bytes)
    swa_cell = _cell(model, swa_ids, dtype_bytes, parallel) + drafts.swa * swa_layer
    sws = model.sliding_window_size
    if sws is None:  # chunked layers only: SGLang sizes the SWA pool with the chunk (resolve_sliding_window_size)
        sws = max(k.chunk_size for k in model.kinds.values() if k.chunk_size)
    chunked = args.chunked_prefill_size or default_chunked_prefill_size(launch.platform.gpu_memory_bytes)
    cap_mode = max_running_requests(launch) is not None and args.disable_radix_cache and chunked > 0 \
        and bool(model.full_attention_layer_ids)
    ratio = args.swa_full_tokens_ratio or RATIO_FALLBACK
    swa: int | None
    if args.enable_unified_memory:
        cap = -(-swa_request_cap(launch, sws, page_size, chunked, parallel.attn_dp_size) // page_size) * page_size \
            if cap_mode else None
        return _size_unified(launch, PoolSizes("", "", True, ratio, 0, 0, budget, how, None, None, None, None,
                                               parallel=parallel, draft=drafts, stage_layers=len(layers),
                                               default_pool_cell_bytes=one_pool),
                             (len(full_ids), len(swa_ids), full_layer, swa_layer), dtype_bytes, page_size, cap)
    if cap_mode:
        swa = -(-swa_request_cap(launch, sws, page_size, chunked, parallel.attn_dp_size) // page_size) * page_size
        full = args.max_total_tokens or ((budget - swa * swa_cell) // full_cell if budget else None)
        if full is not None and full <= 0:
            raise LaunchRefusedError(
                f"SGLang refuses this launch: the SWA request cap ({swa} tokens) leaves no room for the full pool "
                f"({_PC} SWARequestCapPoolConfigurator.calculate_pool_sizes); lower --max-running-requests or raise "
                "--mem-fraction-static")
        full = _align(full, page_size) if full else None
        name = "SWARequestCapPoolConfigurator"
        source = f"{_PC} {name} (--max-running-requests with the radix cache off)"
        return PoolSizes(name, source, True, None, full_cell, swa_cell, budget, how, full, swa, None, None,
                         parallel=parallel, draft=drafts, stage_layers=len(layers), default_pool_cell_bytes=one_pool,
                         draft_outside_bytes=_outside_bytes(outside, full, swa, full_layer, swa_layer),
                         draft_full_tokens=full if _owns_draft_pool(launch) else None)
    full = args.max_total_tokens or (int(budget // (full_cell + ratio * swa_cell)) if budget else None)
    full = _align(full, page_size) if full else None
    swa = _align(int(full * ratio), page_size) if full else None
    refused = None
    if swa is not None and sws + page_size >= swa:
        refused = (f"SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor is "
                   f"sliding_window_size ({sws}) + page_size ({page_size}) (validate_swa_pool_size)")
    ratio_how = "--swa-full-tokens-ratio" if args.swa_full_tokens_ratio else "unset: SGLang's fallback in " \
                                                                             "arg_groups/fields/schedule.py"
    name = "HybridSWAPoolConfigurator"
    draft_full = None
    if _owns_draft_pool(launch):
        draft_full = full
        if not has_fix(launch.sglang_version, 17630) and budget and args.max_total_tokens is None:
            draft_full = _align(budget // (full_cell + swa_cell), page_size)  # every layer at full size
    return PoolSizes(name, f"{_PC} {name}, swa_full_tokens_ratio {ratio} ({ratio_how})", True, ratio, full_cell,
                     swa_cell, budget, how, full, swa, sws + page_size, refused,
                     parallel=parallel, draft=drafts, stage_layers=len(layers), default_pool_cell_bytes=one_pool,
                     draft_outside_bytes=_outside_bytes(outside, full, swa, full_layer, swa_layer),
                     draft_full_tokens=draft_full)


def _owns_draft_pool(launch: Launch) -> bool:
    """An EAGLE / EAGLE3 / STANDALONE draft: its worker allocates a pool of its own from the shared pool config."""
    return launch.spec_algorithm.traits.handler == EAGLE_FAMILY_HANDLER


def _outside_bytes(outside: DraftLayers, full: int | None, swa: int | None, full_layer: int, swa_layer: int) -> int:
    """Bytes of draft KV the budget left out: the draft's layers over the pools' token counts."""
    return (full or 0) * outside.full * full_layer + (swa or 0) * outside.swa * swa_layer


def _draft_rails(launch: Launch, prefill: str, decode: str) -> DraftRails:
    """The backends and region dtype ``_fused_draft_decision`` reads: the DFLASH family's draft backend, whose fa4
    region keeps the draft's compute dtype (``allow_target_draft_different_cache_dtype``)."""
    published = published_draft_backend(launch)
    if not launch.spec_algorithm.traits.dflash_family:
        return DraftRails((prefill, decode), published)
    backend = dflash_draft_backend(launch)
    own = kv_dtype_bytes(launch.draft_model, "auto") if backend == "fa4" and launch.draft_model else None
    return DraftRails((prefill, decode), published, backend, own)


def _size_unified(launch: Launch, base: PoolSizes, shape: tuple[int, int, int, int], dtype_bytes: int,
                  page_size: int, cap: int | None) -> PoolSizes:
    """The boot split and buffer under ``--enable-unified-memory`` (:mod:`swa_kit.launch.unified_memory`); ``shape``:
    full and SWA layers on this stage and one layer's bytes per token of each; ``cap``: the SWA request cap, if any.

    No floor refusal: ``_solve_pool_sizes`` skips ``validate_swa_pool_size`` under unified memory (the buffer's bs=1
    floor stands in). A fused draft's layers are priced in the full entry, not as draft layers.
    """
    full_layers, swa_layers, full_layer, swa_layer = shape
    choice = choose_backend(launch)
    fused, declined = fused_decision(launch, _draft_rails(launch, choice.prefill_attention_backend,
                                                          choice.decode_attention_backend), base.parallel, dtype_bytes)
    drafts = base.draft or DraftLayers(0, 0, "")
    if fused is not None:
        drafts = DraftLayers(0, 0, f"fused into the target's entries ({fused.pool_class}, lanes {fused.lanes}): "
                                   "no draft layers in the cells (kv_cache_configurator.py fused_entry_bytes)")
    elif declined:
        drafts = replace(drafts, how=f"{drafts.how}; fused draft KV disabled ({declined}): a private pool "
                                     "(kv_cache_configurator.py _fused_draft_for_pool_factory)")
    # _draft_pool_bytes_per_token: EAGLE's layers at the target's geometry, the DFLASH family's own cell
    draft_per_token = drafts.own_cell_bytes or drafts.full * full_layer + drafts.swa * swa_layer
    cells = UnifiedCells(full_layer, swa_layer, full_layers, swa_layers, draft_per_token, fused)
    args, budget, ratio = launch.server_args, base.budget_bytes, base.ratio or RATIO_FALLBACK
    name = "SWARequestCapPoolConfigurator" if cap is not None else "HybridSWAPoolConfigurator"
    full: int | None
    if args.max_total_tokens is not None:
        full = _align(args.max_total_tokens, page_size)
    elif budget is None:
        full = None
    elif cap is not None and not cells.draft_per_token:  # the cap configurator's plain solve: the rest goes to full
        swa_cell = cells.swa_entry if fused is not None and "swa" in fused.lanes else swa_layer * swa_layers
        full = _align((budget - cap * swa_cell) // cells.full_bytes_per_token, page_size)
    else:
        full = max_full_tokens(cells, budget, page_size, ratio, fixed_swa=cap)
    if full is not None and full <= 0:
        raise LaunchRefusedError(f"SGLang refuses this launch: no full-pool page fits the KV budget under "
                                 f"--enable-unified-memory ({_PC} {name}); raise --mem-fraction-static")
    swa = None if full is None else cap if cap is not None else _align(int(full * ratio), page_size)
    pool = None
    if full is not None and swa is not None:
        context = args.context_length or derived_context_length(launch.model)
        pool = unified_pool(launch, cells, full, swa, budget, args.max_total_tokens is None, page_size, context)
    source = (f"{_PC} {name} under --enable-unified-memory (_max_unified_full_tokens: the most pages whose full and "
              f"SWA bytes{' and private draft pool' if cells.draft_per_token else ''} fit the budget)")
    return replace(base, configurator=name, source=source, full_cell_bytes=cells.full_bytes_per_token,
                   swa_cell_bytes=swa_layer * swa_layers, full_tokens=full, swa_tokens=swa, draft=drafts, unified=pool,
                   ratio=None if cap is not None else ratio)
