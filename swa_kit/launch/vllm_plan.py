"""One vLLM 0.34 launch on ROCm, decided: backends per layer kind, routes per forward mode, KV cache and pool.

Each decision carries the vLLM function it mirrors (:mod:`swa_kit.launch.vllm_backends`,
:mod:`swa_kit.launch.vllm_routes`, :mod:`swa_kit.launch.vllm_kv_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.launch.inputs import GIB, PLATFORMS
from swa_kit.launch.vllm_admission import Admission, admission, default_max_num_batched_tokens
from swa_kit.launch.vllm_args import VLLM_BACKENDS, VllmArgs, merged_env, vllm_env
from swa_kit.launch.vllm_backends import DEFAULT_BLOCK_SIZE, LayerQuery, Selection, block_size, model_backend, select
from swa_kit.engine.spec_algorithms import VLLM_GEMMA4_DRAFT_METHOD, VLLM_SPEC_METHODS
from swa_kit.launch.vllm_kv_cache import (Group, KvCachePlan, LayerSpec, group_layers,
                                          hybrid_manager_disabled, sliding_block_size)
from swa_kit.launch.vllm_drafter import NO_DRAFT_MODEL, Drafter, DrafterPlan, owned_layouts, place
from swa_kit.launch.vllm_routes import MODES, VllmRoute, route
from swa_kit.models.configs import DTYPE_BYTES, LayerKind, ModelLayout, text_fields
from swa_kit.vllm_versions import REVERTIBLE_FIXES, VLLM_VERSION, VLLM_VERSIONS, reverted_fix, versions_help

VLLM_PLATFORMS = ("rocm-gfx942", "rocm-gfx950")
#: ``ModelArchConfigConvertor.is_mm_prefix_lm`` (vllm/transformers_utils/model_arch_config_convertor.py).
MM_PREFIX_LM_MODELS = ("bagel", "gemma3", "molmo2", "moondream3", "paligemma")
#: Models whose attention layers carry sinks (vllm/model_executor/models/gpt_oss.py: ``sinks=self.sinks``).
SINK_ARCHITECTURES = ("GptOssForCausalLM",)
_KV_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
_ROCM_PREFERRED_DTYPE = "bfloat16"  # Platform.supported_dtypes[0] (vllm/platforms/interface.py)
#: RoPE types whose ``max_position_embeddings`` is already scaled (``_get_and_verify_max_len``).
_PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
#: ``derive_max_model_len_and_key``'s keys, in its order.
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


@dataclass(frozen=True)
class Decision:
    decision: str
    value: Any
    source: str


@dataclass(frozen=True)
class KindPlan:
    kind: LayerKind
    layers: int
    selection: Selection
    routes: tuple[VllmRoute, ...]


@dataclass(frozen=True)
class VllmPlan:
    model: ModelLayout
    args: VllmArgs
    env: dict[str, str]
    platform: str
    kinds: tuple[KindPlan, ...]
    kv: KvCachePlan
    block_size: int
    decisions: tuple[Decision, ...]
    available_bytes: int
    vllm_version: str = VLLM_VERSION
    drafter: DrafterPlan | None = None  # None: no drafter layers placed (none given, or none to place)
    admission: Admission | None = None

    @property
    def num_blocks(self) -> int:
        return self.kv.num_blocks(self.available_bytes)


def served_dtype(model: ModelLayout) -> str:
    """The dtype vLLM serves ``model`` in: ``ModelConfig``'s ``_resolve_auto_dtype`` downcasts a float32 checkpoint to
    the platform's first supported dtype, bfloat16 on ROCm (``RocmPlatform`` keeps ``Platform.supported_dtypes``)."""
    return _ROCM_PREFERRED_DTYPE if model.dtype == "float32" else model.dtype


def _kv_dtype_bytes(model: ModelLayout, kv_cache_dtype: str) -> int:
    """``CacheConfig.cache_dtype``: auto = the served dtype; an explicit half dtype must be the served one."""
    dtype = served_dtype(model)
    if kv_cache_dtype == "auto":
        return DTYPE_BYTES[dtype]
    if kv_cache_dtype in _KV_BYTES:
        return _KV_BYTES[kv_cache_dtype]
    if kv_cache_dtype != dtype:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype}: vLLM requires an explicit float16/bfloat16 KV cache "
                         f"to match the model's dtype ({dtype}); way out: --kv-cache-dtype auto")
    return DTYPE_BYTES[dtype]


