"""Each layer's decode route on SGLang's own aiter backend, for the differential (tests/differential.py).

SGLang's real ``AiterAttnBackend`` is built on a CPU over SGLang's own pools (``SWAKVPool`` and its
``SWATokenToKVPoolAllocator`` when SGLang's ``ModelConfig.is_hybrid_swa`` says the launch has a hybrid pool,
else ``MHATokenToKVPool``), under the runtime context :func:`~swa_kit.launch.sglang_oracle.ask_sglang` published for
the launch (its page size and speculative settings). Its real ``forward_decode`` then runs once per layer, with
each layer's ``sliding_window_size`` as SGLang's model class set it (``layer_windows``), so the kernel chosen,
the window argument passed, the page table passed and the guard (``_reject_paged_decode_sliding_window``) are
SGLang's own. aiter's kernels do not import off ROCm: the backend module's kernel names are placeholders
that :mod:`swa_kit.measure.trace` records and that then stop the call, so no attention is computed.

What this does not reach, and why:

* the keys a call attends: aiter's kernels do not run here, so they are read from the recorded window argument by
  aiter's own rule (``unified_attention``: ``SLIDING_WINDOW = 1 + window_size[0]``,
  ``aiter/ops/triton/unified_attention.py``; ``paged_attention_ragged`` takes no window: the whole context);
* head counts and dims: the runner's model config is a small stand-in (4 query / 2 KV heads of 8); SGLang's
  choice of kernel, window and table for MHA layers reads none of them, except gfx950's
  ``unified_attention_3d_mtp_decode_func`` (head dim 256, page 16), which ``is_gfx95_supported`` rules out on a
  CPU whatever the named platform;
* prefill, extend and verify: their metadata is built by GPU Triton kernels in ``init_forward_metadata``.
"""

from __future__ import annotations

import traceback
from typing import Any

from swa_kit.launch.sglang_oracle import import_sglang

HQ, HKV, D = 4, 2, 8  # the stand-in layer shape (see the module docstring)
TOKENS = 256  # pool slots: enough for one request of a few pages at any page size in the launch set
GUARD = "refused: _reject_paged_decode_sliding_window"


class _Stop(Exception):
    """Raised by the placeholder kernels once the tracer has recorded the call."""


def _placeholder(*args: Any, **kwargs: Any) -> None:
    raise _Stop


class _Layer:
    def __init__(self, layer_id: int, sws: int) -> None:
        self.layer_id, self.sliding_window_size = layer_id, sws
        self.tp_q_head_num, self.tp_k_head_num, self.tp_v_head_num = HQ, HKV, HKV
        self.qk_head_dim = self.v_head_dim = D
        self.logit_cap, self.scaling, self.k_scale, self.v_scale = 0.0, D ** -0.5, None, None


def keys_attended(kernel: str, window_arg: Any) -> int | None:
    """Keys one decode query attends, by aiter's rule for the kernel (None: the whole context)."""
    if kernel == "unified_attention":
        return None if window_arg[0] < 0 else 1 + window_arg[0]
    if kernel == "paged_attention_ragged":
        return None
    raise ValueError(f"no keys rule for kernel {kernel!r} in the differential")


def _pools(mc: Any, page: int, hybrid: bool, windows: dict[int, int]) -> tuple[Any, Any]:
    import torch

    memory_pool = import_sglang("sglang.srt.mem_cache.memory_pool")
    if not hybrid:
        pool = memory_pool.MHATokenToKVPool(size=TOKENS, page_size=page, dtype=torch.float32, head_num=HKV,
                                            head_dim=D, layer_num=len(windows), device="cpu",
                                            enable_memory_saver=False)
        return pool, type("Allocator", (), {"get_kvcache": lambda self: pool})()
    swa_pool = import_sglang("sglang.srt.mem_cache.swa_memory_pool")
    swa_alloc = import_sglang("sglang.srt.mem_cache.allocator.swa")
    pool = swa_pool.SWAKVPool(size=TOKENS, size_swa=TOKENS, page_size=page, dtype=torch.float32, head_num=HKV,
                              head_dim=D, swa_attention_layer_ids=list(mc.swa_attention_layer_ids),
                              full_attention_layer_ids=list(mc.full_attention_layer_ids), device="cpu")
    return pool, swa_alloc.SWATokenToKVPoolAllocator(TOKENS, TOKENS, page, torch.float32, "cpu", pool, False)


