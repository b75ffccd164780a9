"""Record what SGLang's aiter backend really passes to its attention kernels, in a live server process.

Import it in the process that runs the model (a TP worker) before the attention backend is built::

    import swa_kit.measure.trace
    swa_kit.measure.trace.install("/tmp/swa-trace.jsonl")     # e.g. from a sitecustomize.py on PYTHONPATH

:func:`install` wraps ``AiterAttnBackend.forward_decode`` / ``forward_extend`` (to learn the layer and
the forward mode of each call) and the kernels ``sglang/srt/layers/attention/aiter_backend.py`` calls
(module globals imported from aiter, and SGLang's own Triton ``extend_attention_fwd``). Each kernel call
appends one JSON line: the layer id, its ``sliding_window_size``, the kernel, the window argument exactly
as passed, the page table's shape and whether it was the SWA-translated table, the forward mode and the
process id. Nothing else changes: the wrapped kernel runs with the same arguments.

``swa-kit audit --trace FILE`` holds the records against the kit's plan with :func:`compare`. vLLM's ROCm
backends are traced by :mod:`swa_kit.measure.vllm_trace` into the same records (``engine="vllm"``).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from swa_kit.engine.call_sites import DECLARED_SITES
from swa_kit.errors import UsageError
from swa_kit.files import parse_json, quote, read_text
from swa_kit.window import to_keys

BACKEND_MODULE = "sglang.srt.layers.attention.aiter_backend"
EXTEND_MODULE = "sglang.kernels.ops.attention.extend_attention"
#: Kernels the aiter backend calls for MHA layers (aiter's, and SGLang's own Triton extend).
KERNELS = ("unified_attention", "paged_attention_ragged", "mha_batch_prefill_func", "flash_attn_varlen_func",
           "pa_decode_gluon", "extend_attention_fwd")
METHODS = ("forward_decode", "forward_extend")
#: SGLang ForwardMode names -> the kit's forward modes (dispatch.MODES).
MODES = {"DECODE": "decode", "EXTEND": "extend", "MIXED": "extend", "TARGET_VERIFY": "verify",
         "DRAFT_EXTEND": "draft_extend", "DRAFT_EXTEND_V2": "draft_extend", "IDLE": "idle"}

_call: contextvars.ContextVar[tuple[Any, Any, Any, str] | None] = contextvars.ContextVar("swa_kit_trace", default=None)


@dataclass(frozen=True)
class TraceRecord:
    """One kernel call, as the engine's attention backend made it."""

    layer: int | None
    # the layer's window as a left span, keys - 1 (-1: off): SGLang's sliding_window_size, vLLM's
    # impl.sliding_window[0] (every vLLM ROCm backend stores (W - 1, 0), (-1, -1) when off)
    sliding_window_size: int | None
    kernel: str
    window_arg: Any  # the window argument exactly as passed (a list for a tuple), None when the kernel takes none
    page_table_shape: list[int] | None
    page_table: str | None  # "swa" when the backend's SWA-translated table was passed, "full" otherwise
    mode: str | None  # the kit's forward mode (decode, extend, verify, draft_extend)
    method: str | None
    pid: int
    engine: str = "sglang"  # the engine that made the call: "sglang" or "vllm" (traces without it are SGLang's)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _shape(value: Any) -> list[int] | None:
    return list(value.shape) if hasattr(value, "shape") else None


def _window(kernel: str, args: tuple, kwargs: dict) -> Any:
    if kernel in ("unified_attention", "mha_batch_prefill_func", "flash_attn_varlen_func"):
        value = kwargs.get("window_size")
        return list(value) if isinstance(value, tuple) else value
    if kernel in ("pa_decode_gluon", "extend_attention_fwd"):
        return kwargs.get("sliding_window", kwargs.get("sliding_window_size"))
    return None  # paged_attention_ragged has no window parameter


def _table(kernel: str, args: tuple, kwargs: dict) -> Any:
    if kernel == "unified_attention":
        return kwargs.get("block_table")
    if kernel == "paged_attention_ragged":
        return kwargs.get("kv_page_indices", args[7] if len(args) > 7 else None)
    if kernel == "mha_batch_prefill_func":
        return kwargs.get("kv_page_indices", args[5] if len(args) > 5 else None)
    if kernel == "extend_attention_fwd":  # the legacy verify passes its kv_indices ninth, by position
        return kwargs.get("kv_indices", args[8] if len(args) > 8 else None)
    return kwargs.get("block_tables", kwargs.get("kv_indices"))


