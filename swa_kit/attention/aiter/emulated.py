"""Emulations of aiter's CK/HIP-only attention ops, for machines without ROCm. Never the real thing.

Each function takes the arguments of the op it emulates, exactly as SGLang passes them (the
builders in :mod:`~swa_kit.attention.aiter.native` produce them), and computes what aiter
documents the op to compute, in float32 like the kernels accumulate. Every result is labelled
tier ``"emulated"``.

* :func:`paged_attention_ragged`: decode over ``kv_indptr``/``kv_page_indices``/
  ``kv_last_page_lens`` pages. The op has no window parameter (it is built with the window
  off), so it attends *every* key of the request: a sliding layer routed here silently gets
  full attention. That is the bug SGLang PR #38756 guards against
  (``_reject_paged_decode_sliding_window``); the emulation reproduces it on purpose
  and the path notes it in each result.
* :func:`mha_batch_prefill_func`: FlashAttention-style varlen prefill over page-size-1 KV
  (``kv_indptr``/``kv_page_indices``), queries aligned to the end of their keys, and
  ``window_size=(left, right)`` inclusive on both sides; ``causal=True`` makes ``right = 0``.
  The real op in aiter 0.1.7.post2.dev18 fails on an all-decode batch whose window covers the
  longest KV (fixed by aiter #2170); the emulation computes the intended result there.
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.attention.aiter.native import mha_batch_prefill_args, paged_attention_ragged_args
from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import PathUnavailableError
from swa_kit.window import to_keys


def _unsupported(op: str, what: str) -> PathUnavailableError:
    return PathUnavailableError(f"emulated {op}: {what} is not emulated; run the native op on ROCm")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float, cap: float):
    """Softmax attention in float32: q ``[n, Hq, D]``, k/v ``[m, Hkv, D]``, allowed ``[n, m]``."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    s = s.masked_fill(~allowed[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [H, n]; -inf for a row with no key
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, v), lse.transpose(0, 1)


def paged_attention_ragged(
    out: torch.Tensor,
    workspace_buffer: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    scale: float,
    kv_indptr: torch.Tensor,
    kv_page_indices: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    block_size: int,
    max_num_partitions: int,
    alibi_slopes: torch.Tensor | None,
    kv_cache_dtype: str,
    kv_cache_layout: str,
    logits_soft_cap: float,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    fp8_out_scale: torch.Tensor | None = None,
    partition_size: int = 256,
    mtp: int = 1,
) -> torch.Tensor:
    """Emulated ``aiter.paged_attention_ragged``: every query attends all keys of its request.

    ``key_cache``/``value_cache``: ``[pages, block_size, Hkv, D]`` (``"NHD"``); request ``b``
    owns pages ``kv_page_indices[kv_indptr[b]:kv_indptr[b+1]]``, its last page holding
    ``kv_last_page_lens[b]`` tokens. One query per request (``mtp`` queries when ``mtp > 1``).
    """
    name = "paged_attention_ragged"
    if kv_cache_layout != "NHD":
        raise _unsupported(name, f"kv_cache_layout {kv_cache_layout!r} (SGLang passes 'NHD')")
    if kv_cache_dtype != "auto" or fp8_out_scale is not None:
        raise _unsupported(name, f"fp8 KV or output (kv_cache_dtype={kv_cache_dtype!r})")
    if alibi_slopes is not None:
        raise _unsupported(name, "alibi_slopes")
    if key_cache.shape[1] != block_size:
        raise PathUnavailableError(
            f"{name}: key_cache {tuple(key_cache.shape)} is not [pages, {block_size}, Hkv, D]")
    indptr = kv_indptr.tolist()
    last = kv_last_page_lens.tolist()
    for b in range(len(indptr) - 1):
        pages = kv_page_indices[indptr[b] : indptr[b + 1]].long()
        n_keys = (len(pages) - 1) * block_size + int(last[b])
        slots = (pages[:, None] * block_size + torch.arange(block_size, device=pages.device)).flatten()[:n_keys]
        k = key_cache.reshape(-1, *key_cache.shape[2:])[slots]
        v = value_cache.reshape(-1, *value_cache.shape[2:])[slots]
        q = query[b * mtp : (b + 1) * mtp]
        allowed = torch.ones(q.shape[0], n_keys, dtype=torch.bool, device=q.device)
        o, _ = _attend(q, k, v, allowed, float(scale), float(logits_soft_cap))
        out[b * mtp : (b + 1) * mtp] = o.to(out.dtype)
    return out


