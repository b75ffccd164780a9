"""Each layer's route on SGLang's own Triton backend, for :mod:`swa_kit.measure.sglang_check` (the audit's
``--check-with-sglang`` and the differential, tests/differential.py), the way :mod:`swa_kit.measure.sglang_routes`
drives the aiter backend, on the same pool, runner, layer and batch stand-ins.

SGLang's real ``TritonAttnBackend`` (``layers/attention/triton_backend.py``) is built on a CPU with the runner's
``sliding_window_size`` as SGLang's model class resolves it (``resolve_sliding_window_size``), and a real
``KVIndexTranslator`` over the launch's pools. Per forward mode its real ``init_forward_metadata`` builds the
batch's read rails (``kv_indices`` and, where the runner has a window, ``update_sliding_window_buffer``'s
``window_kv_indices``: the newest ``min(len, sliding_window_size)`` slots, through the pool's full->SWA mapping on an
``SWAKVPool``); then its real ``forward_decode`` / ``forward_extend`` run once per layer. The Triton kernels do not
run on a CPU, so they are recording stand-ins:

* the gather ``create_flashinfer_kv_indices_triton`` that fills a rail from ``req_to_token``: done on the CPU as
  the kernel does it (``kernels/ops/attention/kv_indices.py``), remembering each rail it filled, its window (the
  ``sliding_window_size`` SGLang gave ``update_sliding_window_buffer``, -1 for the full rail) and whether its ids
  went through the SWA mapping;
* ``decode_attention_fwd`` and ``extend_attention_fwd``: record the rail they are given and stop the call.
  Decode takes no window parameter: its window argument here is the window of the rail it reads (its keys: that
  many, the query's own among them, since ``seq_lens`` counts it). Extend's is its ``sliding_window_size``
  argument (``extend_attention.py``: keys with ``q <= k + sliding_window_size``, so that many + 1), bounded by the
  rail's window + 1 where the layer reads a window rail over a cached prefix (extend, verify: the first query
  sees only the rail's prefix keys);
* ``get_num_kv_splits`` (a Triton kernel that only splits the decode's work) does nothing.

Under ``--enable-unified-memory`` the pools are still these static stand-ins (``SWAKVPool`` / ``MHATokenToKVPool``):
the unified pool's own id translation (its v2p page tables, ``KVIndexTranslator``'s translating reads) is not
driven, so the page table compared there says which sub-pool's ids a layer reads, not how they were translated.

Target verify runs with no tree mask (a chain, ``topk == 1``), as the aiter harness does. The draft worker's decode
is a second backend built as the draft worker's (``is_draft_worker``, its own pool), driven as a plain decode: a
stand-in for ``TritonMultiStepDraftBackend``, whose per-step rails the draft layers (all full in the launch set's
``draft-llama-2l``) do not read.
"""

from __future__ import annotations

from typing import Any

from swa_kit.launch.sglang_oracle import import_sglang
from swa_kit.measure.sglang_routes import (MODES, TOKENS, _pools, _runner, _Stop, forward, forward_batch,
                                            queries)

KERNELS = ("decode_attention_fwd", "extend_attention_fwd")
#: SGLang's assertion in forward_decode / forward_extend: a layer with a window, but the runner has none
#: (``sliding_window_size`` None), so init_forward_metadata built no window rail
NO_RAIL = "refused: TritonAttnBackend asserts window_kv_indices"


def _keys(kernel: str, window: int, rail_window: int) -> int | None:
    """Keys one query attends (None: the whole context), by the kernel's rule for its window and the rail's."""
    if kernel == "decode_attention_fwd":
        return window if window > 0 else None
    own = window + 1 if window > 0 else None  # extend_attention.py masks only when SLIDING_WINDOW_SIZE > 0
    # over a cached prefix, the first query sees the rail's newest rail_window prefix keys, and itself
    rail = rail_window + 1 if rail_window > 0 else None
    return own if rail is None else rail if own is None else min(own, rail)