def _record(kernel: str, args: tuple, kwargs: dict) -> TraceRecord:
    current = _call.get()
    backend, layer, forward_batch, method = current if current else (None, None, None, None)
    table = _table(kernel, args, kwargs)
    metadata = getattr(backend, "forward_metadata", None)
    swa_table = getattr(metadata, "swa_page_table", None)
    which = None if table is None else ("swa" if swa_table is not None and table is swa_table else "full")
    mode = getattr(getattr(forward_batch, "forward_mode", None), "name", None)
    return TraceRecord(layer=getattr(layer, "layer_id", None),
                       sliding_window_size=getattr(layer, "sliding_window_size", None), kernel=kernel,
                       window_arg=_window(kernel, args, kwargs), page_table_shape=_shape(table), page_table=which,
                       mode=MODES.get(mode, mode.lower()) if mode else None, method=method, pid=os.getpid())


class Tracer:
    """The installed wrappers and where their records go; :meth:`uninstall` puts everything back."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.records: list[TraceRecord] = []
        self._lock = threading.Lock()
        self._restore: list[tuple[Any, str, Any]] = []

    def write(self, record: TraceRecord) -> None:
        with self._lock:
            self.records.append(record)
            if self.path is not None:
                with self.path.open("a") as out:
                    out.write(json.dumps(record.to_json()) + "\n")

    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        held = owner.__dict__.get(name) if isinstance(owner, type) else None
        if isinstance(held, staticmethod):  # a class's static method stays one (vLLM's rocm_aiter_ops)
            self._restore.append((owner, name, held))
            setattr(owner, name, staticmethod(replacement))
            return
        self._restore.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def wrap_kernel(self, owner: Any, name: str,
                    recorder: Callable[[tuple, dict], TraceRecord] | None = None) -> None:
        """Record each call of ``owner.name`` (by default as SGLang's aiter backend makes it) and run it unchanged."""
        original = getattr(owner, name)
        record = recorder or functools.partial(_record, name)

        @functools.wraps(original)
        def traced(*args: Any, **kwargs: Any) -> Any:
            self.write(record(args, kwargs))
            return original(*args, **kwargs)

        self.patch(owner, name, traced)

    def wrap_method(self, cls: type, name: str) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        def traced(backend: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *args: Any, **kw: Any):
            token = _call.set((backend, layer, forward_batch, name))
            try:
                return original(backend, q, k, v, layer, forward_batch, *args, **kw)
            finally:
                _call.reset(token)

        self.patch(cls, name, traced)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()


def install(path: str | Path | None = None, module: Any = None) -> Tracer:
    """Wrap the aiter backend's forward methods and kernels; records go to ``path`` (JSON lines) and memory.

    Call it before the model runner builds its attention backend (``extend_attention_fwd`` is bound at
    construction). ``module``: the backend module (default: the installed SGLang's).
    """
    module = module or importlib.import_module(BACKEND_MODULE)
    tracer = Tracer(path)
    for name in METHODS:
        tracer.wrap_method(module.AiterAttnBackend, name)
    wrapped = [name for name in KERNELS if callable(module.__dict__.get(name))]
    for name in wrapped:
        tracer.wrap_kernel(module, name)
    extend = importlib.import_module(EXTEND_MODULE)
    tracer.wrap_kernel(extend, "extend_attention_fwd")
    if "unified_attention" not in wrapped and "paged_attention_ragged" not in wrapped:
        tracer.uninstall()
        raise UsageError(f"{BACKEND_MODULE} holds none of aiter's kernels (aiter did not import in this process): "
                         "install the tracer in the process that serves the model on ROCm")
    return tracer


MAX_TRACE_BYTES = 256 << 20  # a long server run's kernel calls; past this, record a shorter run
#: Each field's JSON types (window_arg is any JSON value: what the kernel was passed).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "layer": (int, type(None)), "sliding_window_size": (int, type(None)), "kernel": (str,),
    "page_table_shape": (list, type(None)), "page_table": (str, type(None)), "mode": (str, type(None)),
    "method": (str, type(None)), "pid": (int,), "engine": (str,)}
