"""``--enable-unified-memory`` asked of SGLang's own code: the boot split, the buffer, the fused draft, the refusals.

:func:`unified_fields` builds SGLang 0.5.23's real ``KVCacheConfigurator`` (``mem_cache/kv_cache_configurator.py``)
on the meta device from the launch's resolved ``ServerArgs`` and ``ModelConfig``, then runs, unchanged:

* ``config_from_budget``: ``create_memory_pool_configurator`` and its unified-memory solve
  (``HybridSWAPoolConfigurator._max_unified_full_tokens``, with ``fused_entry_bytes`` from
  ``_fused_draft_decision``), and the buffer's ``unified_total_bytes``;
* ``_init_pools``: its unified-pool dispatch (a model without a hybrid pool raises here, in SGLang's words), and for
  a hybrid-SWA model ``_init_unified_swa_pools`` and ``init_unified_swa_pools`` (``mem_cache/unified_memory_pool.py``:
  the sub-pools' ``MHASubPoolSpec`` entries, the bs=1 floor, an EAGLE draft that cannot fuse). The run stops where
  ``UnifiedKVPool`` would allocate the buffer: its arguments are the answer.

Nothing is allocated: the configurator's device is ``meta``, and the buffer is never built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from swa_kit.launch.sglang_import import import_sglang


class _Built(Exception):
    """Raised in place of ``UnifiedKVPool``: carries the arguments SGLang would build the buffer with."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        super().__init__("UnifiedKVPool reached")
        self.arguments = arguments


def _capture(**arguments: Any) -> None:
    raise _Built(arguments)


@contextlib.contextmanager
def _buffer_captured() -> Iterator[None]:
    """``UnifiedKVPool`` replaced, while the pools are built, by a stand-in that raises with its arguments."""
    module = import_sglang("sglang.srt.mem_cache.unified_memory_pool")
    real = module.UnifiedKVPool
    module.UnifiedKVPool = _capture
    try:
        yield
    finally:
        module.UnifiedKVPool = real


def configurator(sa: Any, mc: Any, view: Any, algorithm: Any, spec_aux: Any, hybrid: bool,
                 sws: int | None, kv_cache_dtype: Any) -> Any:
    """SGLang's ``KVCacheConfigurator`` for the target worker of one GPU, on the meta device."""
    kvc_module = import_sglang("sglang.srt.mem_cache.kv_cache_configurator")
    layer_setup = import_sglang("sglang.srt.model_executor.model_runner_components.layer_setup")
    n = mc.num_hidden_layers
    info = layer_setup.ModelLayerInfo(
        start_layer=0, end_layer=n, num_effective_layers=n,
        swa_attention_layer_ids=mc.swa_attention_layer_ids if hybrid else None,
        full_attention_layer_ids=mc.full_attention_layer_ids if hybrid else None)
    return kvc_module.KVCacheConfigurator(
        device="meta", gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=None, model_config=mc,
        server_args=sa, kv_cache_dtype=kv_cache_dtype, model_dtype=mc.dtype, page_size=view.page_size,
        sliding_window_size=sws, spec_algorithm=algorithm, is_draft_worker=False, post_capture_kv_active=False,
        spec_aux_config=spec_aux, is_hybrid_swa=hybrid, is_hybrid_swa_compress=False, use_mla_backend=False,
        layer_info=info, forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        memory_pool_config=None, kv_cache_dtype_str=sa.kv_cache_dtype)


def _buffer(kvc: Any, config: Any) -> dict[str, Any]:
    """``_init_pools`` on ``config`` up to the buffer: what ``UnifiedKVPool`` would be built with (or SGLang's
    refusal, raised)."""
    config.max_running_requests = config.max_running_requests or 1  # the req_to_token pool's rows: not compared
    sizes = kvc._derive_pool_sizes(config=config)
    with _buffer_captured():
        try:
            kvc._init_pools(sizes=sizes, req_to_token_pool=None, token_to_kv_pool_allocator=None)
        except _Built as built:
            return built.arguments
    raise AssertionError("SGLang's _init_pools returned without building the unified buffer")


def unified_fields(kvc: Any, budget: int | None) -> dict[str, Any]:
    """The compared fields of a unified-memory launch from SGLang's own configurator (see the module docstring).

    A model without a hybrid pool raises SGLang's ``ValueError`` from ``_init_pools`` even without a budget (its
    dispatch reads no size); without a budget a hybrid model's sizes are None.
    """
    pc = import_sglang("sglang.srt.model_executor.pool_configurator")
    name = type(pc.create_memory_pool_configurator(kvc)).__name__
    if not kvc.is_hybrid_swa:
        _buffer(kvc, pc.MemoryPoolConfig(max_total_num_tokens=1))  # raises: the dispatch refuses before any size
    out: dict[str, Any] = {"pool_configurator": name, "swa_pool_floor": None, "unified_pool": None}
    if budget is None:
        return out
    config = kvc.config_from_budget(budget)
    out.update(full_tokens=config.full_max_total_num_tokens, swa_tokens=config.swa_max_total_num_tokens)
    arguments = _buffer(kvc, config)
    total = arguments["total_bytes"]
    entries = {spec.name: spec.entry_bytes() for spec in arguments["sub_pool_specs"]}
    fused = arguments["fused_draft"]
    out["unified_pool"] = {
        "total_bytes": total, "entry_bytes": entries,
        "max_slots": {name: total // entry for name, entry in entries.items()},  # UnifiedKVPool.__init__
        "draft_lanes": None if fused is None else {host: region.lane_num for host, region in fused.regions.items()}}
    return out
