"""Which attention backend vLLM 0.34 picks on ROCm for one kind of layer, and why it rejects the others.

Mirrors ``vllm/platforms/rocm.py``: ``_get_backend_priorities`` (the order tried) and
``RocmPlatform.get_attn_backend_cls`` (an ``--attention-backend`` that fails validation stops start-up; else the
first valid backend in priority order wins), with each backend's ``AttentionBackend.validate_configuration``
(``vllm/v1/attention/backend.py``) reduced to the checks a dense decoder layer can fail: head size, model dtype,
KV-cache dtype, block size, attention sinks, multimodal prefix attention, sliding window.

Where vLLM asks the machine (aiter installed, CDNA 3 or newer), the kit assumes a ROCm image with aiter on
gfx942 / gfx950 and says so in the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.errors import UsageError
from swa_kit.launch.vllm_args import VLLM_BACKENDS


@dataclass(frozen=True)
class BackendCaps:
    """What one backend class declares (its ``supported_*`` lists and ``supports_*`` class methods)."""

    name: str
    source: str
    dtypes: tuple[str, ...]
    head_sizes: tuple[int, ...] | None  # None: any head size >= min_head_size
    min_head_size: int
    block_sizes: tuple[int, ...]  # kernel block sizes; "multiple of" when multiple_of
    multiple_of: bool
    sinks: bool
    mm_prefix: bool
    sliding_window: bool
    preferred_block_size: int | None  # get_preferred_block_size override (None: the base rule)

    def supports_block_size(self, block_size: int) -> bool:
        """``AttentionBackend.supports_block_size``: a multiple of some kernel block size."""
        return any(block_size % size == 0 for size in self.block_sizes)

    def preferred(self, default: int) -> int:
        """``get_preferred_block_size(default)``: the override, else the default when supported, else the smallest."""
        if self.preferred_block_size is not None:
            return self.preferred_block_size
        return default if self.supports_block_size(default) else min(self.block_sizes)


_HALF = ("float16", "bfloat16")
CAPS = {caps.name: caps for caps in (
    BackendCaps("ROCM_ATTN", "vllm/v1/attention/backends/rocm_attn.py RocmAttentionBackend", _HALF + ("float32",),
                (32, 64, 80, 96, 128, 160, 192, 224, 256), 0, (16,), True, sinks=False, mm_prefix=False,
                sliding_window=True, preferred_block_size=16),
    BackendCaps("ROCM_AITER_FA", "vllm/v1/attention/backends/rocm_aiter_fa.py AiterFlashAttentionBackend", _HALF,
                (64, 128, 256), 0, (16, 32), False, sinks=True, mm_prefix=False, sliding_window=True,
                preferred_block_size=None),
    BackendCaps("ROCM_AITER_UNIFIED_ATTN",
                "vllm/v1/attention/backends/rocm_aiter_unified_attn.py RocmAiterUnifiedAttentionBackend", _HALF,
                None, 32, (16,), True, sinks=True, mm_prefix=False, sliding_window=True, preferred_block_size=64),
    BackendCaps("TRITON_ATTN", "vllm/v1/attention/backends/triton_attn.py TritonAttentionBackend",
                _HALF + ("float32",), None, 32, (16,), True, sinks=True, mm_prefix=True, sliding_window=True,
                preferred_block_size=None),
)}
assert tuple(CAPS) == VLLM_BACKENDS
#: ``CacheConfig.DEFAULT_BLOCK_SIZE`` (vllm/config/cache.py): the block size layers are built with when unset.
DEFAULT_BLOCK_SIZE = 64


@dataclass(frozen=True)
class LayerQuery:
    """What the selector is asked for one kind of layer (``AttentionSelectorConfig``, vllm/v1/attention/selector.py)."""

    head_size: int
    dtype: str
    block_size: int
    has_sink: bool
    use_mm_prefix: bool
    has_sliding_window: bool


def rejections(caps: BackendCaps, query: LayerQuery) -> list[str]:
    """vLLM's reasons, in its words, why ``caps`` cannot serve ``query`` (empty: it can)."""
    reasons = []
    head_ok = query.head_size in caps.head_sizes if caps.head_sizes else query.head_size >= caps.min_head_size
    if not head_ok:
        reasons.append("head_size not supported")
    if query.dtype not in caps.dtypes:
        reasons.append("dtype not supported")
    if not caps.supports_block_size(query.block_size):
        reasons.append("block_size not supported")
    if query.use_mm_prefix and not caps.mm_prefix:
        reasons.append("partial multimodal token full attention not supported")
    if query.has_sink and not caps.sinks:
        reasons.append("attention sinks not supported")
    if query.has_sliding_window and not caps.sliding_window:
        reasons.append("sliding window not supported")
    return reasons