ENGINES = ("sglang", "vllm")


def _record_from(value: Any, where: str) -> TraceRecord:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: a JSON {type(value).__name__}, not a swa_kit.measure.trace record (an object)")
    fields = set(TraceRecord.__dataclass_fields__)
    value = {"engine": "sglang", **value}  # traces recorded before vLLM's were traced name no engine
    if set(value) != fields:
        lacks, extra = sorted(fields - set(value)), sorted(set(value) - fields)
        raise UsageError(f"{where}: not a swa_kit.measure.trace record (lacks {lacks}, unknown {quote(extra)})")
    for name, types in _FIELD_TYPES.items():
        item = value[name]
        if not isinstance(item, types) or isinstance(item, bool):
            allowed = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise UsageError(f"{where}: {name} is {quote(item)}; a trace record's {name} is {allowed}")
    if value["engine"] not in ENGINES:
        raise UsageError(f"{where}: engine is {quote(value['engine'])}; a trace record's engine is one of "
                         f"{', '.join(ENGINES)}")
    return TraceRecord(**value)


_INSTALLERS = {"sglang": "swa_kit.measure.trace.install(PATH)", "vllm": "swa_kit.measure.vllm_trace.install(PATH)"}


def read_records(path: str | Path, engine: str | None = None) -> list[TraceRecord]:
    """The records of a trace file, bounded; a malformed line is refused with its number, an empty file too, and
    with ``engine`` given, a record another engine made (a trace is held against one engine's plan)."""
    records = []
    for number, line in enumerate(read_text(path, "trace", MAX_TRACE_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        where = f"trace {quote(str(path))} line {number}"
        record = _record_from(parse_json(line, where), where)
        if engine is not None and record.engine != engine:
            raise UsageError(f"{where}: a call {record.engine} made, but the audit is of a {engine} launch; way out: "
                             f"--engine {record.engine}, or record the {engine} server with {_INSTALLERS[engine]}")
        records.append(record)
    if not records:
        how = _INSTALLERS[engine] if engine else " or ".join(_INSTALLERS.values())
        raise UsageError(f"trace {quote(str(path))} holds no kernel calls: was {how} called in the serving process "
                         "before the first request?")
    return records


# -- the records against the plan ------------------------------------------------------------------------

#: Kernels whose window is one int, and the keys it attends, read as the kit plans the call site that passes it:
#: pa_decode_gluon keeps ``sliding_window - 1`` keys of ``seq_lens`` (aiter's mask), extend_attention_fwd masks
#: ``q <= k + sliding_window_size`` (``sliding_window_size + 1`` keys).
_INT_WINDOW_KEYS: dict[str, Callable[[Any], int | None] | None] = {
    site.kernel: site.keys_of for site in (DECLARED_SITES["decode.gluon_5d"], DECLARED_SITES["triton.extend"])}


def _window_length(value: int) -> int | None:
    """A window length W (W keys) where 0 is off: aiter's ``paged_attention_v1`` ``sliding_window`` (the kit's
    ``aiter_v1`` convention); vLLM's ``chunked_prefill_paged_decode`` also turns any value <= 0 into 0 (off) and
    masks ``context_len - key_pos < SLIDING_WINDOW``."""
    return None if value <= 0 else to_keys("aiter_v1", value)


#: vLLM's kernels that take the window as a length (vllm_trace names them as the vLLM plan does).
_INT_WINDOW_KEYS.update({"aiter paged_attention_v1": _window_length, "chunked_prefill_paged_decode": _window_length})


def traced_keys(kernel: str, window_arg: Any) -> int | None | str:
    """Keys a traced call attends (None: the whole context); ``"unread"`` for a window form the kit cannot read.

    A ``(left, right)`` pair attends ``left + 1`` keys (a negative left: no window); an int is read through its
    kernel's convention (:data:`_INT_WINDOW_KEYS`); no window argument at all is the whole context.
    """
    if window_arg is None:
        return None
    if isinstance(window_arg, list) and len(window_arg) == 2 and isinstance(window_arg[0], int) \
            and not isinstance(window_arg[0], bool):
        return None if window_arg[0] < 0 else window_arg[0] + 1
    reader = _INT_WINDOW_KEYS.get(kernel)
    if reader is not None and isinstance(window_arg, int) and not isinstance(window_arg, bool):
        return reader(window_arg)
    return "unread"


@dataclass(frozen=True)
class TraceFinding:
    """A traced call that differs from what the plan says the backend does for that layer and mode."""

    layer: int | None
    mode: str | None
    field: str
    traced: Any
    planned: Any

    def __str__(self) -> str:
        return (f"layer {self.layer} ({self.mode}): traced {self.field}={self.traced!r}, the plan says "
                f"{self.planned!r}")


def rank(mismatch: TraceFinding, meant: int | None, keys: int | None | str) -> tuple[str, str]:
    """How bad one traced difference from the plan is, read through the keys the traced call attends (``keys``,
    :func:`traced_keys`) against the keys the layer means (``meant``): the audit's severity and a title."""
    if mismatch.field in ("mode", "layer") or mismatch.layer is None:  # a layer-less record is a "mode" finding
        return "info", "traced calls the plan does not cover (is the trace from this launch?)"
    if mismatch.field == "page_table":
        return "wrong", "the server passed another page table than planned (slot ids from the wrong pool)"
    if meant is not None and keys == meant - 1:
        return "one-short", f"the server attends {keys} of {meant} keys where the plan differs (one key short)"
    if keys == meant:  # another call than planned, yet the keys the layer means: the plan is off, not the output
        attended = "every key" if meant is None else f"all {meant} keys"
        return "info", f"the server attends {attended} as meant, but its {mismatch.field} is not the planned one"
    if keys is None and meant is not None:
        return "wrong", (f"the server's {mismatch.field} differs from the plan and gets no window: it attends every "
                         f"key where {meant} are meant")
    return "wrong", (f"the server's {mismatch.field} differs from the plan and attends "
                     f"{'every key' if keys is None else keys} where {meant or 'every key'} are meant")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def compare(records: Iterable[TraceRecord], plan: Any) -> list[TraceFinding]:
    """Where traced kernel calls differ from ``plan`` (kernel, window argument, page table).

    ``plan``: one :class:`~swa_kit.engine.routing.Plan`, a list of them, or a mapping whose values are plans
    (``Decisions.routes``). A record is held against the plans of its forward mode; it matches when
    one of them routes its layer to the same kernel with the same window argument and page table
    (SGLang's draft and target decode share a mode: either plan may match). Records of a mode no plan
    covers, and calls outside a forward method, are findings too: nothing is dropped silently.
    """
    plans = list(plan.values()) if isinstance(plan, Mapping) else list(plan) if isinstance(plan, list) else [plan]
    by_mode: dict[str, list[Any]] = {}
    for p in plans:
        by_mode.setdefault("extend" if p.mode == "prefill" else p.mode, []).append(p)
    findings = []
    for record in records:
        mode = record.mode
        candidates = (by_mode.get(mode, []) if mode is not None else []) + \
            (by_mode.get("draft_decode", []) if mode == "decode" else [])
        if record.layer is None or not candidates:
            findings.append(TraceFinding(record.layer, record.mode, "mode", record.mode, sorted(by_mode)))
            continue
        entries = [e for p in candidates for e in p.layers if e.layer == record.layer]
        if not entries:
            findings.append(TraceFinding(record.layer, record.mode, "layer", record.layer, "not in the plan"))
            continue
        best: list[tuple[str, Any, Any]] | None = None
        for entry in entries:
            differ = [(f, t, p) for f, t, p in (("kernel", record.kernel, entry.kernel),
                                                 ("window_arg", record.window_arg, _plain(entry.window_arg)),
                                                 ("page_table", record.page_table, entry.page_table)) if t != p]
            if not differ:
                best = []
                break
            best = differ if best is None or len(differ) < len(best) else best
        findings += [TraceFinding(record.layer, record.mode, f, t, p) for f, t, p in best or []]
    return findings
