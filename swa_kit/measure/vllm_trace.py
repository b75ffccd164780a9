"""Record what vLLM 0.34's ROCm attention backends really pass to their kernels, in a live vLLM worker process.

Import it in the process that runs the model (vLLM's worker) before the model is built, and serve with
``--enforce-eager``: vLLM 0.34's default CUDA-graph mode (``FULL_AND_PIECEWISE``) replays whole decode steps without
running Python, so the wrappers would see only the calls made while a graph was captured::

    import swa_kit.measure.vllm_trace
    swa_kit.measure.vllm_trace.install("/tmp/vllm-trace.jsonl")   # e.g. from a sitecustomize.py on PYTHONPATH

:func:`install` wraps the ``forward`` of the four ROCm backends' impls (``ROCM_AITER_FA``, ``ROCM_ATTN``,
``ROCM_AITER_UNIFIED_ATTN``, ``TRITON_ATTN``; to learn the layer and the batch of each call) and the kernels they
call, where vLLM looks them up:

* aiter's ``flash_attn_varlen_func`` (``aiter`` package attribute: ``rocm_aiter_ops.flash_attn_varlen_func`` imports
  it at every call), aiter's Triton ``unified_attention`` (``aiter.ops.triton.unified_attention``: imported at the
  call in ``rocm_aiter_fa.py``, at construction in ``rocm_aiter_unified_attn.py``, hence "before the model is
  built"), aiter's ``paged_attention_v1`` (``torch.ops.aiter``; its window is the 20th positional argument,
  ``sliding_window``), ``rocm_aiter_ops.paged_attention_common`` (the shuffled KV layout; no window) and aiter's
  ``flash_attn_with_kvcache`` (``ROCM_AITER_FA``'s non-causal decode, for DFlash drafting: the plan has no route
  for it, so its records are findings, ranked by the keys they attend);
* vLLM's own ``chunked_prefill_paged_decode`` (bound in ``rocm_attn.py``) and Triton ``unified_attention`` (bound in
  ``triton_attn.py``; ``rocm_aiter_unified_attn.py`` imports it from its ops module for non-causal layers).

Each kernel call appends one :class:`~swa_kit.measure.trace.TraceRecord` with ``engine="vllm"``: the layer index
(vLLM's ``extract_layer_index`` rule on ``layer.layer_name``), the impl's stored window left span, the kernel under
the vLLM plan's name, the window argument exactly as passed, the block table (``"window"`` for
``ROCM_AITER_FA``'s window-trimmed decode table, ``"full"`` otherwise, None for contiguous prefill), the forward
mode and the impl class. The wrapped kernel runs with the same arguments.

``swa-kit audit --engine vllm --trace FILE`` holds the records against the vLLM plan with :func:`compare`.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from swa_kit.errors import UsageError
from swa_kit.launch.vllm_plan import VllmPlan
from swa_kit.measure.trace import TraceFinding, Tracer, TraceRecord

#: The impl classes whose ``forward`` is wrapped, and the backend each belongs to (``get_name()``).
IMPLS = {
    "vllm.v1.attention.backends.rocm_aiter_fa": ("AiterFlashAttentionImpl", "ROCM_AITER_FA"),
    "vllm.v1.attention.backends.rocm_attn": ("RocmAttentionImpl", "ROCM_ATTN"),
    "vllm.v1.attention.backends.rocm_aiter_unified_attn": ("RocmAiterUnifiedAttentionImpl", "ROCM_AITER_UNIFIED_ATTN"),
    "vllm.v1.attention.backends.triton_attn": ("TritonAttentionImpl", "TRITON_ATTN"),
}
BACKEND_OF_IMPL = dict(IMPLS.values())


@dataclass(frozen=True)
class Kernel:
    """One kernel a ROCm backend calls: where vLLM looks it up, the vLLM plan's name, where its window and block
    table sit (keyword, or position when vLLM passes it by position)."""

    module: str  # "torch.ops.aiter" for aiter's registered ops
    attribute: str
    name: str
    window: tuple[str, int | None] | None  # (keyword, position); None: the kernel takes no window
    table: tuple[str, int | None] | None


KERNELS = (  # aiter first: importing it registers its ops under torch.ops.aiter
    Kernel("aiter", "flash_attn_varlen_func", "aiter flash_attn_varlen_func", ("window_size", None), None),
    Kernel("aiter.ops.triton.unified_attention", "unified_attention", "aiter unified_attention",
           ("window_size", None), ("block_table", None)),
    Kernel("torch.ops.aiter", "paged_attention_v1", "aiter paged_attention_v1", ("sliding_window", 19),
           ("block_tables", 6)),
    Kernel("aiter.ops.triton.attention.mha_v3", "flash_attn_with_kvcache", "aiter flash_attn_with_kvcache",
           ("window_size", None), ("page_table", None)),  # ROCM_AITER_FA's non-causal decode (DFlash drafting)
    Kernel("vllm._aiter_ops.rocm_aiter_ops", "paged_attention_common", "aiter paged_attention_common", None,
           ("block_tables", None)),
    Kernel("vllm.v1.attention.backends.rocm_attn", "chunked_prefill_paged_decode", "chunked_prefill_paged_decode",
           ("sliding_window", None), ("block_table", None)),
    Kernel("vllm.v1.attention.backends.triton_attn", "unified_attention", "vLLM Triton unified_attention",
           ("window_size", None), ("block_table", None)),
    Kernel("vllm.v1.attention.ops.triton_unified_attention", "unified_attention", "vLLM Triton unified_attention",
           ("window_size", None), ("block_table", None)),
)
#: The kernels that do not exist without aiter (ROCm): tracing a ROCm server needs at least these.
AITER_KERNELS = ("aiter flash_attn_varlen_func", "aiter unified_attention", "aiter paged_attention_v1")

_call: contextvars.ContextVar[tuple[Any, Any, Any] | None] = contextvars.ContextVar("swa_kit_vllm_trace",
                                                                                     default=None)


def layer_index(layer_name: Any) -> int | None:
    """The layer index in a vLLM layer name: its one all-digit dotted part (vLLM's ``extract_layer_index``, in
    ``vllm/model_executor/models/utils.py``, asserts there is exactly one); None otherwise."""
    numbers = [int(part) for part in str(layer_name).split(".") if part.isdigit()]
    return numbers[0] if isinstance(layer_name, str) and len(numbers) == 1 else None


def _argument(where: tuple[str, int | None] | None, args: tuple, kwargs: dict) -> Any:
    if where is None:
        return None
    keyword, position = where
    if keyword in kwargs:
        return kwargs[keyword]
    return args[position] if position is not None and len(args) > position else None


def _mode(kernel: str, metadata: Any) -> str | None:
    """The forward mode of one call. ``ROCM_AITER_FA`` runs prefills and extends through ``flash_attn_varlen_func``
    and decodes apart (a decode of several query tokens is a verify); the other backends make one call for the
    whole batch: ``decode`` when every query is one token, else ``mixed`` (prefill, chunked prefill or verify: the
    call does not tell them apart)."""
    if hasattr(metadata, "num_decodes") and hasattr(metadata, "decode_metadata"):
        if kernel == "aiter flash_attn_varlen_func":
            return "prefill"
        decode = metadata.decode_metadata
        return None if decode is None else "decode" if decode.max_query_len == 1 else "verify"
    query = getattr(metadata, "max_query_len", None)
    return None if query is None else "decode" if query == 1 else "mixed"


def _record(kernel: Kernel, args: tuple, kwargs: dict) -> TraceRecord:
    impl, layer, metadata = _call.get() or (None, None, None)
    window = _argument(kernel.window, args, kwargs)
    table = _argument(kernel.table, args, kwargs)
    trimmed = getattr(getattr(metadata, "decode_metadata", None), "swa_block_table", None)
    stored = getattr(impl, "sliding_window", None)
    return TraceRecord(
        layer=layer_index(getattr(layer, "layer_name", None)),
        sliding_window_size=stored[0] if isinstance(stored, tuple) else None, kernel=kernel.name,
        window_arg=list(window) if isinstance(window, tuple) else window,
        page_table_shape=list(table.shape) if hasattr(table, "shape") else None,
        page_table=None if table is None else "window" if trimmed is not None and table is trimmed else "full",
        mode=_mode(kernel.name, metadata), method=None if impl is None else f"{type(impl).__name__}.forward",
        pid=os.getpid(), engine="vllm")


def _wrap_forward(tracer: Tracer, cls: type) -> None:
    original = cls.__dict__["forward"]

    @functools.wraps(original)
    def traced(impl: Any, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any,
               *args: Any, **kwargs: Any) -> Any:
        token = _call.set((impl, layer, attn_metadata))
        try:
            return original(impl, layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs)
        finally:
            _call.reset(token)

    tracer.patch(cls, "forward", traced)


def _owner(module: str) -> Any:
    """The object vLLM looks the kernel up on, or None where it does not exist here (no aiter, no such op)."""
    try:
        if module == "torch.ops.aiter":
            import torch

            return torch.ops.aiter
        if module == "vllm._aiter_ops.rocm_aiter_ops":
            return importlib.import_module("vllm._aiter_ops").rocm_aiter_ops
        return importlib.import_module(module)
    except ImportError:
        return None


def _has(owner: Any, attribute: str) -> bool:
    try:
        return callable(getattr(owner, attribute))
    except (AttributeError, RuntimeError):  # torch.ops raises for an op nobody registered
        return False


def install(path: str | Path | None = None) -> Tracer:
    """Wrap the ROCm backends' ``forward`` and the kernels they call; records go to ``path`` (JSON lines) and
    memory. Call it before vLLM builds the model. Refused where aiter's kernels are missing (not a ROCm process);
    whatever stops it puts back what it had wrapped."""
    tracer = Tracer(path)
    try:
        for module, (cls, _) in IMPLS.items():
            _wrap_forward(tracer, getattr(importlib.import_module(module), cls))
        wrapped = []
        for kernel in KERNELS:
            owner = _owner(kernel.module)
            if owner is not None and _has(owner, kernel.attribute):
                recorder: Callable[[tuple, dict], TraceRecord] = functools.partial(_record, kernel)
                tracer.wrap_kernel(owner, kernel.attribute, recorder)
                wrapped.append(kernel.name)
        missing = [name for name in AITER_KERNELS if name not in wrapped]
        if missing:
            raise UsageError(f"{', '.join(missing)} cannot be found in this process (aiter did not import): "
                             "install the tracer in the vLLM worker that serves the model on ROCm")
    except BaseException:
        tracer.uninstall()
        raise
    return tracer


# -- the records against the vLLM plan ---------------------------------------------------------------------

#: A record's mode -> the plan's modes it may be (a one-call backend's multi-token batch: prefill or verify).
PLAN_MODES = {"prefill": ("prefill",), "decode": ("decode",), "verify": ("verify",), "mixed": ("prefill", "verify")}


def _kernel(route_kernel: str) -> str:
    """The plan's kernel name without its note (``aiter unified_attention (max_seqlen_q=1)`` is the same call)."""
    return route_kernel.split(" (")[0]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def compare(records: Iterable[TraceRecord], plan: VllmPlan) -> list[TraceFinding]:
    """Where traced vLLM kernel calls differ from ``plan``: the backend (from the impl class), the kernel and the
    window argument the plan routes the record's layer kind to in its mode. A record matches when one route of its
    mode agrees on all three; records of another engine, of a layer or mode the plan does not cover, are findings
    too: nothing is dropped silently. (The block table is recorded, not compared: the plan does not model it.)"""
    findings = []
    kinds = {kp.kind.name: kp for kp in plan.kinds}
    for record in records:
        if record.engine != "vllm":
            findings.append(TraceFinding(record.layer, record.mode, "mode", f"{record.engine} call", "vllm calls"))
            continue
        if record.layer is None or not 0 <= record.layer < plan.model.num_layers:
            findings.append(TraceFinding(record.layer, record.mode, "layer", record.layer,
                                         f"layers 0..{plan.model.num_layers - 1}"))
            continue
        kind = kinds[plan.model.layer_types[record.layer]]
        routes = [r for r in kind.routes if r.mode in PLAN_MODES.get(record.mode or "", ())]
        if not routes:
            findings.append(TraceFinding(record.layer, record.mode, "mode", record.mode,
                                         [r.mode for r in kind.routes]))
            continue
        backend = BACKEND_OF_IMPL.get((record.method or "").split(".")[0], record.method)
        best: list[tuple[str, Any, Any]] | None = None
        for route in routes:
            differ = [(f, t, p) for f, t, p in (("backend", backend, kind.selection.backend),
                                                 ("kernel", record.kernel, _kernel(route.kernel)),
                                                 ("window_arg", record.window_arg, _plain(route.window_arg)))
                      if t != p]
            if best is None or len(differ) < len(best):
                best = differ
        findings += [TraceFinding(record.layer, record.mode, f, t, p) for f, t, p in best or []]
    return findings