def _runner(sa: Any, mc: Any, pool: Any, allocator: Any) -> Any:
    import torch

    memory_pool = import_sglang("sglang.srt.mem_cache.memory_pool")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    utils = import_sglang("sglang.srt.model_executor.model_runner_components.load_model_utils")
    config = type("ModelConfig", (), {"dtype": torch.float32, "is_multimodal": False, "num_attention_heads": HQ,
                                      "head_dim": D, "attention_arch": None, "context_len": 4096,
                                      "get_num_kv_heads": staticmethod(lambda tp: HKV)})()
    runner = type("Runner", (), {})()
    runner.__dict__.update(
        model_config=config, device="cpu", kv_cache_dtype=torch.float32, dtype=torch.float32,
        req_to_token_pool=memory_pool.ReqToTokenPool(2, TOKENS, "cpu", False), kv_index_translator=None,
        token_to_kv_pool=pool, token_to_kv_pool_allocator=allocator, is_draft_worker=False,
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(sa.speculative_algorithm),
        sliding_window_size=utils.resolve_sliding_window_size(type("Model", (), {})(), mc))
    return runner


def decode_routes(sa: Any, mc: Any, page: int, hybrid: bool, windows: dict[int, int]) -> dict[int, Any]:
    """Per layer: ``[kernel, window argument, page table, keys attended]`` from SGLang's ``forward_decode``, or
    :data:`GUARD` where SGLang's guard refuses the layer.

    ``sa`` / ``mc``: the launch's resolved ``ServerArgs`` and ``ModelConfig`` (published by ``ask_sglang``);
    ``windows``: each layer's ``sliding_window_size`` from SGLang's model class.
    """
    import torch

    from swa_kit.measure import trace

    backend_mod = import_sglang("sglang.srt.layers.attention.aiter_backend")
    kernels = ("unified_attention", "paged_attention_ragged", "pa_decode_gluon")
    saved = {name: backend_mod.__dict__.get(name) for name in kernels}
    for name in kernels:
        setattr(backend_mod, name, _placeholder)
    try:
        pool, allocator = _pools(mc, page, hybrid, windows)
        backend = backend_mod.AiterAttnBackend(_runner(sa, mc, pool, allocator))
        seq_len = 3 * page + 1  # a few pages and one token: tables of more than one page
        full_ids = torch.arange(page, page + seq_len)
        swa_ids = pool.translate_loc_from_full_to_swa(full_ids) if hybrid else None
        tracer = trace.install(None, module=backend_mod)
        out: dict[int, Any] = {}
        try:
            for layer_id, sws in sorted(windows.items()):
                backend.forward_metadata = backend_mod.ForwardMetadata(
                    kv_indptr=torch.tensor([0, seq_len], dtype=torch.int32),
                    kv_indices=full_ids[None].int() if backend.decode_uses_page_table else full_ids.int(),
                    qo_indptr=torch.tensor([0, 1], dtype=torch.int32),
                    kv_last_page_len=torch.ones(1, dtype=torch.int32), max_q_len=1, max_kv_len=seq_len,
                    swa_page_table=None if swa_ids is None else swa_ids[None].int())
                batch = type("ForwardBatch", (), {})()
                batch.__dict__.update(batch_size=1, seq_lens=torch.tensor([seq_len], dtype=torch.int32),
                                      forward_mode=type("Mode", (), {"name": "DECODE"})())
                before = len(tracer.records)
                try:
                    backend.forward_decode(torch.zeros(1, HQ * D), None, None, _Layer(layer_id, sws), batch,
                                           save_kv_cache=False)
                except _Stop:
                    (record,) = tracer.records[before:]
                    out[layer_id] = [record.kernel, record.window_arg, record.page_table,
                                     keys_attended(record.kernel, record.window_arg)]
                except ValueError as error:  # SGLang's own guard, told apart by the function that raised
                    if traceback.extract_tb(error.__traceback__)[-1].name != "_reject_paged_decode_sliding_window":
                        raise
                    out[layer_id] = GUARD
        finally:
            tracer.uninstall()
    finally:
        for name, value in saved.items():
            if value is None:
                backend_mod.__dict__.pop(name, None)
            else:
                setattr(backend_mod, name, value)
    return out
