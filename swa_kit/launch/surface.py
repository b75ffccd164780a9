"""SGLang's SWA surface, named one by one: what the kit models, what it refuses, and what it read and set aside.

:data:`SURFACE` names every server argument whose name or help mentions swa, window, sliding, hybrid,
speculative, draft, page or memory, every subclass of ``BaseSWAKVPool``, every registered attention backend and
every speculative algorithm of the SGLang release the kit mirrors. Each entry says ``modelled`` (and where),
``refused`` (the audit says the kit does not model it whenever a launch sets it) or ``irrelevant`` (read, and why
it changes neither attention routes nor the KV pools). :mod:`swa_kit.launch.sglang_surface` lists the same four
from an installed SGLang, so a new release cannot add one unnoticed.

:func:`check_surface` applies the table to a launch: it raises :class:`~swa_kit.errors.LaunchRefusedError` where
SGLang refuses the launch at start-up for one of these surfaces, and returns a :class:`SurfaceNote` for each
refused argument the launch sets. :func:`check_modelled` refuses such
a launch by name (:class:`~swa_kit.errors.NotModelledError`): ``decide`` calls both; the audit plans it anyway and
carries the notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.errors import NotModelledError
from swa_kit.launch.inputs import Launch
from swa_kit.launch.refusals import check_speculative_surface, check_unified_memory
from swa_kit.launch.unified_memory import unmodelled_draft

KINDS = ("server_arg", "swa_pool", "attention_backend", "spec_algorithm")
STATUSES = ("modelled", "refused", "irrelevant")


@dataclass(frozen=True)
class Entry:
    """One surface of SGLang: its kind, name, the kit's status and where (modelled) or why (otherwise)."""

    kind: str
    name: str
    status: str
    note: str
    default: Any = None  # a refused server argument's SGLang default: a logged line's unset value is no finding


def _group(kind: str, status: str, note: str, *names: str, default: Any = None) -> list[Entry]:
    return [Entry(kind, name, status, note, default) for name in names]


_VIEW = "read into swa_kit.launch.inputs.ServerArgsView"
_WEIGHTS = "loads or stores weights; the KV budget reads the weights' size as given (--weights-gib)"
_SPEC_TUNING = "acceptance, sampling or scheduling of drafts: no KV pool, window or attention route"
_MAMBA = "hybrid Mamba / linear attention state, a model family the kit does not read"
_DSV4 = "DeepSeek-V4 / DSA models only (MLA with a sparse indexer), which the kit does not read"
_NOT_KV = "a word of the pattern in its help only: no KV pool, window or attention route"
_NOT_PLANNED = "chosen as SGLang chooses (swa_kit.launch.backend), but the kit plans no routes on it: " \
               "the audit names each such worker and mode 'not planned'"