def _query(model: ModelLayout, kind: LayerKind, block: int) -> LayerQuery:
    hf = model.hf_config
    mm_prefix = bool(hf.get("is_mm_prefix_lm", hf.get("model_type") in MM_PREFIX_LM_MODELS))
    return LayerQuery(head_size=kind.head_dim, dtype=served_dtype(model), block_size=block,
                      has_sink=model.architecture in SINK_ARCHITECTURES, use_mm_prefix=mm_prefix,
                      has_sliding_window=kind.attention == "sliding")


def _check_supported(model: ModelLayout, args: VllmArgs, platform: str) -> None:
    if platform not in VLLM_PLATFORMS:
        raise UsageError(f"--platform {platform}: the vLLM audit models vLLM {VLLM_VERSION} on ROCm only; "
                         f"accepted: {', '.join(VLLM_PLATFORMS)}")
    for kind in model.kinds.values():
        if kind.head_dim != kind.v_head_dim:
            raise UsageError(f"{model.name}: V head size {kind.v_head_dim} differs from K's {kind.head_dim}; vLLM's "
                             "model file then picks a DiffKV backend itself (e.g. mimo_v2.py), which the kit does "
                             "not model yet")
    method = (args.speculative_config or {}).get("method")
    if args.speculative_config is not None and method not in VLLM_SPEC_METHODS:
        raise UsageError(f"--speculative-config method {method!r}: the kit models {', '.join(VLLM_SPEC_METHODS)}")


def _check_drafter(model: ModelLayout, args: VllmArgs, drafter: Drafter | None) -> None:
    method = (args.speculative_config or {}).get("method")
    if drafter is not None and (method is None or method in NO_DRAFT_MODEL):
        raise UsageError(f"--draft-hf-config: the launch has {'no drafter model' if method else 'no drafter'} "
                         f"(--speculative-config method {method!r}); way out: drop --draft-hf-config, or give a "
                         "--speculative-config whose method runs a draft model")
    if drafter is not None and drafter.kv_shared and (method != VLLM_GEMMA4_DRAFT_METHOD
                                                      or not model.architecture.startswith("Gemma4")):
        raise UsageError("--draft-hf-config: a Gemma-4 assistant drafter reads a Gemma-4 target's KV; vLLM runs it "
                         f"with --speculative-config method {VLLM_GEMMA4_DRAFT_METHOD} on a Gemma-4 model only")