def priorities(env: dict[str, bool]) -> list[str]:
    """``_get_backend_priorities`` for a non-MLA, non-sparse model without a KV connector, on CDNA with aiter.

    ROCM_AITER_FA needs ``VLLM_ROCM_USE_AITER`` and ``VLLM_ROCM_USE_AITER_MHA`` (``rocm_aiter_ops.is_mha_enabled``);
    ROCM_AITER_UNIFIED_ATTN needs only aiter installed (``is_aiter_found_and_supported``), no variable.
    """
    order = ["ROCM_ATTN"]
    if env["VLLM_ROCM_USE_AITER"] and env["VLLM_ROCM_USE_AITER_MHA"]:
        order.append("ROCM_AITER_FA")
    return order + ["ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN"]


@dataclass(frozen=True)
class Selection:
    backend: str
    how: str  # "--attention-backend" or "priority"
    rejected: dict[str, list[str]]  # backends tried before it (or the one named), with vLLM's reasons

    @property
    def rejected_text(self) -> str:
        """The rejected backends and vLLM's reasons, as a line: ``ROCM_ATTN: head_size not supported``."""
        return "; ".join(f"{name}: {', '.join(reasons)}" for name, reasons in self.rejected.items())


#: Architectures whose model-config hook names the backend (vllm/model_executor/models/config.py,
#: ``MODELS_CONFIG_MAP``: ``Gemma4Config``).
GEMMA4_ARCHITECTURES = ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration")
#: Gemma4Config.verify_and_update_config: head sizes differ between layer kinds and FA4 is not available (ROCm builds
#: no vllm_flash_attn), so every layer gets TRITON_ATTN.
GEMMA4_HOOK = "Gemma4Config: head sizes differ, no FA4 on ROCm"


def model_backend(architecture: str, head_sizes: set[int], requested: str | None) -> tuple[str | None, str]:
    """The backend named before selection, and by what: ``--attention-backend``, or Gemma-4's config hook when the
    flag is unset and its layer kinds' head sizes differ; (None, "priority") leaves it to the priority order."""
    if requested is not None:
        return requested, "--attention-backend"
    if architecture in GEMMA4_ARCHITECTURES and len(head_sizes) > 1:
        return "TRITON_ATTN", GEMMA4_HOOK
    return None, "priority"


def select(query: LayerQuery, env: dict[str, bool], requested: str | None,
           how: str = "--attention-backend") -> Selection:
    """``RocmPlatform.get_attn_backend_cls``; a named backend that fails raises as vLLM does at start-up.

    ``how`` says what named ``requested`` (the flag, or a model's config hook: :func:`model_backend`)."""
    if requested is not None:
        reasons = rejections(CAPS[requested], query)
        if reasons:
            raise UsageError(f"vLLM refuses --attention-backend {requested} at start-up for this layer "
                             f"(RocmPlatform.get_attn_backend_cls: 'Selected backend ... is not valid'): "
                             f"{', '.join(reasons)}; way out: drop --attention-backend, or name one of "
                             f"{', '.join(b for b in VLLM_BACKENDS if not rejections(CAPS[b], query))}")
        return Selection(requested, how, {})
    rejected: dict[str, list[str]] = {}
    for name in priorities(env):
        reasons = rejections(CAPS[name], query)
        if not reasons:
            return Selection(name, "priority", rejected)
        rejected[name] = reasons
    raise UsageError(f"vLLM finds no valid attention backend for this layer: "
                     f"{Selection('', 'priority', rejected).rejected_text}")


def block_size(backends: list[str], given: int | None) -> int:
    """``Platform.update_block_size_for_backend``: the user's --block-size, else the backends' preference.

    One backend: its ``get_preferred_block_size(64)``; several: 64 when all accept it
    (``_preferred_block_size_for_backends``).
    """
    if given is not None:
        return given
    unique = list(dict.fromkeys(backends))
    if len(unique) == 1:
        return CAPS[unique[0]].preferred(DEFAULT_BLOCK_SIZE)
    if all(CAPS[b].supports_block_size(DEFAULT_BLOCK_SIZE) for b in unique):
        return DEFAULT_BLOCK_SIZE
    raise UsageError(f"backends {unique} do not all accept block size {DEFAULT_BLOCK_SIZE}: vLLM then searches "
                     "their common kernel block sizes, which the kit does not model; pass --block-size")
