"""The registry of attention paths, each with what it declares it can do.

Dispatch, the probe and the benchmarks read only these declarations: a path that
does not honour a window says so here, and the guards in :mod:`swa_kit.engine.routing`
refuse to route a sliding layer to it. Each path module registers itself at import;
``_PATH_MODULES`` lists them so the registry is complete on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import BackendUnavailableError, UsageError
from swa_kit.tiers import TIERS

_PATH_MODULES = (
    "swa_kit.attention.reference",
    "swa_kit.attention.torch_paths",
    "swa_kit.attention.sglang_emulated",
    "swa_kit.attention.aiter.triton_kernels",
    "swa_kit.attention.aiter.emulated",
    "swa_kit.attention.aiter.native",
    "swa_kit.attention.kit.path",
)


@dataclass(frozen=True)
class Backend:
    """One attention path and its declared capabilities."""

    name: str
    tier: str
    description: str
    modes: frozenset[str]
    honours_window: bool
    convention: str | None  # the window convention of run()'s window_arg; None: takes no window
    kv_layout: str  # "token" (indptr/indices, page size 1) or "block_table"
    devices: frozenset[str]  # of "cpu", "cuda", "rocm"
    available: Callable[[], tuple[bool, str]]
    run: Callable[[AttentionBatch, Any], AttentionResult]

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise UsageError(f"backend {self.name!r}: unknown tier {self.tier!r}; one of {sorted(TIERS)}")


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add a path to the registry (each path module calls this once at import)."""
    _REGISTRY[backend.name] = backend
    return backend


def _load() -> dict[str, Backend]:
    for module in _PATH_MODULES:
        importlib.import_module(module)
    return _REGISTRY


def all_backends() -> list[Backend]:
    """Every registered path, by name (stable whichever module happened to be imported first)."""
    registry = _load()
    return [registry[name] for name in sorted(registry)]


def get_backend(name: str) -> Backend:
    """The path called ``name``; the error lists the known ones."""
    registry = _load()
    if name not in registry:
        raise BackendUnavailableError(f"unknown attention path {name!r}; known: {', '.join(registry)}")
    return registry[name]


def run_path(name: str, batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """Run path ``name`` on ``batch`` with ``window_arg`` in that path's own convention."""
    backend = get_backend(name)
    ok, reason = backend.available()
    if not ok:
        raise BackendUnavailableError(f"path {name!r} cannot run here: {reason}")
    return backend.run(batch, window_arg)
