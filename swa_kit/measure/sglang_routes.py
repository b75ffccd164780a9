"""Each layer's route on SGLang's own aiter backend, for :mod:`swa_kit.measure.sglang_check` (the audit's
``--check-with-sglang`` and the differential, tests/differential.py).

SGLang's real ``AiterAttnBackend`` is built on a CPU over SGLang's own pools (``SWAKVPool`` and its
``SWATokenToKVPoolAllocator`` when SGLang's ``ModelConfig.is_hybrid_swa`` says the launch has a hybrid pool,
else ``MHATokenToKVPool``), under the runtime context :func:`~swa_kit.launch.sglang_oracle.ask_sglang` published for
the launch (its page size and speculative settings). Its real ``forward_decode`` (decode) and ``forward_extend``
(prefill, extend after a cached prefix; target verify for speculative launches) then run once per layer, with
each layer's ``sliding_window_size`` as SGLang's model class set it (``layer_windows``), so the kernel chosen, the
window argument passed, the page table passed and the guard (``_reject_paged_decode_sliding_window``) are SGLang's own.
aiter's kernels do not import off ROCm: the backend module's kernel names (and SGLang's Triton
``extend_attention_fwd``) are placeholders that :mod:`swa_kit.measure.trace` records and that then stop the call,
so no attention is computed. The Triton kernel that fills the unified prefill's page tables from
``req_to_token`` needs a GPU: a CPU stand-in fills them the same way, and SGLang's own builder decides whether
there is an SWA table.

What this does not reach, and why:

* the keys a call attends: aiter's kernels do not run here, so they are read from the recorded window argument by
  the kernel's own rule (aiter's ``unified_attention``: ``SLIDING_WINDOW = 1 + window_size[0]``,
  ``aiter/ops/triton/unified_attention.py``; CK's ``mha_batch_prefill_func``: ``window_size[0]`` keys before the
  query; ``paged_attention_ragged`` and SGLang's ``extend_attention_fwd`` take no window: the whole context);
* head counts and dims: the runner's model config is a small stand-in (4 query / 2 KV heads of 8); SGLang's
  choice of kernel, window and table for MHA layers reads none of them, except gfx950's
  ``unified_attention_3d_mtp_decode_func`` (head dim 256, page 16), which ``is_gfx95_supported`` rules out on a
  CPU whatever the named platform;
* the metadata ``init_forward_metadata`` builds (GPU Triton kernels): it is set here as SGLang lays it out for one
  request (a flat or one-row table of ``req_to_token``'s slots, and its SWA translation on a hybrid pool);
* the draft worker's decode is driven for an EAGLE-style draft with a full pool of its own (the launch set's
  ``draft-llama-2l``); a hybrid-SWA draft's own SWA pool (MiMo's MTP) and the draft extend are not driven yet.
"""

from __future__ import annotations

import traceback
from typing import Any

from swa_kit.window import to_keys
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
        self.qk_head_dim = self.v_head_dim = self.head_dim = D
        self.logit_cap, self.scaling, self.k_scale, self.v_scale = 0.0, D ** -0.5, None, None
        self.is_cross_attention = False
        # SGLang's Triton backend reads these too: no soft cap, a causal decoder layer, no xAI temperature
        self.logit_capping_method, self.attn_type, self.xai_temperature_len = "tanh", None, None


#: the kernels that take a (left, right) window, and the kit's name for each one's convention (swa_kit.window)
_PAIR_CONVENTION = {"unified_attention": "aiter_unified", "mha_batch_prefill_func": "aiter_ck",
                    "flash_attn_varlen_func": "flash_attn"}


def keys_attended(kernel: str, window_arg: Any) -> int | None:
    """Keys one query attends, by the kernel's own rule for its window argument (None: the whole context)."""
    if kernel in _PAIR_CONVENTION:  # left keys before the query, and the query
        return to_keys(_PAIR_CONVENTION[kernel], tuple(window_arg))
    if kernel in ("paged_attention_ragged", "extend_attention_fwd"):
        return None  # no window parameter (the legacy verify passes none either)
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
                                      "v_head_dim": D, "swa_v_head_dim": D, "is_encoder_decoder": False,
                                      "hf_config": mc.hf_config,
                                      "get_max_num_attention_heads": staticmethod(lambda: HQ),
                                      "get_num_kv_heads": staticmethod(lambda tp, *dcp: HKV)})()
    runner = type("Runner", (), {})()
    runner.__dict__.update(
        model_config=config, device="cpu", kv_cache_dtype=torch.float32, dtype=torch.float32,
        req_to_token_pool=memory_pool.ReqToTokenPool(2, TOKENS, "cpu", False), kv_index_translator=None,
        token_to_kv_pool=pool, token_to_kv_pool_allocator=allocator, is_draft_worker=False,
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(sa.speculative_algorithm), gpu_id=0,
        page_size=pool.page_size, decode_num_tokens_per_req=lambda: sa.speculative_num_draft_tokens or 1,
        sliding_window_size=utils.resolve_sliding_window_size(type("Model", (), {})(), mc))
    return runner


