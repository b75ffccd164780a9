"""Real models' attention layouts, loaded from ``data/models/*.json``.

Each file describes one model: how many layers, which kind each layer is (``full``,
``sliding`` or ``chunked``), each kind's heads and head dims, the window as the
model's own config writes it, whether SGLang 0.5.23 gives the model a hybrid
(full + SWA) KV pool, and where every figure came from. A file may list
``layer_types`` in full or give a compact ``layer_pattern``: a ``cycle`` repeated to
``num_layers`` plus optional ``overrides`` (``{"layer_id": kind}``).

A window is stored as written (field, convention, value) and converted to the kit's
one unit, ``keys``, through :mod:`swa_kit.window`; a chunked layer records its chunk
size instead, because chunked local attention is not a sliding window.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swa_kit.errors import ModelConfigError, WindowConventionError
from swa_kit.resources import data_path
from swa_kit.window import Window

MODELS_DIR = data_path("models")

ATTENTION_KINDS = ("full", "sliding", "chunked")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9.]+)*$")
_TOP_KEYS = {"name", "display_name", "hf_repo", "architecture", "dtype", "num_layers", "layer_pattern",
             "layer_types", "kinds", "sglang_hybrid_swa_pool", "notes", "sources", "unverified"}
_KIND_KEYS = {"attention", "window", "chunk", "num_q_heads", "num_kv_heads", "head_dim", "v_head_dim"}


@dataclass(frozen=True)
class LayerKind:
    """One attention shape shared by every layer of that kind."""

    name: str
    attention: str  # full | sliding | chunked
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: Window = Window(None)
    window_field: str | None = None
    window_convention: str | None = None
    window_value: Any = None
    chunk_size: int | None = None

    @property
    def uses_swa_pool(self) -> bool:
        """Whether a hybrid pool keeps this kind in its SWA sub-pool (sliding and chunked layers)."""
        return self.attention != "full"

    @property
    def retained_tokens(self) -> int | None:
        """Most tokens one query of this kind can attend (None: the whole context)."""
        return self.window.keys if self.attention == "sliding" else self.chunk_size


@dataclass(frozen=True)
class ModelSpec:
    """A model's layer layout and KV shapes, with the source of every figure."""

    name: str
    display_name: str
    hf_repo: str
    architecture: str
    dtype: str
    kinds: dict[str, LayerKind]
    layer_types: tuple[str, ...]
    sglang_hybrid_swa_pool: bool
    sources: dict[str, str]
    unverified: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    path: Path | None = field(default=None, compare=False)

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def layer_kind(self, layer_id: int) -> LayerKind:
        """The kind of layer ``layer_id``; a clear error outside ``[0, num_layers)``."""
        if not isinstance(layer_id, int) or isinstance(layer_id, bool) or not 0 <= layer_id < self.num_layers:
            raise ModelConfigError(
                f"{self.name}: layer {layer_id!r} does not exist; layers are 0..{self.num_layers - 1}"
            )
        return self.kinds[self.layer_types[layer_id]]

    def window_keys(self, layer_id: int) -> int | None:
        """Keys a query of layer ``layer_id`` attends at most (None = whole context)."""
        return self.layer_kind(layer_id).retained_tokens

    @property
    def swa_attention_layer_ids(self) -> list[int]:
        """Layers a hybrid pool keeps in its SWA sub-pool (SGLang's ``swa_attention_layer_ids``)."""
        return [i for i, k in enumerate(self.layer_types) if self.kinds[k].uses_swa_pool]

    @property
    def full_attention_layer_ids(self) -> list[int]:
        return [i for i, k in enumerate(self.layer_types) if not self.kinds[k].uses_swa_pool]

    @property
    def has_window(self) -> bool:
        return bool(self.swa_attention_layer_ids)


def _fail(where: str, message: str) -> ModelConfigError:
    return ModelConfigError(f"{where}: {message}")


