"""The table of attention paths: what each declares it can do, and where its code lives.

Dispatch, the probe and the benchmarks read only these declarations: a path that does not
honour a window says so here, and the guards in :mod:`swa_kit.engine.routing` refuse to route a
sliding layer to it. Each row names its two functions as ``"module:function"``; the module is
imported only when the path's :meth:`~AttentionPath.available` or :meth:`~AttentionPath.run` is
called, so listing or choosing paths loads no kernel (nor triton, nor aiter).
"""

from __future__ import annotations

import pkgutil
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swa_kit.errors import PathUnavailableError, UsageError
from swa_kit.tiers import TIERS

if TYPE_CHECKING:  # the path table plans without torch; a batch exists only where one runs
    from swa_kit.attention.batch import AttentionBatch, AttentionResult

FORWARD_MODES = ("prefill", "extend", "decode", "verify", "tree")
#: Forward modes :mod:`swa_kit.measure.probe` measures a path in (kept here, torch-free, for the CLI's parser).
PROBE_MODES = ("prefill", "extend", "decode", "verify")

_FUNCTION = re.compile(r"swa_kit\.attention(\.\w+)+:\w+")


@dataclass(frozen=True)
class AttentionPath:
    """One attention path: its declared capabilities and the functions that implement it."""

    name: str
    tier: str
    description: str
    modes: frozenset[str]
    honours_window: bool
    convention: str | None  # the window convention of run()'s window_arg; None: takes no window
    kv_layout: str  # "token" (indptr/indices, page size 1) or "block_table"
    devices: frozenset[str]  # of "cpu", "cuda", "rocm"
    availability: str  # "module:function" -> (ok, reason)
    implementation: str  # "module:function" (batch, window_arg) -> AttentionResult

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise UsageError(f"path {self.name!r}: unknown tier {self.tier!r}; one of {sorted(TIERS)}")
        for field, value in (("availability", self.availability), ("implementation", self.implementation)):
            if not _FUNCTION.fullmatch(value):
                raise UsageError(f"path {self.name!r}: {field} {value!r} is not "
                                 "'swa_kit.attention.<module>:<function>'")

    def available(self) -> tuple[bool, str]:
        """Whether the path runs here, and why (imports the module that knows)."""
        return pkgutil.resolve_name(self.availability)()

    def run(self, batch: AttentionBatch, window_arg: Any) -> AttentionResult:
        """Run the implementation on ``batch`` with ``window_arg`` in this path's convention (imports it)."""
        return pkgutil.resolve_name(self.implementation)(batch, window_arg)


_ANY_DEVICE = frozenset({"cpu", "cuda", "rocm"})
_ROCM = frozenset({"rocm"})
# The native ops run where aiter's real import works; the loader answers that without importing a kernel.
_NATIVE_STATUS = "swa_kit.attention.aiter.loader:native_status"