def _scatter_page_table(req_to_token: Any, req_pool_indices: Any, seq_lens: Any, page_table: Any, *strides: Any,
                        **constants: Any) -> None:
    """CPU stand-in for the Triton kernel that fills the extend page tables from ``req_to_token`` (one slot id per
    page, and its SWA translation when SGLang's builder passes a mapping)."""
    swa_table, mapping = strides[2], strides[3]
    page = constants["PAGE_SIZE"]
    for row, (req, n) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        slots = req_to_token[req, :n:page].long()
        page_table[row, :len(slots)] = (slots // page).int()
        if swa_table is not None:
            swa_table[row, :len(slots)] = (mapping[slots] // page).int()


class _Scatter:
    """``kernel[grid](...)``-shaped; remembers the SWA table it filled so the tracer can tell it apart."""

    def __init__(self, backend_ref: list) -> None:
        self.backend_ref = backend_ref

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            _scatter_page_table(*args, **kwargs)
            if args[6] is not None:  # SGLang's builder made an SWA table: the tracer compares by identity
                self.backend_ref[0].forward_metadata.swa_page_table = args[6]
        return launch


#: The kit's forward modes -> SGLang's ForwardMode (prefill: no cached prefix; extend: a cached prefix of pages).
MODES = {"decode": "DECODE", "prefill": "EXTEND", "extend": "EXTEND", "verify": "TARGET_VERIFY",
         "draft_decode": "DECODE"}


def routes(sa: Any, mc: Any, page: int, hybrid: bool, windows: dict[int, int], modes: tuple[str, ...],
           draft_windows: dict[int, int] | None = None) -> dict[str, dict[int, Any]]:
    """Per forward mode, per layer: ``[kernel, window argument, page table, keys attended]`` from SGLang's
    ``forward_decode`` / ``forward_extend``, or :data:`GUARD` where SGLang's guard refuses the layer.

    ``sa`` / ``mc``: the launch's resolved ``ServerArgs`` and ``ModelConfig`` (published by ``ask_sglang``);
    ``windows``: each layer's ``sliding_window_size`` from SGLang's model class; ``modes``: keys of :data:`MODES`.
    ``draft_windows``: the draft model's layers (an EAGLE-style draft with a full pool of its own), for
    ``draft_decode``: a second backend built as the draft worker's (``is_draft_worker``, its own pool, the target's
    allocator), so SGLang's ``_resolve_swa_kv_pool`` decides which slot ids its layers read.
    """
    import torch

    from swa_kit.measure import trace

    backend_mod = import_sglang("sglang.srt.layers.attention.aiter_backend")
    fbi = import_sglang("sglang.srt.model_executor.forward_batch_info")
    extend_mod = import_sglang("sglang.kernels.ops.attention.extend_attention")
    kernels = ("unified_attention", "paged_attention_ragged", "pa_decode_gluon", "mha_batch_prefill_func",
               "flash_attn_varlen_func")
    backend_ref: list = []
    patched = {**{(backend_mod, name): _placeholder for name in kernels},
               (extend_mod, "extend_attention_fwd"): _placeholder,
               (backend_mod, "scatter_req_to_token_to_page_table_kernel"): _Scatter(backend_ref)}
    saved = {key: key[0].__dict__.get(key[1]) for key in patched}
    for (owner, name), value in patched.items():
        setattr(owner, name, value)
    tracer = trace.install(None, module=backend_mod)  # before the backend binds extend_attention_fwd
    try:
        pool, allocator = _pools(mc, page, hybrid, windows)
        backend = backend_mod.AiterAttnBackend(_runner(sa, mc, pool, allocator))
        backend_ref.append(backend)
        seq_len = 3 * page + 1  # a few pages and one token: tables of more than one page
        full_ids = torch.arange(page, page + seq_len)
        backend.req_to_token[0, :seq_len] = full_ids.int()
        out = {mode: _mode_routes(backend, backend_mod, fbi, tracer, mode, full_ids, windows)
               for mode in modes if mode != "draft_decode"}
        if "draft_decode" in modes and draft_windows is not None:
            draft_pool, _ = _pools(mc, page, False, draft_windows)
            runner = _runner(sa, mc, draft_pool, allocator)
            runner.is_draft_worker = True
            draft = backend_mod.AiterAttnBackend(runner)
            backend_ref[0] = draft
            draft.req_to_token[0, :seq_len] = full_ids.int()
            out["draft_decode"] = _mode_routes(draft, backend_mod, fbi, tracer, "draft_decode", full_ids,
                                               draft_windows)
        return out
    finally:
        tracer.uninstall()
        for (owner, name), value in saved.items():
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _mode_routes(backend: Any, backend_mod: Any, fbi: Any, tracer: Any, mode: str, full_ids: Any,
                 windows: dict[int, int]) -> dict[int, Any]:
    import torch

    seq_len = len(full_ids)
    n_q = queries(mode, seq_len)
    table_2d = backend.decode_uses_page_table if MODES[mode] == "DECODE" else mode == "verify"
    # init_forward_metadata builds the SWA table only where the backend resolved an SWA pool
    swa_ids = backend.swa_kv_pool.translate_loc_from_full_to_swa(full_ids) if backend.use_sliding_window_kv_pool \
        else None
    out: dict[int, Any] = {}
    for layer_id, sws in sorted(windows.items()):
        backend.forward_metadata = backend_mod.ForwardMetadata(
            kv_indptr=torch.tensor([0, seq_len], dtype=torch.int32),
            kv_indices=full_ids[None].int() if table_2d else full_ids.int(),
            qo_indptr=torch.tensor([0, n_q], dtype=torch.int32), kv_last_page_len=torch.ones(1, dtype=torch.int32),
            max_q_len=n_q, max_kv_len=seq_len, max_extend_len=n_q,
            swa_page_table=None if swa_ids is None else swa_ids[None].int())
        batch = forward_batch(fbi, mode, full_ids)
        before = len(tracer.records)
        try:
            forward(backend, mode, layer_id, sws, batch)
        except _Stop:
            (record,) = tracer.records[before:]
            out[layer_id] = [record.kernel, record.window_arg, record.page_table,
                             keys_attended(record.kernel, record.window_arg)]
        except ValueError as error:  # SGLang's own guard, told apart by the function that raised
            if traceback.extract_tb(error.__traceback__)[-1].name != "_reject_paged_decode_sliding_window":
                raise
            out[layer_id] = GUARD
    return out


def queries(mode: str, seq_len: int) -> int:
    """The new tokens of the one request in ``mode`` (prefill: all of them; extend: 5 after a cached prefix;
    verify: the 4 draft tokens)."""
    return {"decode": 1, "draft_decode": 1, "prefill": seq_len, "extend": 5, "verify": 4}[mode]


def forward_batch(fbi: Any, mode: str, full_ids: Any) -> Any:
    """A ``ForwardBatch`` stand-in for one request over the slots ``full_ids`` in ``mode`` (the fields SGLang's
    backends read for MHA layers)."""
    import torch

    seq_len = len(full_ids)
    n_q = queries(mode, seq_len)
    batch = type("ForwardBatch", (), {})()
    batch.__dict__.update(
        batch_size=1, seq_lens=torch.tensor([seq_len], dtype=torch.int32), seq_lens_cpu=torch.tensor([seq_len]),
        seq_lens_sum=seq_len, forward_mode=getattr(fbi.ForwardMode, MODES[mode]), attn_attend_prefix_cache=False,
        out_cache_loc=full_ids[-n_q:], req_pool_indices=torch.tensor([0]), mha_return_lse=False,
        extend_prefix_lens_cpu=[seq_len - n_q], extend_prefix_lens=torch.tensor([seq_len - n_q]),
        extend_seq_lens=torch.tensor([n_q]), extend_seq_lens_cpu=[n_q], extend_start_loc=None, kv_loc_plan=None,
        spec_info=None, encoder_lens=None, mha_one_shot=False)
    return batch


def forward(backend: Any, mode: str, layer_id: int, sws: int, batch: Any) -> None:
    """SGLang's ``forward_decode`` / ``forward_extend`` for one stand-in layer; a recording stand-in kernel stops
    it (:class:`_Stop`), so returning is an error."""
    import torch

    layer = _Layer(layer_id, sws)
    n_q = len(batch.out_cache_loc)
    q = torch.zeros(n_q, HQ * D)
    if MODES[mode] == "DECODE":
        backend.forward_decode(q, None, None, layer, batch, save_kv_cache=False)
    else:
        kv = torch.zeros(n_q, HKV, D)
        backend.forward_extend(q, kv, kv, layer, batch, save_kv_cache=False)
    raise RuntimeError(f"SGLang's {mode} returned without calling a kernel the differential records")