SERVER_ARGS: list[Entry] = [
    *_group("server_arg", "modelled", _VIEW + "; sized in swa_kit.launch.pool_sizing",
            "mem_fraction_static", "max_total_tokens", "swa_full_tokens_ratio"),
    *_group("server_arg", "modelled", _VIEW + "; swa_kit.launch.backend choose_page_size", "page_size"),
    *_group("server_arg", "modelled", _VIEW + "; swa_kit.launch.decide (hybrid switch and routes)",
            "disable_hybrid_swa_memory"),
    *_group("server_arg", "modelled", _VIEW + "; swa_kit.launch.speculation and swa_kit.launch.drafts",
            "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_window_size",
            "speculative_ngram_max_bfs_breadth"),
    *_group("server_arg", "modelled", _VIEW + "; swa_kit.launch.backend (the draft's backend)",
            "speculative_draft_attention_backend"),
    *_group("server_arg", "modelled", "check_surface: UNO's _handle_uno requires it", "uno_lora_path"),
    *_group("server_arg", "modelled", _VIEW + "; swa_kit.launch.unified_memory (the boot split, the buffer, the "
            "fused draft) and its start-up refusals (check_surface)", "enable_unified_memory"),
    *_group("server_arg", "modelled", "swa_kit.launch.drafts draft_sink_size: the EAGLE/MTP draft decode on the "
            "triton and flashinfer draft backends reads this many leading prefix tokens beside the recent window "
            "(spec_utils.py resolve_draft_decode_window, cache_locs.py generate_draft_decode_kv_indices); other "
            "backends and a draft with its own window ignore it; no pool changes. Its start-up refusals: "
            "check_surface", "speculative_draft_sink_size"),
    *_group("server_arg", "refused", "one page-granular buffer holding every layer's KV per token slot: another "
            "pool layout than the kit's", "enable_page_major_kv_layout", default=False),
    *_group("server_arg", "refused", "shards KV pages over the ranks that replicate them: per-GPU pool sizes the "
            "kit does not compute", "enable_kv_cache_sharding", default=False),
    *_group("server_arg", "refused", "the draft pool's bytes per token: the kit sizes the draft in the target's KV "
            "dtype", "speculative_draft_kv_cache_dtype"),
    *_group("server_arg", "refused", "'decode' runs verify and draft extend on the decode backend; the kit plans "
            "them on the prefill backend", "speculative_attention_mode", default="prefill"),
    *_group("server_arg", "refused", "several draft layers per step, each with KV in the draft pool: the kit "
            "plans a one-layer EAGLE draft", "enable_multi_layer_eagle", default=False),
    *_group("server_arg", "modelled", "read by DeepSeek-V4's DSV4PoolConfigurator alone (pool_configurator.py "
            "_resolve_swa_prefix_tails: cap-mode SWA headroom of tails x (window + page)), a model the kit does not "
            "read: every pool the kit sizes (HybridSWA / SWARequestCap / Default configurators) is the same "
            "with or without it, and no eviction or retention reads it. A negative value is refused as "
            "handle_cache_compatibility refuses it (check_surface)", "swa_prefix_tails"),
    *_group("server_arg", "irrelevant", "DFLASH and DSPARK draft-block and acceptance parameters: the block "
            "width the kit reads from --speculative-num-draft-tokens; no KV pool, window or attention route",
            "speculative_dflash_block_size", "speculative_dspark_block_size",
            "speculative_dspark_sps_table_path", "speculative_dspark_confidence_sts_path",
            "speculative_dspark_align_verify_tokens_to_graph_tier"),
    *_group("server_arg", "irrelevant", _SPEC_TUNING, "speculative_accept_threshold_single",
            "speculative_accept_threshold_acc", "speculative_use_rejection_sampling", "speculative_token_map",
            "speculative_adaptive", "speculative_adaptive_config", "decoupled_spec_bind_endpoint",
            "decoupled_spec_connect_endpoints", "decoupled_spec_rank", "decoupled_spec_role", "spec_trace_dir",
            "speculative_ngram_min_bfs_breadth", "speculative_ngram_match_type", "speculative_ngram_max_trie_depth",
            "speculative_ngram_capacity", "speculative_ngram_external_corpus_path",
            "speculative_ngram_external_sam_budget", "speculative_ngram_external_corpus_max_tokens",
            "speculative_boundary_reduction", "speculative_use_block_verification",
            "speculative_domino_candidate_pool_size"),
    *_group("server_arg", "irrelevant", _WEIGHTS, "load_format", "model_loader_extra_config",
            "speculative_draft_model_revision", "speculative_draft_load_format", "speculative_draft_model_quantization",
            "_speculative_draft_quantization_explicitly_set", "decrypted_draft_config_file",
            "speculative_moe_runner_backend", "speculative_moe_a2a_backend", "speculative_enable_w4a4_mxfp4_megamoe",
            "language_model_only", "weight_loader_prefetch_checkpoints", "enable_memory_saver",
            "enable_weights_cpu_backup", "enable_draft_weights_cpu_backup", "weight_cache_mode",
            "ple_offload_embedding", "ple_offload_backend", "enable_paged_experts", "paged_experts_num_resident"),
    *_group("server_arg", "irrelevant", _MAMBA, "mamba_full_memory_ratio", "uses_mamba_radix_cache",
            "enable_int8_mamba_checkpoint", "linear_attn_verify_backend", "enable_linear_replayssm_spec",
            "enable_cp_tp_group_sharing"),
    *_group("server_arg", "irrelevant", _DSV4, "c128_page_size", "enable_dsa_cache_layer_split",
            "dsa_paged_mqa_logits_backend", "speculative_dsa_topk_backend", "dsv4_attn_backend",
            "enable_encoder_swa_bounded_replay", "enable_decoder_swa_bounded_replay"),
    *_group("server_arg", "irrelevant", "the host-memory tier of the hierarchical cache: the device pools the kit "
            "sizes are unchanged", "hicache_host_memory_mode", "hicache_ratio", "hicache_size", "hicache_mem_layout",
            "hicache_host_memory_fraction"),
    *_group("server_arg", "irrelevant", "PD-disaggregation transfer, checksum and decode-side caching: no "
            "attention route or pool size", "disaggregation_decode_enable_radix_cache",
            "disaggregation_enable_kv_checksum", "disaggregation_decode_host_receive_threshold"),
    *_group("server_arg", "irrelevant", "embedding-mode prefill without a KV cache: no decode, no SWA pool",
            "prefill_only_disable_kv_cache"),
    *_group("server_arg", "irrelevant", "scheduler admission: how many requests run, not how each attends or "
            "what the pools hold", "num_reserved_decode_tokens", "min_free_slots_delay"),
    *_group("server_arg", "irrelevant", "hidden states captured for a training or external drafter; no draft "
            "runs", "enable_return_aux_hidden_states", "aux_hidden_state_capture",
            "return_aux_hidden_state_layer_ids"),
    *_group("server_arg", "irrelevant", _NOT_KV, "gated_launch_port", "http2_initial_connection_window_size",
            "load_snapshot_publish_interval", "fp8_gemm_runner_backend", "enable_symm_mem", "deepep_v2_mode",
            "fuseep_mode", "mm_preprocess_cache_size_mb", "mm_feature_transport", "max_loaded_loras",
            "lora_eviction_policy", "debug_tensor_dump_output_folder", "enable_response_store",
            "disable_aiter_allreduce_fusion_in_decode", "watermark_config", "watermark_context_window"),
    *_group("server_arg", "irrelevant", "recorded by the cache hook when --swa-full-tokens-ratio is given; "
            "no command-line flag", "_swa_full_tokens_ratio_explicitly_set"),
]

