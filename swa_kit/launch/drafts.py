"""The draft worker of a speculative launch: which layers it runs and which pool it owns or reads."""

from __future__ import annotations

import dataclasses

from swa_kit.engine.spec_algorithms import FROZEN_KV_DUMMY_POOL_SIZE
from swa_kit.launch.backend import hybrid_swa_memory_off
from swa_kit.launch.inputs import Launch
from swa_kit.launch.unified_memory import FusedDraft
from swa_kit.models.drafts import DraftPool, default_draft_layout


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
    if not traits.draft_model:
        return DraftPool(algorithm, "none (no draft model)", None, "n-gram lookup", None, "sglang 0.5.23 speculative/")
    layout, origin = default_draft_layout(launch.model, traits.mtp_draft_from_target, window, launch.draft_model)
    # The draft's ModelConfig is built from the resolved server args: the user's --disable-hybrid-swa-memory or the
    # target's own override (Gemma-2/3) turns the draft's SWA pool off too.
    off, off_by = hybrid_swa_memory_off(launch)
    if not layout.sglang_hybrid_swa_pool:
        pool = "own full pool"
    elif off:
        pool = f"own full pool (hybrid-SWA draft, hybrid SWA memory off by {off_by})"
    else:
        pool = "own SWA pool (hybrid-SWA draft)"
    return DraftPool(algorithm, pool, layout, origin, window,
                     "sglang 0.5.23 model_executor/pool_configurator.py (eagle_draft_swa_num_layers), "
                     "model_runner_components/spec_aux_hidden_state.py, configs/model_config.py from_server_args")


def fused_draft_pool(pool: DraftPool, fused: FusedDraft) -> DraftPool:
    """The draft's pool under ``--enable-unified-memory``: none of its own, its KV fused into the target's entries."""
    lanes = ", ".join(f"{n} in '{host}'" for host, n in fused.lanes.items())
    return dataclasses.replace(pool, pool=f"fused into the target's unified pool ({fused.pool_class}, lanes {lanes}): "
                                          "the target's slot ids and page table",
                               source="sglang 0.5.23 mem_cache/kv_cache_configurator.py _fused_draft_decision, "
                                      "mem_cache/unified_draft_pool.py _bind_dense"
                                      + (f"; {fused.note}" if fused.note else ""))
