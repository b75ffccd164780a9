"""aiter's real ops, called the way SGLang 0.5.23's aiter backend calls them (ROCm only).

Three call sites of ``python/sglang/srt/layers/attention/aiter_backend.py`` are mirrored:

* ``unified_attention`` (Triton; decode, extend, target verify and draft extend when the
  model has an SWA pool or ``SGLANG_USE_AITER_UNIFIED_ATTN=1``): keyword arguments,
  ``window_size=(sliding_window_size - 1, 0)``, K/V viewed as ``[pages, page_size, Hkv, D]``,
  ``max_seqlen_k = page_table.shape[1] * page_size``;
* ``mha_batch_prefill_func`` (CK; default prefill/extend): eight positional arguments then
  keywords, ``window_size=(sliding_window_size, -1)`` with ``causal=True``, KV at page size 1;
* ``paged_attention_ragged`` (HIP; default decode): nineteen positional arguments, page size 1,
  ``"NHD"``, no window argument at all (the seed's silent failure).

The argument builders are pure functions of an :class:`AttentionBatch` (plain torch, no aiter),
so the shapes, dtypes and layouts they produce are tested on any machine, and
:func:`signature_problems` checks them against the installed wheel's source without importing it.

Where SGLang 0.5.23 passes keywords that the pinned wheel's functions do not take (it targets a
newer aiter), the kit does not pass them: :data:`SGLANG_ONLY_KWARGS` lists each one with why
leaving it out changes nothing for the kit's inputs (bf16/fp16/fp32 KV, no sinks).
"""

from __future__ import annotations

import ast
import importlib
import math
from typing import Any

import torch

from swa_kit.attention.aiter import loader
from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import PathUnavailableError
from swa_kit.window import to_keys

#: Where each op is defined in the pinned wheel (relative to the ``aiter`` package).
OP_SOURCES = {
    "unified_attention": "ops/triton/unified_attention.py",
    "mha_batch_prefill_func": "ops/mha.py",
    "paged_attention_ragged": "ops/attention.py",
}
#: Module each op is imported from on ROCm, for the pinned layout (0.1.10 moved unified_attention
#: to ``aiter.ops.triton.attention.unified_attention``, where SGLang 0.5.23 imports it from).
OP_MODULES = {
    "unified_attention": ("aiter.ops.triton.unified_attention", "aiter.ops.triton.attention.unified_attention"),
    "mha_batch_prefill_func": ("aiter",),
    "paged_attention_ragged": ("aiter",),
}
#: Keywords SGLang 0.5.23 passes that aiter 0.1.7.post2.dev18 does not accept, and why omitting them is exact here.
SGLANG_ONLY_KWARGS = {
    "mha_batch_prefill_func": {
        "sink_ptr": "attention sinks; SGLang passes None for models without sinks, the kit has none",
        "q_descale": "fp8 query scale; None unless the KV cache is fp8",
        "k_descale": "fp8 key scale; None unless the KV cache is fp8",
        "v_descale": "fp8 value scale; None unless the KV cache is fp8",
    },
}
#: SGLang's paged_attention_ragged partition size (``_AITER_PARTITION_SIZE_ROCM``).
PARTITION_SIZE = 256


def _window_keys(convention: str, window_arg: Any) -> int | None:
    return to_keys(convention, window_arg)


def unified_attention_args(batch: AttentionBatch, window_arg: Any, *, out: torch.Tensor | None = None) -> dict:
    """Keyword arguments of SGLang's ``unified_attention`` call for ``batch``.

    ``window_arg`` is in the ``aiter_unified`` convention, as SGLang computes it
    (``(sliding_window_size - 1, 0)`` or ``(-1, -1)``). ``seqused_k`` is the keys per request
    including the new tokens (SGLang adds ``max_q_len`` in target verify, whose ``seq_lens``
    exclude the draft tokens; the kit's batch already counts them).
    """
    _window_keys("aiter_unified", window_arg)
    k, v = batch.paged_kv()
    table = batch.block_table().to(torch.int32)
    q = batch.q.contiguous()
    return dict(
        q=q,
        k=k,
        v=v,
        out=torch.empty_like(q) if out is None else out,
        cu_seqlens_q=batch.qo_indptr.to(device=q.device, dtype=torch.int32),
        seqused_k=batch.seq_lens.to(device=q.device, dtype=torch.int32),
        max_seqlen_q=int(batch.q_lens.max()),
        max_seqlen_k=table.shape[1] * batch.page_size,
        softmax_scale=float(batch.sm_scale),
        causal=True,
        window_size=tuple(window_arg),
        block_table=table,
        softcap=0.0,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        sinks=None,
    )