SWA_POOLS: list[Entry] = [
    Entry("swa_pool", "SWAKVPool", "modelled", "swa_kit.engine.pools.SWAKVPool; every backend's resolver "
          "predicate accepts it (swa_kit.engine.resolver)"),
    Entry("swa_pool", "DeepSeekV4TokenToKVPool", "refused", "DeepSeek-V4's pool, a model the kit does not read; "
          "it subclasses BaseSWAKVPool only, so it resolves on flashinfer and not on aiter or trtllm_mha "
          "(modelled: swa_kit.engine.resolver SWA_POOL_CLASS)"),
    Entry("swa_pool", "DSV4NPUTokenToKVPool", "refused", "DeepSeek-V4's pool on Ascend NPUs (a subclass of "
          "DeepSeekV4TokenToKVPool): neither the model nor the platform is one the kit reads"),
    Entry("swa_pool", "UnifiedSWAKVPool", "modelled", "--enable-unified-memory's target pool: full and SWA "
          "sub-pools in one byte buffer, sized in swa_kit.launch.unified_memory (the boot split, the buffer's bytes, "
          "entries and each side's slots)"),
    Entry("swa_pool", "UnifiedDraftSWAKVPool", "modelled", "--enable-unified-memory's pool of a draft with window "
          "layers: the draft's KV fused into the target's entries, with the target's slot ids and page table "
          "(swa_kit.launch.unified_memory fused_decision; the audit's draft_pool and unified_memory)"),
]

_BACKEND_NOTES = {
    "aiter": "modelled: swa_kit.engine.routing plans its call sites (swa_kit.engine.call_sites SITES)",
    "triton": "modelled: swa_kit.engine.routing plans SGLang's Triton call sites (call_sites DECLARED_SITES)",
    "trtllm_mha": "modelled: swa_kit.engine.routing plans its window_left call sites and per-layer page table "
                  "(call_sites DECLARED_SITES)",
}
ATTENTION_BACKENDS: list[Entry] = [
    Entry("attention_backend", name, "modelled" if name in _BACKEND_NOTES else "refused",
          _BACKEND_NOTES.get(name, _NOT_PLANNED))
    for name in ("aiter", "triton", "fa3", "fa4", "flashinfer", "trtllm_mha", "torch_native", "flex_attention",
                 "wave", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "llada2_cfg_flashinfer", "ascend",
                 "intel_amx", "intel_xpu", "flashmla", "trtllm_mla", "cutedsl_mla", "dsa", "dsv4", "nsa", "qsa")
]

