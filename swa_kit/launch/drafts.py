"""The draft worker of a speculative launch: which layers it runs, which pool it owns or reads, its backend."""

from __future__ import annotations

import dataclasses

from swa_kit.engine.spec_algorithms import FROZEN_KV_DUMMY_POOL_SIZE, SpeculativeAlgorithm
from swa_kit.launch.backend import choose_backend, hybrid_swa_memory_off
from swa_kit.launch.inputs import Launch
from swa_kit.launch.unified_memory import FusedDraft
from swa_kit.launch.refusals import DRAFT_ATTENTION_BACKEND_CHOICES
from swa_kit.models.configs import ModelLayout, text_fields
from swa_kit.models.drafts import OWN_WINDOW_DRAFTS, DraftPool, default_draft_layout

#: the draft-decode backends whose multi-step draft backend reads the draft window and sink
#: (``layers/attention/triton_backend.py``, ``flashinfer_backend.py``: ``resolve_draft_decode_window``)
SINK_BACKENDS = ("triton", "flashinfer")


def dflash_draft_backend(launch: Launch) -> str:
    """The DFLASH family's draft backend (``arg_groups/speculative_hook.py _resolve_dflash_draft_attention_backend``;
    DSPARK's ``draft_worker_common.py resolve_draft_worker_attention_backend`` reads the same):
    ``--speculative-draft-attention-backend``, else the prefill backend; one a draft cannot run on (aiter is none of
    ``DRAFT_ATTENTION_BACKEND_CHOICES``) falls back to triton on ROCm, flashinfer on CUDA. DFLASH keeps trtllm_mha
    only for a draft whose layers are all sliding or that declares ``is_causal``, else falls back too (fa4 on
    SM100); a draft config not read keeps it."""
    given = launch.server_args.speculative_draft_attention_backend or choose_backend(launch).prefill_attention_backend
    fallback = "triton" if launch.platform.is_hip else "flashinfer"
    if given not in DRAFT_ATTENTION_BACKEND_CHOICES:
        return fallback
    draft = launch.draft_model
    if given == "trtllm_mha" and launch.spec_algorithm is SpeculativeAlgorithm.DFLASH and draft is not None:
        fields = text_fields(draft)
        types = fields.get("layer_types")
        all_sliding = isinstance(types, list) and len(types) == draft.num_layers and set(types) == {"sliding_attention"}
        if not (all_sliding or fields.get("is_causal") is True):
            return "fa4" if launch.platform.name == "cuda-sm100" else fallback
    return given


def published_draft_backend(launch: Launch) -> str | None:
    """``speculative_draft_attention_backend`` after resolution: DFLASH's handler publishes its draft backend
    (``_resolve_dflash_draft_attention_backend``), every other algorithm leaves the flag as given. The DFLASH
    family's draft budget (``draft_kv_budget.py resolve_dflash_draft_cell_size``) and the fused draft's placement
    (``kv_cache_configurator.py _draft_attention_backends``) read it."""
    if launch.spec_algorithm is SpeculativeAlgorithm.DFLASH:
        return dflash_draft_backend(launch)
    return launch.server_args.speculative_draft_attention_backend


def draft_sink_size(launch: Launch, layout: ModelLayout) -> tuple[int, str]:
    """``--speculative-draft-sink-size`` as the draft decode applies it (``speculative/spec_utils.py
    resolve_draft_decode_window``), and why it is 0 where it is set but not applied."""
    args = launch.server_args
    # a surface argument (swa_kit.launch.surface): check_surface refused a negative or window-less one already
    sink = int(dict(args.not_read_values).get("speculative_draft_sink_size") or 0)
    if not sink:
        return 0, ""
    backend = args.speculative_draft_attention_backend or choose_backend(launch).decode_attention_backend
    if backend not in SINK_BACKENDS:
        return 0, f"--speculative-draft-sink-size {sink} ignored: the {backend} draft decode reads no sink"
    if layout.has_window or layout.architecture in OWN_WINDOW_DRAFTS:
        return 0, f"--speculative-draft-sink-size {sink} ignored: the draft's own window is authoritative"
    return sink, (f"draft decode on {backend} reads the first {sink} prefix tokens and the most recent "
                  f"{args.speculative_draft_window_size} (kernels/ops/speculative/cache_locs.py "
                  "generate_draft_decode_kv_indices); the draft pool is unchanged")


