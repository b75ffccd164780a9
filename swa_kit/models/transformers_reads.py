"""What the config parser reads from transformers' config object, recorded so a known config needs no transformers.

Building a config through transformers imports transformers and, through it, torch: two to three seconds, more
than a whole audit may take. The parser (:mod:`swa_kit.models.configs`) reads a few fields of that object
(:data:`TEXT_FIELDS`, :data:`LAYER_FIELDS`); once read, they are kept per config and transformers version:

- for the bundled models, in ``data/transformers_reads.json`` (tests/test_transformers_reads.py checks each
  layout read from it against the one read through transformers, and rewrites it with ``SWA_KIT_WRITE_DOCS=1``);
- for any other config, in the user's cache (``$SWA_KIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/swa-kit`` or
  ``~/.cache/swa-kit``), written after the first read.

A record is used only for the transformers version it was read with, so a new transformers is read afresh.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from swa_kit.resources import data_path

#: Fields of the text config the parser reads (getattr, None when absent), and of each per-layer config.
TEXT_FIELDS = ("num_hidden_layers", "layer_types", "sliding_window", "attention_chunk_size", "is_heterogeneous",
               "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "v_head_dim", "dtype")
LAYER_FIELDS = ("num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "v_head_dim")
#: Changes whenever the fields read change, so a record of other fields is never taken for one of these.
SCHEMA = hashlib.sha256(repr((TEXT_FIELDS, LAYER_FIELDS)).encode()).hexdigest()[:12]
SHIPPED = data_path("transformers_reads.json")

Reader = Callable[[dict, str], tuple[Any, str]]


def transformers_version() -> str | None:
    """The installed transformers' version, without importing it (None: not installed)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def config_key(raw: dict) -> str:
    """The record's key: the config's content, however its file is laid out."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


class Unrecordable(Exception):
    """A field JSON would not give back as the parser reads it: such a config is read afresh each time."""


def _plain(value: Any) -> Any:
    """A field as JSON keeps it; a dtype (torch.bfloat16) by its name, which is all the parser reads of it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value)
    raise Unrecordable(f"{type(value).__name__} value")


def _field(obj: Any, name: str) -> Any:
    try:
        value = getattr(obj, name, None)
    except Exception:  # noqa: BLE001  a heterogeneous config refuses its per-layer fields globally; the parser
        return None  # then reads them per layer only
    return _plain(value)


def record(config: Any, text: Any, built_by: str) -> dict[str, Any]:
    """What the parser reads from transformers' ``config`` and its text config ``text``."""
    per_layer = getattr(text, "per_layer_config", None)
    layers = None
    if per_layer is not None:
        layers = [{f: _field(per_layer[i], f) for f in LAYER_FIELDS} for i in range(len(per_layer))]
    return {"built_by": built_by, "dtype": _field(config, "dtype"),
            "text": {f: _field(text, f) for f in TEXT_FIELDS}, "per_layer_config": layers}


def replay(kept: dict[str, Any]) -> tuple[Any, str]:
    """A stand-in for transformers' config object holding the recorded fields, and which class built it."""
    layers = kept["per_layer_config"]
    text = SimpleNamespace(**kept["text"],
                           per_layer_config=None if layers is None else [SimpleNamespace(**lay) for lay in layers])
    config = SimpleNamespace(dtype=kept["dtype"], get_text_config=lambda decoder=True: text)
    return config, kept["built_by"]


def cache_dir() -> Path:
    base = os.environ.get("SWA_KIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "swa-kit")
    return Path(base) / f"transformers-{transformers_version()}-{SCHEMA}"


@functools.cache
def shipped() -> dict[str, Any]:
    """The bundled models' records, or {} when they were read with another transformers or another schema."""
    kept = json.loads(SHIPPED.read_text())
    same = kept.get("transformers") == transformers_version() and kept.get("schema") == SCHEMA
    return kept["configs"] if same else {}


def _cached(key: str) -> dict[str, Any] | None:
    try:
        kept = json.loads((cache_dir() / f"{key}.json").read_text())
    except (OSError, ValueError):  # none yet, or a damaged file: read the config afresh
        return None
    return kept if _well_formed(kept) else None


def _well_formed(kept: Any) -> bool:
    """A record as :func:`record` writes it (a damaged or foreign file is read afresh, never trusted)."""
    if not isinstance(kept, dict) or set(kept) != {"built_by", "dtype", "text", "per_layer_config"}:
        return False
    layers = kept["per_layer_config"]
    fields_ok = isinstance(kept["text"], dict) and set(kept["text"]) == set(TEXT_FIELDS)
    layers_ok = layers is None or isinstance(layers, list) and all(
        isinstance(lay, dict) and set(lay) == set(LAYER_FIELDS) for lay in layers)
    return isinstance(kept["built_by"], str) and fields_ok and layers_ok


def _keep(key: str, kept: dict[str, Any]) -> None:
    folder = cache_dir()
    with contextlib.suppress(OSError):  # a read-only home: the answer is the same, only the next run is slower
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f"{key}.json.{os.getpid()}"
        part.write_text(json.dumps(kept))
        os.replace(part, folder / f"{key}.json")  # whole or absent, whoever reads it meanwhile


def read_config(raw: dict, where: str, through_transformers: Reader, text_of: Callable[[Any], Any]) -> tuple[Any, str]:
    """transformers' config object for ``raw`` (or the record of what the parser reads from it), and its origin."""
    key = config_key(raw)
    kept = shipped().get(key) or _cached(key)
    if kept is not None:
        return replay(kept)
    config, built_by = through_transformers(raw, where)
    with contextlib.suppress(Unrecordable):  # exotic field values: no record, the parser reads transformers' object
        _keep(key, record(config, text_of(config), built_by))
    return config, built_by