SPEC_ALGORITHMS: list[Entry] = [
    Entry("spec_algorithm", a.name, "modelled" if a.traits.kit_plans or a.traits.modelled_apart else "refused",
          "swa_kit.engine.workers and swa_kit.engine.routing plan its workers and routes" if a.traits.kit_plans else
          a.traits.modelled_apart or f"read and named (swa_kit.engine.spec_algorithms, handler {a.traits.handler}); "
                                     "the kit plans no routes")
    for a in SpeculativeAlgorithm
]

#: The one table of SGLang's SWA surface.
SURFACE: dict[tuple[str, str], Entry] = {(e.kind, e.name): e
                                         for e in SERVER_ARGS + SWA_POOLS + ATTENTION_BACKENDS + SPEC_ALGORITHMS}


def unaccounted(found: dict[str, list[str]]) -> list[tuple[str, str]]:
    """The (kind, name) pairs of ``found`` (names per kind, from an installed SGLang) the table does not name."""
    return sorted((kind, name) for kind, names in found.items() for name in names if (kind, name) not in SURFACE)


@dataclass(frozen=True)
class SurfaceNote:
    """A refused surface a launch sets: the audit turns it into a finding."""

    severity: str
    title: str
    detail: str
    ways_out: tuple[str, ...]
    where: str = "surface"


_MODELLED = Entry("server_arg", "", "modelled", "")
def _is_set(value: Any, default: Any) -> bool:
    """Whether a server argument as given (a flag's word, or a logged literal) differs from SGLang's default."""
    if value is None or value == default:
        return False
    return not (default is False and str(value).lower() in ("false", "0", "no", "off", "n"))


def unmodelled(launch: Launch) -> list[str]:
    """The surfaces ``launch`` sets that SGLang serves and the kit does not model (their pools or routes would be
    the kit's guess): every refused server argument it sets. (NGRAM, the one algorithm the kit refuses in
    :data:`SURFACE`, keeps the target's pools and drafts none.)"""
    names = [f"--{name.replace('_', '-')}" for name, value in launch.server_args.not_read_values
             if SURFACE.get(("server_arg", name), _MODELLED).status == "refused"
             and _is_set(value, SURFACE["server_arg", name].default)]
    draft = unmodelled_draft(launch)  # a fused draft the kit cannot price: the buffer is sized without it
    return names + ([draft] if draft else [])


def check_modelled(launch: Launch) -> None:
    """Raise :class:`NotModelledError` where ``launch`` sets a surface the kit does not model (:func:`unmodelled`)."""
    names = unmodelled(launch)
    if names:
        raise NotModelledError(f"the kit does not model {', '.join(names)}: SGLang accepts the launch, but its pools "
                               "and routes would be the kit's guess (swa_kit.launch.surface SURFACE); audit it to see "
                               "the answer without them, or drop them")


def check_surface(launch: Launch) -> list[SurfaceNote]:
    """Raise where SGLang refuses ``launch`` at start-up for a surface of :data:`SURFACE`; else one note per refused
    server argument it sets (a warning: the audit's answer leaves that argument out)."""
    unread = {name: value for name, value in launch.server_args.not_read_values
              if ("server_arg", name) in SURFACE and _is_set(value, SURFACE["server_arg", name].default)}
    if launch.server_args.enable_unified_memory:
        check_unified_memory(launch)
    check_speculative_surface(launch, unread)
    notes = []
    for name, value in unread.items():
        entry = SURFACE["server_arg", name]
        if entry.status == "refused":
            flag = "--" + name.replace("_", "-")
            notes.append(SurfaceNote("info", f"{flag} is not modelled: this audit leaves it out",
                                     f"{flag} {str(value)[:40]}: {entry.note}",
                                     (f"read the answer as that of the launch without {flag}",)))
    draft = unmodelled_draft(launch)
    if draft:
        notes.append(SurfaceNote("info", f"{draft} is not modelled: this audit sizes the unified buffer without the "
                                 "fused draft", "SGLang fuses an EAGLE or DFLASH-family draft's KV into the "
                                 "target's entries (kv_cache_configurator.py _fused_draft_decision); the kit prices "
                                 "it only from a draft config it has read",
                                 ("give --draft-hf-config with the draft's config.json",)))
    return notes