def _positive_int(where: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(where, f"{key} must be a positive integer, got {value!r}")
    return value


def _parse_kind(where: str, name: str, raw: Any) -> LayerKind:
    where = f"{where} kinds.{name}"
    if not isinstance(raw, dict):
        raise _fail(where, f"must be an object, got {type(raw).__name__}")
    unknown = set(raw) - _KIND_KEYS
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_KIND_KEYS)}")
    attention = raw.get("attention")
    if attention not in ATTENTION_KINDS:
        raise _fail(where, f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
    heads = {k: _positive_int(where, k, raw.get(k)) for k in ("num_q_heads", "num_kv_heads", "head_dim")}
    v_head_dim = _positive_int(where, "v_head_dim", raw.get("v_head_dim", heads["head_dim"]))
    if heads["num_q_heads"] % heads["num_kv_heads"]:
        raise _fail(where, f"num_q_heads {heads['num_q_heads']} is not a multiple of num_kv_heads "
                           f"{heads['num_kv_heads']} (grouped-query attention needs whole groups)")
    kind = dict(name=name, attention=attention, v_head_dim=v_head_dim, **heads)
    if attention == "sliding":
        spec = raw.get("window")
        if not isinstance(spec, dict) or not {"field", "convention", "value"} <= set(spec):
            raise _fail(where, "a sliding kind needs window = {field, convention, value} as the model config "
                               "writes it, e.g. "
                               "{\"field\": \"sliding_window\", \"convention\": \"hf\", \"value\": 1024}")
        try:
            window = Window.from_convention(spec["convention"], spec["value"])
        except WindowConventionError as error:
            raise _fail(where, f"window: {error}") from None
        if window.keys is None:
            raise _fail(where, f"window {spec['value']!r} means 'no window'; use attention \"full\" instead")
        kind.update(window=window, window_field=spec["field"], window_convention=spec["convention"],
                    window_value=spec["value"])
    elif "window" in raw:
        raise _fail(where, f"only sliding kinds carry a window; this kind is {attention!r}")
    if attention == "chunked":
        chunk = raw.get("chunk")
        if not isinstance(chunk, dict) or "value" not in chunk:
            raise _fail(where, "a chunked kind needs chunk = {field, value}, e.g. attention_chunk_size 8192")
        kind.update(chunk_size=_positive_int(where, "chunk.value", chunk["value"]), window_field=chunk.get("field"))
    elif "chunk" in raw:
        raise _fail(where, f"only chunked kinds carry a chunk size; this kind is {attention!r}")
    return LayerKind(**kind)


def _expand_layers(where: str, raw: dict, kinds: dict[str, LayerKind]) -> tuple[str, ...]:
    has_list, has_pattern = "layer_types" in raw, "layer_pattern" in raw
    if has_list == has_pattern:
        raise _fail(where, "give exactly one of layer_types (a list) or layer_pattern ({cycle, overrides})")
    if has_list:
        layers = raw["layer_types"]
        if not isinstance(layers, list) or not layers:
            raise _fail(where, "layer_types must be a non-empty list of kind names")
        if "num_layers" in raw and raw["num_layers"] != len(layers):
            raise _fail(where, f"num_layers {raw['num_layers']!r} but layer_types has {len(layers)} entries")
    else:
        num_layers = _positive_int(where, "num_layers", raw.get("num_layers"))
        pattern = raw["layer_pattern"]
        cycle = pattern.get("cycle") if isinstance(pattern, dict) else None
        if not isinstance(cycle, list) or not cycle:
            raise _fail(where, "layer_pattern.cycle must be a non-empty list of kind names")
        layers = [cycle[i % len(cycle)] for i in range(num_layers)]
        for key, kind in (pattern.get("overrides") or {}).items():
            if not str(key).isdigit() or not 0 <= int(key) < num_layers:
                raise _fail(where, f"layer_pattern.overrides key {key!r} is not a layer id in 0..{num_layers - 1}")
            layers[int(key)] = kind
    unknown = sorted({k for k in layers if k not in kinds})
    if unknown:
        raise _fail(where, f"layers use kinds {unknown} that 'kinds' does not define (defined: {sorted(kinds)})")
    return tuple(layers)


def parse_model(raw: Any, where: str = "model spec", expected_name: str | None = None) -> ModelSpec:
    """Validate one model description (the parsed JSON) and build its :class:`ModelSpec`."""
    if not isinstance(raw, dict):
        raise _fail(where, f"must be a JSON object, got {type(raw).__name__}")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(where, f"name must be lower case words joined by dashes (e.g. gemma4-31b), got {name!r}")
    if expected_name is not None and name != expected_name:
        raise _fail(where, f"name {name!r} differs from the file stem {expected_name!r}; they must match")
    for key in ("display_name", "hf_repo", "architecture"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(where, f"{key} must be a non-empty string")
    if raw.get("dtype") not in DTYPE_BYTES:
        raise _fail(where, f"dtype must be one of {sorted(DTYPE_BYTES)}, got {raw.get('dtype')!r}")
    if not isinstance(raw.get("sglang_hybrid_swa_pool"), bool):
        raise _fail(where, "sglang_hybrid_swa_pool must be true or false (does SGLang give it an SWAKVPool?)")
    raw_kinds = raw.get("kinds")
    if not isinstance(raw_kinds, dict) or not raw_kinds:
        raise _fail(where, "kinds must be a non-empty object of layer kinds")
    kinds = {name_: _parse_kind(where, name_, k) for name_, k in raw_kinds.items()}
    layers = _expand_layers(where, raw, kinds)
    unused = sorted(set(kinds) - set(layers))
    if unused:
        raise _fail(where, f"kinds {unused} are defined but no layer uses them")
    sources = raw.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) and v for v in sources.values()):
        raise _fail(where, "sources must map each figure to where it came from")
    missing = [k for k in ("num_layers", "layer_pattern" if "layer_pattern" in raw else "layer_types", "dtype",
                           "sglang_hybrid_swa_pool") if k not in sources]
    missing += [f"kinds.{k}" for k in kinds if not any(s.startswith(f"kinds.{k}") for s in sources)]
    if missing:
        raise _fail(where, f"sources lack an entry for {missing}: every figure needs its origin")
    spec = ModelSpec(
        name=name, display_name=raw["display_name"], hf_repo=raw["hf_repo"], architecture=raw["architecture"],
        dtype=raw["dtype"], kinds=kinds, layer_types=layers,
        sglang_hybrid_swa_pool=raw["sglang_hybrid_swa_pool"], sources=dict(sources),
        unverified=tuple(raw.get("unverified", ())), notes=tuple(raw.get("notes", ())),
    )
    if spec.sglang_hybrid_swa_pool and not spec.has_window:
        raise _fail(where, "sglang_hybrid_swa_pool is true but no layer is sliding or chunked")
    return spec


def list_models(directory: Path | None = None) -> list[str]:
    """Names of the model specs shipped in ``data/models`` (file stems, sorted)."""
    return sorted(p.stem for p in (directory or MODELS_DIR).glob("*.json"))


def _load_path(path: Path) -> ModelSpec:
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise _fail(str(path), f"not valid JSON: {error}") from None
    spec = parse_model(raw, where=str(path), expected_name=path.stem)
    object.__setattr__(spec, "path", path)
    return spec


def load_model(name: str, directory: Path | None = None) -> ModelSpec:
    """Load and validate ``data/models/<name>.json``; unknown names list the known ones."""
    path = (directory or MODELS_DIR) / f"{name}.json"
    if not isinstance(name, str) or "/" in name or not path.is_file():
        known = ", ".join(list_models(directory)) or "(none)"
        raise ModelConfigError(f"unknown model {name!r}; known models: {known}")
    return _load_path(path)


def load_all(directory: Path | None = None) -> list[ModelSpec]:
    return [load_model(n, directory) for n in list_models(directory)]