#: ``mha_batch_prefill_func``'s positional arguments: q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
#: max_seqlen_k.
PrefillPositional = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int]


def mha_batch_prefill_args(batch: AttentionBatch, window_arg: Any) -> tuple[PrefillPositional, dict[str, Any]]:
    """Positional and keyword arguments of SGLang's ``mha_batch_prefill_func`` call (page size 1).

    ``window_arg`` is in the ``aiter_ck`` convention; SGLang passes ``(sliding_window_size, -1)``.
    """
    _window_keys("aiter_ck", window_arg)
    if batch.page_size != 1:
        raise PathUnavailableError(
            f"mha_batch_prefill_func reads KV at page size 1 (SGLang's NHD path); this batch has page size "
            f"{batch.page_size}: use aiter_triton_unified for paged KV"
        )
    device = batch.q.device
    hq, d = batch.q.shape[1], batch.q.shape[2]
    args = (
        batch.q.contiguous().view(-1, hq, d),
        batch.k_buffer,
        batch.v_buffer,
        batch.qo_indptr.to(device=device, dtype=torch.int32),
        batch.kv_indptr.to(device=device, dtype=torch.int32),
        batch.kv_indices.to(device=device, dtype=torch.int32),
        int(batch.q_lens.max()),
        int(batch.seq_lens.max()),
    )
    kwargs = dict(
        causal=True,
        logits_soft_cap=0.0,
        alibi_slopes=None,
        return_lse=False,
        return_attn_probs=False,
        window_size=tuple(window_arg),
    )
    return args, kwargs


def paged_attention_ragged_args(
    batch: AttentionBatch, *, scale: float | None = None, out: torch.Tensor | None = None
) -> tuple:
    """The nineteen positional arguments of SGLang's ``paged_attention_ragged`` call (decode).

    ``scale`` defaults to ``batch.sm_scale``. SGLang passes its backend's ``1 / sqrt(head_dim)``
    here (not ``layer.scaling``): pass that to mirror it exactly for models that scale otherwise.
    There is no window argument: the op attends every key of the request.
    """
    if batch.page_size != 1:
        raise PathUnavailableError(
            f"SGLang calls paged_attention_ragged with block_size 1; this batch has page size {batch.page_size}"
        )
    if int(batch.q_lens.max()) != 1:
        raise PathUnavailableError(
            f"paged_attention_ragged is SGLang's decode op (one query per request); q_lens {batch.q_lens.tolist()}"
        )
    device = batch.q.device
    bs, hq, d = batch.batch_size, batch.q.shape[1], batch.q.shape[2]
    hkv, dv = batch.k_buffer.shape[1], batch.v_buffer.shape[2]
    max_partitions = max(1, math.ceil(int(batch.seq_lens.max()) / PARTITION_SIZE))
    # SGLang's workspace: fp32 partial outputs, then max logits and exp sums per partition.
    workspace_bytes = bs * hq * max_partitions * d * 4 + 2 * (bs * hq * max_partitions) * 4
    one = torch.ones(1, dtype=torch.float32, device=device)
    return (
        torch.empty(bs, hq, dv, dtype=batch.q.dtype, device=device) if out is None else out,
        torch.empty(workspace_bytes, dtype=torch.uint8, device=device),
        batch.q.view(-1, hq, d),
        batch.k_buffer.view(-1, 1, hkv, d),
        batch.v_buffer.view(-1, 1, hkv, dv),
        float(batch.sm_scale if scale is None else scale),
        batch.kv_indptr.to(device=device, dtype=torch.int32),
        batch.kv_indices.to(device=device, dtype=torch.int32),
        torch.ones(bs, dtype=torch.int32, device=device),  # kv_last_page_lens: every page holds 1 token
        1,  # block_size
        max_partitions,
        None,  # alibi_slopes
        "auto",  # kv_cache_dtype: KV stored in the activation dtype
        "NHD",  # kv_cache_layout
        0.0,  # logits_soft_cap
        one,  # k_scale
        one,  # v_scale
        None,  # fp8_out_scale
        PARTITION_SIZE,
    )