_ROWS = (
    AttentionPath(
        name="reference",
        tier="reference",
        description="exact float64 paged attention (the oracle)",
        modes=frozenset(FORWARD_MODES),
        honours_window=True,
        convention="hf",  # the kit's own unit: keys attended, counting the query
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.reference:available",
        implementation="swa_kit.attention.reference:reference_attention",
    ),
    AttentionPath(
        name="torch_sdpa",
        tier="torch",
        description="torch SDPA with an explicit boolean window mask over gathered paged KV",
        modes=frozenset(FORWARD_MODES),
        honours_window=True,
        convention="hf",
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.torch_paths:sdpa_available",
        implementation="swa_kit.attention.torch_paths:sdpa_attention",
    ),
    AttentionPath(
        name="flex_attention",
        tier="torch",
        description="FlexAttention with a sliding mask_mod / BlockMask over gathered paged KV",
        modes=frozenset(FORWARD_MODES),
        honours_window=True,
        convention="flex",
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.torch_paths:flex_available",
        implementation="swa_kit.attention.torch_paths:flex_attention",
    ),
    AttentionPath(
        name="sglang_extend_attention",
        tier="emulated",
        description="SGLang's Triton extend_attention_fwd as aiter's legacy target verify calls it (no window)",
        modes=frozenset({"verify", "tree"}),
        honours_window=False,
        convention=None,
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.sglang_emulated:available",
        implementation="swa_kit.attention.sglang_emulated:extend_attention_fwd",
    ),
    AttentionPath(
        name="aiter_triton_unified",
        tier="aiter-triton-interpreter",  # per result: aiter-triton-gpu when the batch is on a GPU
        description="aiter's Triton unified_attention kernels (2D / 3D split-KV), launched by the kit",
        modes=frozenset({"prefill", "extend", "decode", "verify"}),
        honours_window=True,
        convention="aiter_unified",
        kv_layout="block_table",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.aiter.triton_kernels:available",
        implementation="swa_kit.attention.aiter.triton_kernels:run_unified",
    ),
    AttentionPath(
        name="aiter_emulated_paged_ragged",
        tier="emulated",
        description="emulated aiter paged_attention_ragged (decode; no window argument: attends everything)",
        modes=frozenset({"decode"}),
        honours_window=False,
        convention=None,
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.aiter.emulated:available",
        implementation="swa_kit.attention.aiter.emulated:run_paged_ragged",
    ),
    AttentionPath(
        name="aiter_emulated_mha_batch_prefill",
        tier="emulated",
        description="emulated aiter CK mha_batch_prefill_func (page size 1, FA window convention)",
        modes=frozenset({"prefill", "extend"}),
        honours_window=True,
        convention="aiter_ck",
        kv_layout="token",
        devices=_ANY_DEVICE,
        availability="swa_kit.attention.aiter.emulated:available",
        implementation="swa_kit.attention.aiter.emulated:run_mha_batch_prefill",
    ),
    AttentionPath(
        name="aiter_native_unified",
        tier="aiter-native",
        description="aiter's unified_attention (Triton) as SGLang's aiter backend calls it",
        modes=frozenset({"prefill", "extend", "decode", "verify"}),
        honours_window=True,
        convention="aiter_unified",
        kv_layout="block_table",
        devices=_ROCM,
        availability=_NATIVE_STATUS,
        implementation="swa_kit.attention.aiter.native:run_unified",
    ),
    AttentionPath(
        name="aiter_native_mha_batch_prefill",
        tier="aiter-native",
        description="aiter's CK mha_batch_prefill_func as SGLang's aiter backend calls it (page size 1)",
        modes=frozenset({"prefill", "extend"}),
        honours_window=True,
        convention="aiter_ck",
        kv_layout="token",
        devices=_ROCM,
        availability=_NATIVE_STATUS,
        implementation="swa_kit.attention.aiter.native:run_mha_batch_prefill",
    ),
    AttentionPath(
        name="aiter_native_paged_ragged",
        tier="aiter-native",
        description="aiter's paged_attention_ragged decode (no window argument) as SGLang calls it",
        modes=frozenset({"decode"}),
        honours_window=False,
        convention=None,
        kv_layout="token",
        devices=_ROCM,
        availability=_NATIVE_STATUS,
        implementation="swa_kit.attention.aiter.native:run_paged_ragged",
    ),
    AttentionPath(
        name="kit_triton_swa",
        tier="kit-triton",
        description="the kit's Triton sliding-window kernel: decode and chain verify (split window, GQA groups, paged)",
        modes=frozenset({"decode", "verify"}),
        honours_window=True,
        convention="hf",  # the kit's own unit: keys attended, counting the query
        kv_layout="token",  # page size 1 via kv_indices; larger pages via AttentionBatch.block_table()
        devices=frozenset({"cuda", "rocm"}),
        availability="swa_kit.attention.kit.path:available",
        implementation="swa_kit.attention.kit.path:run_batch",
    ),
)
#: Every path by name, in name order.
PATHS: dict[str, AttentionPath] = {p.name: p for p in sorted(_ROWS, key=lambda p: p.name)}


def all_paths() -> list[AttentionPath]:
    """Every path of the table, by name (imports none of their modules)."""
    return list(PATHS.values())


def get_path(name: str) -> AttentionPath:
    """The path called ``name``; the error lists the known ones."""
    if name not in PATHS:
        raise PathUnavailableError(f"unknown attention path {name!r}; known: {', '.join(PATHS)}")
    return PATHS[name]


def run_path(name: str, batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """Run path ``name`` on ``batch`` with ``window_arg`` in that path's own convention."""
    path = get_path(name)
    ok, reason = path.available()
    if not ok:
        raise PathUnavailableError(f"path {name!r} cannot run here: {reason}")
    return path.run(batch, window_arg)