def layer_specs(model: ModelLayout, args: VllmArgs, selections: dict[str, Selection], block: int) -> list[LayerSpec]:
    """``Attention.get_kv_cache_spec`` for every layer, at ``block`` tokens per block."""
    dtype_bytes, tp = _kv_dtype_bytes(model, args.kv_cache_dtype), args.tensor_parallel_size
    for kind in model.kinds.values():  # QKVParallelLinear: heads split evenly, or replicated evenly
        heads = kind.num_kv_heads
        if (heads >= tp and heads % tp) or (heads < tp and tp % heads):
            raise UsageError(f"-tp {tp}: {model.name}'s {kind.name} layers have {heads} KV heads, which vLLM splits "
                             "evenly over the ranks or replicates evenly (an assertion at start-up); way out: a "
                             f"tensor-parallel size that divides {heads} or that {heads} divides")
    specs = []
    for layer_id in range(model.num_layers):
        kind = model.layer_kind(layer_id)
        base = LayerSpec("FullAttentionSpec", block, max(1, kind.num_kv_heads // tp), kind.head_dim,
                         kind.v_head_dim, dtype_bytes)
        if kind.attention == "sliding":
            size = sliding_block_size(selections[kind.name].backend, base.bytes_per_token, block)
            base = LayerSpec("SlidingWindowSpec", size, base.num_kv_heads, base.head_size, base.head_size_v,
                             dtype_bytes, sliding_window=kind.window.keys)
        elif kind.attention == "chunked":
            base = LayerSpec("ChunkedLocalAttentionSpec", block, base.num_kv_heads, base.head_size,
                             base.head_size_v, dtype_bytes, attention_chunk_size=kind.chunk_size)
        specs.append(base)
    return specs


def _available(args: VllmArgs, platform: str, gpu_memory_gib: float | None,
               weights_gib: float | None) -> tuple[int, list[Decision]]:
    typical = PLATFORMS[platform][1]
    assert typical is not None  # both ROCm platforms name a typical GPU
    memory = int(gpu_memory_gib * GIB) if gpu_memory_gib is not None else typical
    util = args.gpu_memory_utilization if args.gpu_memory_utilization is not None else 1.0
    weights = int((weights_gib or 0) * GIB)
    available = int(memory * util) - weights
    if available <= 0:
        raise UsageError(f"no memory left for the KV cache: {memory} B x {util} - weights {weights} B")
    return available, [
        Decision("GPU memory", memory, "--gpu-memory-gib" if gpu_memory_gib is not None else
                 f"assumed: {PLATFORMS[platform][0]}"),
        Decision("memory utilization", util, "--gpu-memory-utilization" if args.gpu_memory_utilization is not None
                 else "CacheConfig.resolved_gpu_memory_utilization: 1.0 with the extensible KV cache (ROCm default)"),
        Decision("weights subtracted", weights, "--weights-gib" if weights_gib is not None else
                 "not given: 0 (activations and graphs are not subtracted either)"),
    ]


def derived_max_model_len(model: ModelLayout) -> tuple[int, str]:
    """``_get_and_verify_max_len`` (vllm/config/model.py) for an unset --max-model-len: the smallest of the text
    config's length keys (``derive_max_model_len_and_key``; ``model_max_length`` wins when set; 2048 when none),
    times the RoPE ``factor`` of a scaling type that does not already scale it (not YaRN, LongRoPE, Llama-3; never
    for Gemma-3)."""
    text = text_fields(model)
    found = {k: text[k] for k in _MAX_LEN_KEYS if isinstance(text.get(k), int) and not isinstance(text[k], bool)}
    if text.get("model_max_length"):
        key = "model_max_length"
    elif found:
        key = min(found, key=lambda k: found[k])
    else:
        return 2048, "none of its length keys: vLLM's default 2048"
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    nested = [p for p in rope.values() if isinstance(p, dict)] if isinstance(rope, dict) else []
    factor = 1.0
    if "gemma3" not in str(text.get("model_type", "")):
        for params in nested or ([rope] if isinstance(rope, dict) and rope else []):
            if params.get("rope_type", params.get("type")) not in _PRESCALED_ROPE:
                factor = params.get("factor", factor) or 1.0
    length = int(text["model_max_length"] if key == "model_max_length" else found[key])
    return int(length * factor), key + (f" x RoPE factor {factor:g}" if factor != 1 else "")


def _admission(args: VllmArgs, model: ModelLayout, kv: KvCachePlan, pool_blocks: int, memory: int,
               drafter: DrafterPlan | None, prompt_tokens: int | None, version: str) -> tuple[Admission,
                                                                                              list[Decision]]:
    """The admission gate's inputs (max_model_len, in-flight tokens) and a prompt's charge, with their sources."""
    if args.max_model_len is not None:
        max_len, len_from = args.max_model_len, "--max-model-len"
    else:
        max_len, key = derived_max_model_len(model)
        len_from = f"the config's {key} (ModelConfig: _get_and_verify_max_len)"
    prompt = max_len if prompt_tokens is None else prompt_tokens
    if not 0 < prompt <= max_len:
        why = "a prompt holds at least one token" if prompt < 1 else \
            f"vLLM refuses a prompt over max_model_len ({max_len}) before admission"
        raise UsageError(f"--prompt-tokens {prompt}: {why}; give 1..{max_len}")
    mnbt = args.max_num_batched_tokens or default_max_num_batched_tokens(memory / GIB)
    batches = 1 if args.async_scheduling is False else 2  # pipeline stages (1), plus one with async scheduling
    owned = frozenset(layer.group for layer in (drafter.layers if drafter else ()) if layer.layer_id is not None)
    gate = admission(kv.groups, pool_blocks, prompt, max_len, batches * mnbt, owned, version)
    return gate, [
        Decision("max_model_len", max_len, len_from),
        Decision("max in-flight tokens", gate.max_in_flight_tokens,
                 f"VllmConfig.max_in_flight_tokens: {batches} concurrent batch(es) (async scheduling "
                 f"{'off' if batches == 1 else 'on'}) x max_num_batched_tokens {mnbt} ("
                 + ("--max-num-batched-tokens" if args.max_num_batched_tokens else
                    "EngineArgs.get_batch_defaults for vllm serve, by GPU memory") + ")"),
        Decision(f"admission, a {prompt}-token prompt", f"{gate.blocks(prompt)} blocks (per group: admission table)",
                 "KVCacheManager.allocate_slots(full_sequence_must_fit=True): get_num_blocks_to_allocate per group"),
        Decision("start-up check, one max_model_len request", f"{gate.startup_blocks} blocks: "
                 + ("starts" if gate.starts else "vLLM refuses to start (or --max-model-len auto fits it lower)"),
                 "_check_enough_kv_cache_memory on _max_memory_usage_bytes_from_groups"
                 + (f"; groups {sorted(gate.sized_for_window)} sized for the window (before-55800)"
                    if gate.sized_for_window else "")),
        Decision("longest prompt admitted", gate.largest_prompt,
                 f"the longest prompt whose admission charge fits the {pool_blocks} blocks of an empty pool"),
    ]


def _drafter_decisions(drafter: DrafterPlan) -> list[Decision]:
    rows = [Decision("drafter", f"{drafter.method}: {len(drafter.layers)} layer(s)", drafter.origin)]
    for layer in drafter.layers:
        what = (f"reads layer {layer.shares_kv_with}'s KV, group {layer.group}" if layer.shares_kv_with is not None
                else f"{layer.spec} (block {layer.block_size}), group {layer.group}, writes through group "
                     f"{layer.writes_group}'s block table")
        rows.append(Decision(f"drafter layer {layer.index} ({layer.attention})", what,
                             "add_kv_sharing_layers_to_kv_cache_groups" if layer.shares_kv_with is not None
                             else "get_kv_cache_groups (is_draft never affects grouping)"))
    rows.append(Decision("drafter KV writes", drafter.writes, "vllm/v1/worker/gpu/spec_decode/"))
    return rows


def drafter_backend(args: VllmArgs, named: str | None, how: str) -> tuple[str | None, str]:
    """``SpeculativeConfig.apply_draft_overrides``: the drafter keeps the target's named backend (the flag, or a
    model's hook) unless the speculative config names its own ``attention_backend`` ("auto" parses to None: kept)."""
    spec = args.speculative_config or {}
    if "kv_cache_dtype" in spec:
        raise UsageError("--speculative-config kv_cache_dtype: a drafter KV dtype of its own is not modelled; way "
                         "out: drop it (the drafter then keeps --kv-cache-dtype)")
    value = spec.get("attention_backend")
    if value is None or (isinstance(value, str) and value.lower() == "auto"):
        return named, how
    if not isinstance(value, str) or value.upper() not in VLLM_BACKENDS:
        raise UsageError(f"--speculative-config attention_backend {str(value)[:40]!r}: the kit models "
                         f"{', '.join(VLLM_BACKENDS)} or auto")
    return value.upper(), "--speculative-config attention_backend"


def _full_group(groups: list[Group]) -> Group:
    """The first group of full-attention layers (a model without one: its first group)."""
    return next((g for g in groups if g.kind == "FullAttentionSpec"), groups[0])


def plan(model: ModelLayout, args: VllmArgs, env: dict[str, str], platform: str = "rocm-gfx942",
         gpu_memory_gib: float | None = None, weights_gib: float | None = None,
         vllm_version: str = VLLM_VERSION, drafter: Drafter | None = None,
         prompt_tokens: int | None = None) -> VllmPlan:
    """The whole launch as vLLM 0.34 decides it (or ``vllm_version``: 0.34 with one modelled fix undone), with the
    drafter's layers when its config is given, and the admission of a ``prompt_tokens`` prompt (default:
    max_model_len)."""
    if vllm_version not in VLLM_VERSIONS:
        raise UsageError(f"--vllm-version {vllm_version[:80]!r}: the kit models {versions_help()}")
    _check_supported(model, args, platform)
    _check_drafter(model, args, drafter)
    env = merged_env(args, env)
    flags = vllm_env(env)
    query_block = args.block_size if args.block_size is not None else DEFAULT_BLOCK_SIZE
    named, named_by = model_backend(model.architecture, {k.head_dim for k in model.kinds.values()},
                                    args.attention_backend)
    selections = {name: select(_query(model, kind, query_block), flags, named, named_by)
                  for name, kind in model.kinds.items()}
    block = block_size([s.backend for s in selections.values()], args.block_size)
    method = (args.speculative_config or {}).get("method")
    disabled, rule = hybrid_manager_disabled(args.disable_hybrid_kv_cache_manager,
                                             any(k.attention == "chunked" for k in model.kinds.values()), method,
                                             flags["VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"],
                                             args.kv_connector_hma(), vllm_version)
    own = owned_layouts(drafter)  # drafter layers that own KV join the target's before grouping
    draft_named, draft_how = drafter_backend(args, named, named_by)
    draft_specs = [] if own is None else layer_specs(
        own, args, {name: select(_query(own, kind, block), flags, draft_named, draft_how)
                    for name, kind in own.kinds.items()}, block)
    specs, groups, how = group_layers(layer_specs(model, args, selections, block) + draft_specs, disabled)
    kv = KvCachePlan(tuple(specs), tuple(groups), disabled, rule, how)
    placed = None if drafter is None else place(method or "", drafter, model, groups, vllm_version)
    modes = MODES if method else MODES[:2]
    kinds = tuple(
        KindPlan(kind, model.layer_types.count(name), selections[name],
                 tuple(route(selections[name].backend, mode, kind.retained_tokens if kind.attention == "sliding"
                             else None, kind.head_dim, _query(model, kind, block).has_sink,
                             flags["VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT"], vllm_version) for mode in modes))
        for name, kind in model.kinds.items())
    available, memory = _available(args, platform, gpu_memory_gib, weights_gib)
    gate, gate_rows = _admission(args, model, kv, available // kv.bytes_per_block, memory[0].value, placed,
                                 prompt_tokens, vllm_version)
    decisions = (
        Decision("vLLM version", vllm_version, "the version modelled" if (pr := reverted_fix(vllm_version)) is None
                 else f"vLLM {VLLM_VERSION} with PR #{pr}'s fix undone: {REVERTIBLE_FIXES[pr]}"),
        Decision("platform", platform, "assumed: a ROCm image with aiter installed (is_aiter_found_and_supported)"),
        *(Decision(f"backend, {name} layers", f"{s.backend} ({s.how})", "vllm/platforms/rocm.py "
                   "RocmPlatform.get_attn_backend_cls" + (f"; rejected: {s.rejected_text}" if s.rejected else ""))
          for name, s in selections.items()),
        Decision("block size", block, "--block-size" if args.block_size is not None else
                 "Platform.update_block_size_for_backend (backends' get_preferred_block_size)"),
        Decision("hybrid KV-cache manager", "off" if disabled else "on", f"VllmConfig.__post_init__: {rule}"),
        Decision("KV-cache groups", f"{len(groups)} ({how})", "vllm/v1/core/kv_cache_planning.py get_kv_cache_groups"),
        *(Decision(f"KV heads per GPU, {name} layers", max(1, kind.num_kv_heads // args.tensor_parallel_size),
                   "ModelConfig.get_num_kv_heads: max(1, heads // tp)") for name, kind in model.kinds.items()),
        Decision("KV bytes per token, all layers", sum(s.bytes_per_token for s in specs),
                 "AttentionSpec page size / block size, summed over layers (what a token costs where every layer "
                 "keeps it)"),
        Decision("pool bytes per block", kv.bytes_per_block, "get_kv_cache_config_from_groups (largest group's pages)"),
        *memory,
        Decision("blocks in the pool", available // kv.bytes_per_block, "available memory // bytes per block"),
        Decision("tokens per GPU", (available // kv.bytes_per_block) * _full_group(groups).specs[0].block_size,
                 "blocks x the full-attention group's block size: the tokens its block table can address when it "
                 "has the pool (every group draws block ids from the one pool)"),
        *gate_rows,
        *(_drafter_decisions(placed) if placed else ()),
    )
    return VllmPlan(model, args, dict(env), platform, kinds, kv, block, decisions, available, vllm_version, placed,
                    gate)