class _Rails:
    """The CPU gather and the kernels' recorders: which rail (window, pool) each kernel call read."""

    def __init__(self) -> None:
        # id(rail) -> (its window, "swa" | "full", whether it holds keys: a prefix to bound)
        self.filled: dict[int, tuple[int, str, bool]] = {}
        self.window = -1  # the window of the rail being filled (update_sliding_window_buffer's argument)
        self.calls: list[list[Any]] = []

    def gather(self, grid: Any) -> Any:
        def launch(req_to_token: Any, req_pool_indices: Any, lens: Any, indptr: Any, start: Any, out: Any,
                   stride: Any, **constants: Any) -> None:
            assert constants.get("ENTRY_PAGE_SIZE", 1) == 1, "a page-granular table: unified memory is not driven"
            mapping = constants.get("token_mapping")
            for lane in range(grid[0]):
                begin = 0 if start is None else int(start[lane])
                ids = req_to_token[int(req_pool_indices[lane]), begin:begin + int(lens[lane])].long()
                at = int(indptr[lane])
                out[at:at + len(ids)] = ids if mapping is None else mapping[ids]
            self.filled[id(out)] = (self.window, "full" if mapping is None else "swa", bool(lens[:grid[0]].sum()))
        return launch

    def window_buffer(self, original: Any) -> Any:
        def update(*args: Any, **kwargs: Any) -> Any:
            self.window = args[4]  # sliding_window_size, by position as init_forward_metadata passes it
            try:
                return original(*args, **kwargs)
            finally:
                self.window = -1
        return update

    def kernel(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            indices = args[5] if name == "decode_attention_fwd" else args[8]
            rail_window, table, holds_keys = self.filled[id(indices)]
            window = rail_window if name == "decode_attention_fwd" else kwargs["sliding_window_size"]
            self.calls.append([name, window, table, _keys(name, window, rail_window if holds_keys else -1)])
            raise _Stop
        return record


def routes(sa: Any, mc: Any, page: int, hybrid: bool, windows: dict[int, int], modes: tuple[str, ...],
           draft_windows: dict[int, int] | None, runner_window: int | None,
           draft_runner_window: int | None = None) -> dict[str, dict[int, Any]]:
    """Per forward mode, per layer: ``[kernel, window argument, page table, keys attended]`` from SGLang's Triton
    backend; the arguments as :func:`swa_kit.measure.sglang_routes.routes` takes them, and ``runner_window`` (and
    the draft's): the runner's ``sliding_window_size`` from SGLang's model class."""
    import torch

    backend_mod = import_sglang("sglang.srt.layers.attention.triton_backend")
    translator_mod = import_sglang("sglang.srt.mem_cache.kv_index_translator")
    fbi = import_sglang("sglang.srt.model_executor.forward_batch_info")
    kernel_mods = {"decode_attention_fwd": import_sglang("sglang.kernels.ops.attention.decode_attention"),
                   "extend_attention_fwd": import_sglang("sglang.kernels.ops.attention.extend_attention")}
    rails = _Rails()
    patched = {**{(kernel_mods[name], name): rails.kernel(name) for name in KERNELS},
               (translator_mod, "create_flashinfer_kv_indices_triton"): type("Grid", (), {
                   "__getitem__": lambda self, grid: rails.gather(grid)})(),
               (backend_mod, "update_sliding_window_buffer"): rails.window_buffer(
                   backend_mod.update_sliding_window_buffer)}
    saved = {key: getattr(*key) for key in patched}
    for (owner, name), value in patched.items():
        setattr(owner, name, value)
    try:
        seq_len = 3 * page + 8  # a few pages and a few tokens: a cached prefix before an extend even at page 1
        full_ids = torch.arange(page, page + seq_len)
        pool, allocator = _pools(mc, page, hybrid, windows)
        target = _backend(backend_mod, translator_mod, sa, mc, pool, allocator, _runner_window(mc, runner_window),
                          False, full_ids)
        out = {mode: _mode_routes(target, fbi, rails, mode, full_ids, windows)
               for mode in modes if mode != "draft_decode"}
        if "draft_decode" in modes and draft_windows is not None:
            draft_pool, _ = _pools(mc, page, False, draft_windows)
            draft = _backend(backend_mod, translator_mod, sa, mc, draft_pool, allocator, draft_runner_window, True,
                             full_ids)
            out["draft_decode"] = _mode_routes(draft, fbi, rails, "draft_decode", full_ids, draft_windows)
        return out
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _runner_window(mc: Any, built: int | None) -> int | None:
    """The target runner's ``sliding_window_size`` for this launch: ``resolve_sliding_window_size`` takes the model
    class's ``get_attention_sliding_window_size`` where it has one (``built``, from the class built on the meta
    device), else the launch's ``ModelConfig`` (``sliding_window_size`` only while ``is_hybrid_swa``, which
    ``--disable-hybrid-swa-memory`` turns off)."""
    registry = import_sglang("sglang.srt.models.registry")
    utils = import_sglang("sglang.srt.model_executor.model_runner_components.load_model_utils")
    model_cls, _ = registry.ModelRegistry.resolve_model_cls(mc.hf_config.architectures)
    if hasattr(model_cls, "get_attention_sliding_window_size"):
        return built
    return utils.resolve_sliding_window_size(type("Model", (), {})(), mc)


def _backend(backend_mod: Any, translator_mod: Any, sa: Any, mc: Any, pool: Any, allocator: Any,
             runner_window: int | None, draft: bool, full_ids: Any) -> Any:
    import torch

    runner = _runner(sa, mc, pool, allocator)
    runner.sliding_window_size, runner.is_draft_worker = runner_window, draft
    # the stand-in config's shape, and the launch's own ModelConfig for what else the backend reads (its hybrid
    # linear-attention probes: mambaish_config)
    type(runner.model_config).__getattr__ = lambda self, name: getattr(mc, name)
    runner.kv_index_translator = translator_mod.KVIndexTranslator(
        req_to_token=runner.req_to_token_pool.req_to_token, token_to_kv_pool_allocator=allocator,
        token_to_kv_pool=pool, page_size=pool.page_size, device="cpu", is_draft_worker=draft)
    backend = backend_mod.TritonAttnBackend(runner)
    backend.get_num_kv_splits = lambda *args, **kwargs: None  # splits the decode's work only (a Triton kernel)
    backend.req_to_token[0, :len(full_ids)] = full_ids.int()
    mapping = getattr(pool, "full_to_swa_index_mapping", None)
    if mapping is not None:  # SWA slots unlike the full ones, as the allocator would hand them out
        mapping[full_ids] = torch.arange(TOKENS - 1, TOKENS - 1 - len(full_ids), -1, dtype=mapping.dtype)
    return backend


def _mode_routes(backend: Any, fbi: Any, rails: _Rails, mode: str, full_ids: Any,
                 windows: dict[int, int]) -> dict[int, Any]:
    batch = forward_batch(fbi, mode, full_ids)
    if MODES[mode] == "TARGET_VERIFY":  # a chain: no tree mask, the launch's draft tokens per request
        batch.spec_info = type("SpecInput", (), {"custom_mask": None,
                                                 "num_tokens_per_req": queries(mode, len(full_ids))})()
    backend.init_forward_metadata(batch)
    out: dict[int, Any] = {}
    for layer_id, sws in sorted(windows.items()):
        before = len(rails.calls)
        try:
            forward(backend, mode, layer_id, sws, batch)
        except _Stop:
            (out[layer_id],) = rails.calls[before:]
        except AssertionError as error:  # SGLang's own: a window layer, but the runner built no window rail
            if "built no window_kv_indices" not in str(error):
                raise
            out[layer_id] = NO_RAIL
    return out
