"""The kernel and window argument each vLLM 0.34 ROCm backend uses per forward mode, and the keys it attends.

Every ROCm backend's ``__init__`` stores a causal window of W keys as FlashAttention's ``(W - 1, 0)`` (``(-1, -1)``
when off) and converts it back at the call that needs W. The keys attended are read from the argument through the
kit's conventions (:mod:`swa_kit.window`), never assumed: a route that passed the stored pair to a kernel wanting
W would show up here as one key short.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from swa_kit.vllm_versions import VLLM_VERSION, has_fix
from swa_kit.window import from_keys, to_keys

MODES = ("prefill", "decode", "verify")  # verify: a decode step of several query tokens (speculative decoding)


@dataclass(frozen=True)
class VllmRoute:
    mode: str
    kernel: str
    window_arg: Any  # as passed (None: no window argument)
    convention: str | None  # the kit's name for the argument's convention
    keys: int | None  # keys one query attends at most (None: the whole context)
    raises: str | None = None  # vLLM's own assertion that stops this route, if any
    source: str = ""
    wrong: str | None = None  # how this route computes a wrong answer at the vLLM version planned, if it does


def stored_window(keys: int | None) -> tuple[int, int]:
    """What the backends' ``__init__`` keep: ``(sliding_window - 1, 0)``, ``(-1, -1)`` when off."""
    return (-1, -1) if keys is None else from_keys("flash_attn", keys)


def _pair(mode: str, kernel: str, stored: tuple[int, int], source: str, raises: str | None = None) -> VllmRoute:
    keys = to_keys("aiter_unified", stored)  # FlashAttention pair, kernel keeps q - k <= left
    return VllmRoute(mode, kernel, stored, "flash_attn (W - 1, 0)", keys, raises, source)


def _length(mode: str, kernel: str, stored: tuple[int, int], source: str) -> VllmRoute:
    arg = from_keys("aiter_v1", to_keys("flash_attn", stored))  # `1 + self.sliding_window[0]`; 0 = off
    return VllmRoute(mode, kernel, arg, "window length W (0 = off)", to_keys("aiter_v1", arg), None, source)


_AITER_FA = "vllm/v1/attention/backends/rocm_aiter_fa.py AiterFlashAttentionImpl.forward"
_SHUFFLE_ASSERT = ("AiterFlashAttentionImpl.forward asserts: 'Shuffle KV cache layout is not supported with sliding "
                   "window, sinks, or speculative decoding (multi-token decode)'")


_ONE_QUERY_TOKEN = ("told max_seqlen_q=1, the decode kernel reads one query token per sequence, so a verify step's "
                    "draft tokens are attended as if they were one (vLLM #31625; PR #32877 routes a multi-token "
                    "decode to unified_attention with its real max_seqlen_q)")


def _aiter_fa(mode: str, stored: tuple[int, int], head_size: int, has_sink: bool, shuffle: bool,
              version: str) -> VllmRoute:
    """ROCM_AITER_FA: CK varlen prefill; decode routed by window, sinks and query length (the paged kernels take
    none of the three) to aiter's Triton ``unified_attention``; single-token SWA decode on a trimmed block table
    to ``paged_attention_v1(sliding_window=W)``. ``before-29234`` and ``before-32877`` undo the window and the
    multi-token routing (:data:`~swa_kit.vllm_versions.REVERTIBLE_FIXES`)."""
    if mode == "prefill":
        return _pair(mode, "aiter flash_attn_varlen_func", stored, _AITER_FA)
    sliding = stored[0] != -1
    if mode == "verify" and not has_fix(version, 32877):  # the single-token decode paths, as they were
        one = _pair(mode, "aiter unified_attention (max_seqlen_q=1)", stored, _AITER_FA) \
            if sliding or has_sink or head_size < 64 else _length(mode, "aiter paged_attention_v1", stored, _AITER_FA)
        return replace(one, wrong=_ONE_QUERY_TOKEN)
    if sliding and mode == "decode" and not has_sink and not has_fix(version, 29234):  # no window argument at all
        return VllmRoute(mode, "aiter paged_attention_v1 (no window argument)", None, None, None, None, _AITER_FA)
    swa_paged = sliding and mode == "decode" and not has_sink and head_size >= 64 and not shuffle
    if (sliding and not swa_paged) or mode == "verify" or has_sink:
        return _pair(mode, "aiter unified_attention", stored, _AITER_FA, _SHUFFLE_ASSERT if shuffle else None)
    if head_size < 64:  # _MIN_HEAD_SIZE_FOR_LL4MI: the ll4mi paged kernel needs head_size >= 64
        return _pair(mode, "aiter unified_attention (max_seqlen_q=1)", stored, _AITER_FA)
    if shuffle:
        return VllmRoute(mode, "aiter paged_attention_common (shuffled KV)", None, None, None, None, _AITER_FA)
    return _length(mode, "aiter paged_attention_v1", stored, _AITER_FA)


def route(backend: str, mode: str, keys: int | None, head_size: int, has_sink: bool, shuffle: bool,
          version: str = VLLM_VERSION) -> VllmRoute:
    """The call ``backend`` makes for a layer attending ``keys`` (None: full) in ``mode``, at vLLM ``version``."""
    stored = stored_window(keys)
    if backend == "ROCM_AITER_FA":
        return _aiter_fa(mode, stored, head_size, has_sink, shuffle, version)
    if backend == "ROCM_ATTN":  # one Triton/HIP entry for every mode; it takes the window length
        return _length(mode, "chunked_prefill_paged_decode", stored,
                       "vllm/v1/attention/backends/rocm_attn.py RocmAttentionImpl.forward")
    if backend == "ROCM_AITER_UNIFIED_ATTN":
        return _pair(mode, "aiter unified_attention", stored,
                     "vllm/v1/attention/backends/rocm_aiter_unified_attn.py RocmAiterUnifiedAttentionImpl.forward")
    return _pair(mode, "vLLM Triton unified_attention", stored,
                 "vllm/v1/attention/backends/triton_attn.py TritonAttentionImpl.forward")