def draft_pool(launch: Launch) -> DraftPool:
    """The draft worker's layout and pool for ``launch`` (``pool="none"`` without speculation)."""
    algorithm = launch.server_args.speculative_algorithm
    window = launch.server_args.speculative_draft_window_size
    traits = launch.spec_algorithm.traits
    if algorithm is None:
        return DraftPool("NONE", "none", None, "no speculative algorithm", None, "server arguments")
    if traits.reads_target_pool:
        return DraftPool(algorithm, f"dummy ({FROZEN_KV_DUMMY_POOL_SIZE} tokens); reads the target's pool", None,
                         "the target's last sliding and last full layers", None,
                         "sglang 0.5.23 speculative/frozen_kv_mtp_worker_v2.py, frozen_kv_mtp_utils.py")
    if launch.spec_algorithm is SpeculativeAlgorithm.UNO:
        return DraftPool(algorithm, "none (no draft model)", None, "the target itself with its LoRA (--uno-lora-path)",
                         None, "sglang 0.5.23 speculative/uno_worker_v2.py UnoWorkerV2: both passes use the target "
                               "runner and its KV pool")
    if not traits.draft_model:
        return DraftPool(algorithm, "none (no draft model)", None, "n-gram lookup", None, "sglang 0.5.23 speculative/")
    layout, origin = default_draft_layout(launch.model, traits.mtp_draft_from_target, window, launch.draft_model)
    # the sink reads the draft's own window, before --speculative-draft-window-size is applied to its layers
    sink, sink_how = draft_sink_size(launch, default_draft_layout(launch.model, traits.mtp_draft_from_target, None,
                                                                  launch.draft_model)[0])
    # The draft's ModelConfig is built from the resolved server args: the user's --disable-hybrid-swa-memory or the
    # target's own override (Gemma-2/3) turns the draft's SWA pool off too.
    off, off_by = hybrid_swa_memory_off(launch)
    if not layout.sglang_hybrid_swa_pool:
        pool = "own full pool"
    elif off:
        pool = f"own full pool (hybrid-SWA draft, hybrid SWA memory off by {off_by})"
    else:
        pool = "own SWA pool (hybrid-SWA draft)"
    source = ("sglang 0.5.23 model_executor/pool_configurator.py (eagle_draft_swa_num_layers), "
              "model_runner_components/spec_aux_hidden_state.py, configs/model_config.py from_server_args")
    backend = None
    if traits.dflash_family:
        backend = dflash_draft_backend(launch)
        source = (f"sglang 0.5.23 speculative/dflash_worker_v2.py: one block forward per step (TARGET_VERIFY) on its "
                  f"draft backend {backend}; its pool priced in the target's budget by its own geometry "
                  "(mem_cache/draft_kv_budget.py resolve_dflash_draft_cell_size)")
    return DraftPool(algorithm, pool, layout, origin, window, source + (f"; {sink_how}" if sink_how else ""),
                     backend=backend, sink_size=sink)


def fused_draft_pool(pool: DraftPool, fused: FusedDraft) -> DraftPool:
    """The draft's pool under ``--enable-unified-memory``: none of its own, its KV fused into the target's entries."""
    lanes = ", ".join(f"{n} in '{host}'" for host, n in fused.lanes.items())
    return dataclasses.replace(pool, pool=f"fused into the target's unified pool ({fused.pool_class}, lanes {lanes}): "
                                          "the target's slot ids and page table",
                               source="sglang 0.5.23 mem_cache/kv_cache_configurator.py _fused_draft_decision, "
                                      "mem_cache/unified_draft_pool.py _bind_dense"
                                      + (f"; {fused.note}" if fused.note else ""))
