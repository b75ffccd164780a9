"""The places in SGLang 0.5.23's attention backends that launch a kernel, and the window argument each passes.

:data:`SITES` are ``AiterAttnBackend``'s call sites that a registered attention path runs;
:data:`DECLARED_SITES` are the ones no path runs here (aiter's SHUFFLE 5D layout, SGLang's own Triton
and trtllm_mha backends), whose keys are read from SGLang's code instead. :mod:`swa_kit.engine.routing` picks one per
(layer, forward mode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swa_kit.attention.paths import AttentionPath, all_paths
from swa_kit.errors import DispatchGuardError
from swa_kit.window import to_keys


# These two copy SGLang's own expressions on purpose (aiter_backend.py, SGLang 0.5.23): they are
# what the kernels receive, right or wrong. The kit's converters in swa_kit/window.py say what the
# argument *should* be; the planner reads each argument back through them (effective_keys), which is
# how the unified sites' one-key-short shows up in the plan.
#: aiter's CK batch prefill asserts ``head_dim <= 256`` (aiter ops/mha.py mha_batch_prefill_func, amd-aiter 0.1.7;
#: SGLang 0.5.23 aiter_backend.py _forward_extend_unified says so); unified_attention pads the head dim instead.
CK_MAX_HEAD_DIM = 256


def _unified_arg(sws: int) -> tuple[int, int]:
    return (sws - 1, 0) if sws > -1 else (-1, -1)


def _ck_arg(sws: int) -> tuple[int, int]:
    return (sws, -1) if sws > -1 else (-1, -1)


@dataclass(frozen=True)
class CallSite:
    """One place in ``AiterAttnBackend`` that launches attention, and what it passes."""

    name: str
    method: str  # SGLang method that makes the call
    kernel: str  # the entry point called
    paths: tuple[str, ...]  # registered paths that run it, preferred first (native before stand-ins)
    modes: tuple[str, ...]  # kit forward modes the kernel sees at this site
    window_arg: Callable[[int], Any]  # SGLang's expression of the layer's sliding_window_size
    window_expr: str
    swa_page_table: bool  # whether the site swaps in the translated SWA page table for sliding layers
    # Sites no registered path runs (SGLang's Triton backend, aiter's 5D layout): the keys the call
    # attends, read from SGLang's code, stand in for a path's declared convention.
    keys_of: Callable[[Any], int | None] | None = None
    source: str = "sglang 0.5.23 layers/attention/aiter_backend.py"
    max_head_dim: int | None = None  # the kernel asserts head_dim <= this (None: no cap the kit knows)
    tree_rows: str = ""  # how an EAGLE tree's window goes wrong here ("": each draft attends its own window)


SITES: dict[str, CallSite] = {
    s.name: s
    for s in (
        CallSite("extend.ck", "forward_extend", "mha_batch_prefill_func",
                 ("aiter_native_mha_batch_prefill", "aiter_emulated_mha_batch_prefill"), ("prefill", "extend"),
                 _ck_arg, "(sws, -1)", True, max_head_dim=CK_MAX_HEAD_DIM),
        CallSite("extend.unified", "_forward_extend_unified", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("prefill", "extend"),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("decode.unified", "forward_decode", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("decode",),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("decode.paged", "forward_decode", "paged_attention_ragged",
                 ("aiter_native_paged_ragged", "aiter_emulated_paged_ragged"), ("decode",),
                 lambda sws: None, "none (no window parameter)", False),
        CallSite("verify.unified", "forward_extend (target_verify)", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("verify",),
                 _unified_arg, "(sws - 1, 0)", True),
        CallSite("verify.legacy", "forward_extend (target_verify)", "extend_attention_fwd",
                 ("sglang_extend_attention",), ("verify", "tree"),
                 lambda sws: None, "none (not passed)", False),
        CallSite("draft_extend.unified", "forward_extend (draft_extend_v2)", "unified_attention",
                 ("aiter_native_unified", "aiter_triton_unified"), ("extend",),
                 _unified_arg, "(sws - 1, 0)", True),
    )
}


def _plus_one(sws: Any) -> int | None:
    return None if sws is None or sws < 0 else sws + 1


def _newest(sws: Any) -> int | None:
    return None if sws is None or sws <= 0 else sws


def _window_left(window_left: Any) -> int | None:
    return to_keys("flashinfer", window_left)


def _gluon_keys(sliding_window: Any) -> int | None:
    # pa_decode_gluon keeps key k of a sequence of context_length L when L - sliding_window + 1 <= k < L, and
    # SGLang passes seq_lens (which count the new token) as L: sliding_window - 1 keys, the query's own among them.
    return None if sliding_window is None or sliding_window <= 0 else sliding_window - 1


_TRITON = "sglang 0.5.23 layers/attention/triton_backend.py"
# sglang 0.5.8.post1 (the last release before the PR) already passes window_left at every kernel call; the PR added
# the SWA page table (_get_layer_page_table), so before it sliding layers index the SWA pool with full-pool slot ids.
_BEFORE_18970 = ("before SGLang PR #18970 (sglang 0.5.8.post1 layers/attention/trtllm_mha_backend.py forward_decode, "
                 "forward_extend): window_left=layer.sliding_window_size, but one page table of full-pool slot ids")
_UTILS = "sglang 0.5.23 layers/attention/aiter_utils.py"
_TRTLLM = "sglang 0.5.23 layers/attention/trtllm_mha_backend.py"
# Not in the amd-aiter 0.1.7 wheel; read at ROCm/aiter commit e4048607 (August 2026).
_GLUON = "aiter ops/triton/gluon/pa_decode_gluon.py"
#: Call sites no registered path runs: aiter's SHUFFLE 5D layout, SGLang's own Triton and trtllm_mha backends.
DECLARED_SITES: dict[str, CallSite] = {
    s.name: s
    for s in (
        CallSite("decode.gluon_5d", "forward_decode_vectorized_5d", "pa_decode_gluon", (), ("decode",),
                 lambda sws: sws if sws > -1 else 0, "sliding_window=sws (0 on full layers)", True,
                 _gluon_keys, f"{_UTILS} forward_decode_vectorized_5d (context_lengths=seq_lens); {_GLUON} "
                              "paged_attention_decode_sliding_window: mask k >= context_length - SLIDING_WINDOW + 1"),
        CallSite("extend.ck_5d", "forward_extend_vectorized_5d", "mha_batch_prefill_func", (), ("prefill", "extend"),
                 _ck_arg, "(sws, -1)", True, lambda arg: _plus_one(arg[0]), f"{_UTILS} forward_extend_vectorized_5d",
                 CK_MAX_HEAD_DIM),
        CallSite("triton.decode", "forward_decode", "decode_attention_fwd", (), ("decode",),
                 lambda sws: sws, "window_kv_indices: newest min(seq_len, the runner's sliding_window_size) keys",
                 True, _newest, f"{_TRITON} update_sliding_window_buffer (seq_len counts the query)"),
        CallSite("triton.extend", "forward_extend", "extend_attention_fwd", (), ("prefill", "extend", "verify", "tree"),
                 lambda sws: sws, "sliding_window_size=sws (mask q <= k + sws)", True, _plus_one,
                 f"{_TRITON} forward_extend; sglang/kernels/ops/attention/extend_attention.py",
                 tree_rows="bounds the window by each draft's row in the flattened tree, not its depth "
                           "(extend_attention.py _fwd_kernel: q = prefix + row): once the context fills the window, a "
                           "draft k rows past its depth (one after a sibling's branch) loses its k oldest in-window "
                           "keys, and verify scores it on fewer keys than the model attends"),
        # FlashInfer's TRT-LLM kernels read window_left in FlashInfer's convention (keys left of the query); target
        # verify and draft extend (v2) run the decode kernel from forward_extend (uses_decode_kernel).
        CallSite("trtllm_mha.decode", "forward_decode", "trtllm_batch_decode_with_kv_cache", (),
                 ("decode", "verify", "tree", "extend"), lambda sws: sws, "window_left=sws", True, _window_left,
                 f"{_TRTLLM} forward_decode, forward_extend (uses_decode_kernel), _get_layer_page_table"),
        CallSite("trtllm_mha.extend", "forward_extend", "trtllm_batch_context_with_kv_cache", (), ("prefill", "extend"),
                 lambda sws: sws, "window_left=sws", True, _window_left, f"{_TRTLLM} forward_extend, "
                 "_get_layer_page_table"),
        *(CallSite(f"{name}.before_18970", method, kernel, (), modes, lambda sws: sws, "window_left=sws", False,
                   _window_left, _BEFORE_18970)
          for name, method, kernel, modes in (
              ("trtllm_mha.decode", "forward_decode", "trtllm_batch_decode_with_kv_cache", ("decode", "verify", "tree",
                                                                                          "extend")),
              ("trtllm_mha.extend", "forward_extend", "trtllm_batch_context_with_kv_cache", ("prefill", "extend")))),
    )
}


def triton_rail(site: CallSite, sws: int, rail: int | None, mode: str) -> tuple[Any, int | None]:
    """The window argument and keys of SGLang's Triton ``site`` for a layer of ``sliding_window_size`` ``sws``.

    A window layer reads one rail the runner builds with its own ``sliding_window_size`` (``rail``;
    ``update_sliding_window_buffer``: the newest ``min(len, rail)`` slots), not the layer's. Decode takes no window
    parameter: its argument here is the rail's window (-1: the full rail), and it attends that many keys. Extend
    passes ``sliding_window_size=sws`` (``sws + 1`` keys); over a cached prefix (extend, verify) its first query
    sees only the rail's prefix keys, so at most ``rail + 1``.
    """
    if site.name == "triton.decode":
        arg = rail if sws > -1 and rail is not None else -1
        return arg, _newest(arg)
    keys = _plus_one(sws)
    if mode != "prefill" and keys is not None and rail is not None and rail > 0:
        keys = min(keys, rail + 1)
    return sws, keys


def site_path(site: CallSite) -> AttentionPath:
    """The registered path that runs ``site`` here: the first of ``site.paths`` available, else the last.

    The last is never asked: it is the answer either way, and asking could load its kernels (aiter's Triton
    ones in the interpreter) only to plan a route.
    """
    known = {path.name: path for path in all_paths()}
    paths = [known[name] for name in site.paths if name in known]
    if not paths:
        raise DispatchGuardError(
            f"no registered path runs {site.kernel} ({site.name}); expected one of {', '.join(site.paths)}"
        )
    return next((path for path in paths[:-1] if path.available()[0]), paths[-1])