def signature_problems(source: str, function: str, n_positional: int, keywords: list[str]) -> list[str]:
    """What is wrong with calling ``function`` (defined in ``source``) with these arguments.

    Read with ``ast`` only (the module is never imported). Reports: the function is missing;
    more positional arguments than it takes; a keyword it does not have (unless it has
    ``**kwargs``); a keyword that repeats a positional; a required parameter left unset.
    """
    tree = ast.parse(source)
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not defs:
        return [f"{function}: not defined in this source"]
    a = defs[-1].args
    positional = [p.arg for p in a.posonlyargs + a.args]
    kwonly = [p.arg for p in a.kwonlyargs]
    problems = []
    if n_positional > len(positional) and a.vararg is None:
        problems.append(f"{function}: {n_positional} positional arguments passed, it takes {len(positional)}")
    bound = set(positional[:n_positional])
    names = set(p.arg for p in a.args) | set(kwonly)  # positional-only parameters cannot be keywords
    for kw in keywords:
        if kw in bound:
            problems.append(f"{function}: {kw!r} passed both positionally and as a keyword")
        elif kw not in names and a.kwarg is None:
            problems.append(f"{function}: no parameter {kw!r} (parameters: {', '.join(positional + kwonly)})")
    n_pos_defaults = len(a.defaults)
    required = positional[: len(positional) - n_pos_defaults] + [
        p.arg for p, dflt in zip(a.kwonlyargs, a.kw_defaults) if dflt is None
    ]
    given = bound | set(keywords)
    problems += [f"{function}: required parameter {name!r} not passed" for name in required if name not in given]
    return problems


def op_source(op: str) -> str:
    """Source text of the file that defines ``op`` in the installed wheel (read, not imported)."""
    root = loader.aiter_package_dir()
    if root is None:
        raise PathUnavailableError(f"{loader.DISTRIBUTION} is not installed: pip install 'swa_kit[aiter]'")
    return (root / OP_SOURCES[op]).read_text()


def native_op(op: str) -> Any:
    """aiter's own ``op`` (imported from the real package); PathUnavailableError off ROCm."""
    ok, reason = loader.native_status()
    if not ok:
        raise PathUnavailableError(f"aiter native {op}: {reason}")
    errors = []
    for module in OP_MODULES[op]:
        try:
            return getattr(importlib.import_module(module), op)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}: {exc}")
    raise PathUnavailableError(f"aiter native {op} not found: {'; '.join(errors)}")


def _result(out: torch.Tensor, path: str, notes: list[str]) -> AttentionResult:
    device = f"{out.device} ({torch.cuda.get_device_name(out.device)})" if out.is_cuda else str(out.device)
    return AttentionResult(out, path=path, tier="aiter-native", device=device, notes=notes)


def run_unified(batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """Native ``unified_attention`` with SGLang's arguments; ``window_arg`` in ``aiter_unified``."""
    if batch.tree_masks is not None:
        raise PathUnavailableError("unified_attention is causal only; a tree verify needs a custom-mask path")
    kwargs = unified_attention_args(batch, window_arg)
    native_op("unified_attention")(**kwargs)
    return _result(kwargs["out"], "aiter_native_unified", [f"window_size={tuple(window_arg)}"])


def run_mha_batch_prefill(batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """Native CK ``mha_batch_prefill_func`` with SGLang's arguments; ``window_arg`` in ``aiter_ck``."""
    if batch.tree_masks is not None:
        raise PathUnavailableError("mha_batch_prefill_func is causal only; a tree verify needs a custom-mask path")
    keys = _window_keys("aiter_ck", window_arg)
    if keys is not None and int(batch.q_lens.max()) == 1 and keys >= int(batch.seq_lens.max()):
        raise PathUnavailableError(
            f"mha_batch_prefill_func in aiter {loader.aiter_version()} fails on an all-decode batch whose "
            f"window ({keys} keys) covers the longest KV ({int(batch.seq_lens.max())}); fixed upstream by aiter "
            "#2170: pass window_size=(-1, -1) (the window covers everything) or use aiter_native_unified"
        )
    args, kwargs = mha_batch_prefill_args(batch, window_arg)
    out = native_op("mha_batch_prefill_func")(*args, **kwargs)
    return _result(out, "aiter_native_mha_batch_prefill", [f"window_size={tuple(window_arg)}, causal=True"])


def run_paged_ragged(batch: AttentionBatch, window_arg: Any) -> AttentionResult:
    """Native ``paged_attention_ragged``: it takes no window, so a windowed layer is refused here."""
    if window_arg is not None:
        raise PathUnavailableError(
            f"paged_attention_ragged takes no window argument and would attend the whole context instead of "
            f"window {window_arg!r}: route sliding layers to aiter_native_unified "
            "(SGLANG_USE_AITER_UNIFIED_ATTN=1); aiter_emulated_paged_ragged shows the silent result"
        )
    args = paged_attention_ragged_args(batch)
    native_op("paged_attention_ragged")(*args)
    return _result(args[0], "aiter_native_paged_ragged", ["no window argument: attends every key"])