def mha_batch_prefill_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_page_indices: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    logits_soft_cap: float = 0.0,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_lse: bool = False,
    return_attn_probs: bool = False,
    out: torch.Tensor | None = None,
) -> Any:
    """Emulated ``aiter.mha_batch_prefill_func`` (signature of aiter 0.1.7.post2.dev18).

    Query ``i`` of a request with ``q_len`` queries and ``kv_len`` keys sits at key position
    ``kv_len - q_len + i``; it attends key ``j`` when ``pos - left <= j <= pos + right`` (a
    negative bound is unlimited; ``causal`` forces ``right = 0``). Returns ``out`` (and the
    log-sum-exp ``[total_q, Hq]`` when ``return_lse``).
    """
    name = "mha_batch_prefill_func"
    if dropout_p:
        raise _unsupported(name, f"dropout_p={dropout_p}")
    if alibi_slopes is not None:
        raise _unsupported(name, "alibi_slopes")
    if return_attn_probs:
        raise _unsupported(name, "return_attn_probs")
    if k.dim() == 4:  # [pages, 1, Hkv, D] is the same page-size-1 buffer
        k, v = k.flatten(0, 1), v.flatten(0, 1)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    result = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device) if out is None else out
    lse_all = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    qo, kvp = cu_seqlens_q.tolist(), kv_indptr.tolist()
    for b in range(len(qo) - 1):
        q_b = q[qo[b] : qo[b + 1]]
        slots = kv_page_indices[kvp[b] : kvp[b + 1]].long()
        q_pos = torch.arange(len(slots) - q_b.shape[0], len(slots), device=q.device)[:, None]
        k_pos = torch.arange(len(slots), device=q.device)[None, :]
        allowed = torch.ones(q_b.shape[0], len(slots), dtype=torch.bool, device=q.device)
        if left >= 0:
            allowed &= k_pos >= q_pos - left
        if right >= 0:
            allowed &= k_pos <= q_pos + right
        # Like the kernel, never load keys outside every query's window: a freed slot may hold NaN.
        needed = allowed.any(dim=0)
        o, lse = _attend(q_b, k[slots[needed]], v[slots[needed]], allowed[:, needed], scale, float(logits_soft_cap))
        result[qo[b] : qo[b + 1]] = o.to(result.dtype)
        lse_all[qo[b] : qo[b + 1]] = lse
    return (result, lse_all) if return_lse else result


def run_paged_ragged(batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """SGLang's default aiter decode call, emulated. ``window_arg`` is the layer's window, if any:
    recorded in the result's notes and *not applied*, because the real op has no way to take it."""
    notes = ["emulated: the kit's implementation of paged_attention_ragged's semantics, not aiter's kernel"]
    if window_arg is not None:
        notes.append(
            f"the layer's window {window_arg!r} was NOT applied: paged_attention_ragged takes no window and "
            "attends the whole context (the seed's silent failure; SGLang now refuses this route)"
        )
    args = paged_attention_ragged_args(batch)
    out = paged_attention_ragged(*args)
    return AttentionResult(out, path="aiter_emulated_paged_ragged", tier="emulated", device=str(out.device),
                           notes=notes)


def run_mha_batch_prefill(batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """SGLang's CK prefill call, emulated; ``window_arg`` in the ``aiter_ck`` convention."""
    if batch.tree_masks is not None:
        raise PathUnavailableError("mha_batch_prefill_func is causal only; a tree verify needs a custom-mask path")
    keys = to_keys("aiter_ck", window_arg)
    args, kwargs = mha_batch_prefill_args(batch, window_arg)
    out = mha_batch_prefill_func(*args, softmax_scale=float(batch.sm_scale), **kwargs)
    notes = [
        "emulated: the kit's implementation of mha_batch_prefill_func's semantics, not aiter's CK kernel",
        f"window_size={tuple(window_arg)} with causal=True: {keys if keys is not None else 'all'} keys per query",
    ]
    return AttentionResult(out, path="aiter_emulated_mha_batch_prefill", tier="emulated", device=str(out.device),
                           notes=notes)


def available() -> tuple[bool, str]:
    return True, "emulated in plain torch on any device (not aiter's kernel)"
