"""aiter's own Triton ``unified_attention`` kernels, launched by the kit (GPU or CPU interpreter).

aiter's Python wrapper (``aiter/ops/triton/unified_attention.py``) cannot be used off ROCm:
its package ``__init__`` needs ROCm, it asks ``torch.cuda`` for the SM count, and it passes
``waves_per_eu`` (on every launch, in aiter 0.1.7), an AMD-only launch option that Triton's CUDA
backend rejects.
:func:`unified_attention` here computes the same launch arguments the wrapper computes
(:func:`launch_plan`) and launches aiter's ``@triton.jit`` kernels, loaded by
:mod:`~swa_kit.attention.aiter.loader`, without AMD-only options. CPU tensors run in
Triton's interpreter (small shapes only: it is Python), GPU tensors on the GPU.

Window: ``window_size=(left, right)``; the kernel uses ``SLIDING_WINDOW = 1 + left`` and keeps
key ``k`` for query ``q`` when ``q - k < SLIDING_WINDOW`` (``right`` is ignored: always
causal). So ``left + 1`` keys are attended: the ``aiter_unified`` convention. SGLang passes
``(sliding_window_size - 1, 0)``, i.e. ``W - 2`` for a layer meant to attend ``W`` keys.

Two hazards this path does *not* hide, measured in ``tests/test_aiter_triton.py``:

* NaN in freed slots poisons results. The kernel loads whole tiles (64 positions outside
  decode, one block in decode) and multiplies masked probabilities (0) by the loaded V rows:
  ``0 x NaN = NaN``. A freed slot that shares a loaded tile with attended keys must hold finite
  data. The kit's pools keep freed slots finite (the dummy slot is zeroed).
* Block size. aiter's decode config tiles by the block size (``TILE_SIZE = block_size``);
  ``tl.dot`` on NVIDIA needs tiles of at least 16, so decode on a GPU needs page size >= 16
  (:data:`GPU_MIN_DECODE_BLOCK`). The interpreter runs any block size.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import numpy as np
import torch

from swa_kit.attention.aiter import loader
from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.attention.kit.interpreted import refuse_bfloat16
from swa_kit.errors import PathUnavailableError, UsageError
from swa_kit.window import to_keys

#: Smallest page size aiter's decode config compiles with on an NVIDIA GPU (tl.dot's minimum tile).
GPU_MIN_DECODE_BLOCK = 16
#: SM count assumed in the interpreter, where aiter's 2D/3D choice has no GPU to ask.
INTERPRETER_SMS = 1
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch_plan(
    *,
    num_tokens: int,
    num_seqs: int,
    num_query_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    sliding_window: int,
    num_sms: int,
    kernel: str = "auto",
) -> dict[str, Any]:
    """The launch configuration aiter 0.1.7's wrapper computes, minus ``waves_per_eu``.

    ``kernel`` forces "2d" or "3d" (split-KV + reduce); "auto" follows aiter's rule: 2D when
    there is a window, ``max_seqlen_k <= 512``, or the 2D grid already fills the GPU.
    """
    per_kv = num_query_heads // num_kv_heads
    block_m = 16 if per_kv <= 16 else _next_pow2(per_kv)
    block_q = block_m // per_kv
    all_decode = max_seqlen_q == 1
    target_prgms = num_sms * 4
    num_2d_prgms = (num_tokens // block_q + num_seqs) * num_kv_heads
    use_2d = sliding_window > 0 or max_seqlen_k <= 512 or num_2d_prgms > target_prgms
    if kernel not in ("auto", "2d", "3d"):
        raise UsageError(f"kernel={kernel!r}: one of 'auto', '2d', '3d'")
    chosen = kernel if kernel != "auto" else ("2d" if use_2d else "3d")
    plan: dict[str, Any] = {"kernel": chosen, "BLOCK_M": block_m, "BLOCK_Q": block_q, "ALL_DECODE": all_decode}
    if chosen == "2d":
        tile, stages, warps = (block_size, 3, 2) if all_decode else (64, 1, 2)
        if max_seqlen_q >= 256:
            block_m, stages, warps = 128, 1, 4
            plan.update(BLOCK_M=block_m, BLOCK_Q=block_m // per_kv)
        stages = min(2 if head_size > 128 else 4, stages)
        plan.update(TILE_SIZE=tile, num_warps=warps, num_stages=stages)
        plan["grid"] = (num_kv_heads, num_tokens // plan["BLOCK_Q"] + num_seqs)
        return plan
    segments = min(128, _next_pow2(math.ceil(target_prgms / max(1, num_2d_prgms))))
    min_segments = 16 if block_size <= 16 else 8
    segments = max(segments, min_segments)
    plan.update(
        TILE_SIZE=block_size,
        NUM_SEGMENTS_PER_SEQ=segments,
        num_warps=2,
        num_stages=1,
        reduce_num_warps=1 if segments == min_segments else 2,
        grid=(num_tokens // block_q + num_seqs, num_kv_heads, segments),
    )
    return plan


def _padded_block_table(table: torch.Tensor, max_seqlen_k: int, block_size: int, tile: int) -> torch.Tensor:
    """Widen the block table so every tile's unmasked block-table load stays in bounds.

    The kernel reads ``block_table[seq, pos // block_size]`` for every position of a tile
    without a mask; with tiles wider than what a row covers it would read past the row (the
    next request's pages, or past the tensor). Extra columns point at page 0 (the dummy).
    The width comes from the host-side ``max_seqlen_k``, never from reading the GPU.
    """
    longest = max(1, max_seqlen_k)
    need = max(table.shape[1], -(-(-(-longest // tile) * tile) // block_size))
    if need == table.shape[1]:
        return table.contiguous()
    wide = torch.zeros(table.shape[0], need, dtype=table.dtype, device=table.device)
    wide[:, : table.shape[1]] = table
    return wide


def unified_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    seqused_k: torch.Tensor,
    max_seqlen_k: int,
    softmax_scale: float,
    window_size: tuple[int, int],
    block_table: torch.Tensor,
    *,
    kernel: str = "auto",
    sinks: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Launch aiter's unified attention kernels on ``q`` (arguments as aiter's wrapper takes them).

    ``k``/``v``: ``[num_blocks, block_size, Hkv, D]``; ``block_table``: ``[B, max_blocks]``
    int32; ``seqused_k``: keys per request; ``sinks``: ``[Hq]`` attention-sink logits or None;
    causal, no softcap/alibi/fp8. Writes ``out`` and returns the launch plan, reading no device
    tensor on the host. Runs in the interpreter when ``q`` is on the CPU.
    """
    if sinks is not None and tuple(sinks.shape) != (q.shape[1],):
        raise UsageError(f"aiter_triton: sinks of shape {tuple(sinks.shape)}; aiter takes one per query head "
                         f"({q.shape[1]},)")
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise PathUnavailableError(
            f"aiter_triton: q {q.dtype}, k {k.dtype}, v {v.dtype}; supported: one of {_DTYPES} for all three"
        )
    interpreted = q.device.type == "cpu"
    if interpreted:
        refuse_bfloat16("aiter_triton", q.dtype)
    elif q.device.type != "cuda" or not torch.cuda.is_available():
        raise PathUnavailableError(f"aiter_triton runs on a CUDA/ROCm GPU or on the CPU, not on {q.device}")
    block_size, num_kv_heads, head_size = k.shape[1], k.shape[2], q.shape[2]
    num_seqs = seqused_k.numel()
    num_sms = INTERPRETER_SMS if interpreted else torch.cuda.get_device_properties(q.device).multi_processor_count
    sliding_window = 1 + int(window_size[0])  # exactly what aiter's wrapper passes as SLIDING_WINDOW
    plan = launch_plan(
        num_tokens=q.shape[0],
        num_seqs=num_seqs,
        num_query_heads=q.shape[1],
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        block_size=block_size,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        sliding_window=sliding_window,
        num_sms=num_sms,
        kernel=kernel,
    )
    if not interpreted and plan["TILE_SIZE"] < GPU_MIN_DECODE_BLOCK:
        raise PathUnavailableError(
            f"aiter_triton: block size {block_size} gives {plan['kernel']} tiles of {plan['TILE_SIZE']} keys; "
            f"tl.dot on this GPU needs >= {GPU_MIN_DECODE_BLOCK}: use page size >= {GPU_MIN_DECODE_BLOCK} "
            "(or CPU tensors, which the interpreter runs at any block size)"
        )
    head_padded = _next_pow2(head_size)
    if plan["kernel"] == "3d" and head_padded != head_size:
        raise PathUnavailableError(
            f"aiter_triton: head_dim {head_size} is not a power of two; aiter 0.1.7's reduce_segments "
            "then reads an undefined offs_d: use kernel='2d'"
        )
    mod = loader.load_unified_attention_kernels(interpreted=interpreted)
    # No host sync from here on (the launch can be captured in a CUDA graph): only host ints are read.
    table = _padded_block_table(block_table, max_seqlen_k, block_size, plan["TILE_SIZE"])
    common = dict(
        query_ptr=q,
        key_cache_ptr=k,
        value_cache_ptr=v,
        sink_ptr=sinks,
        block_tables_ptr=table,
        seq_lens_ptr=seqused_k,
        alibi_slopes_ptr=None,
        qq_bias_ptr=None,
        scale=softmax_scale,
        k_scale=None,
        v_scale=None,
        softcap=0.0,
        num_query_heads=q.shape[1],
        num_queries_per_kv=q.shape[1] // num_kv_heads,
        block_table_stride=table.stride(0),
        query_stride_0=q.stride(0),
        query_stride_1=q.stride(1),
        qq_bias_stride_0=0,
        BLOCK_SIZE=block_size,
        HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=head_padded,
        USE_ALIBI_SLOPES=False,
        USE_QQ_BIAS=False,
        USE_SOFTCAP=False,
        USE_SINKS=sinks is not None,
        SLIDING_WINDOW=sliding_window,
        stride_k_cache_0=k.stride(0),
        stride_k_cache_1=k.stride(1),
        stride_k_cache_2=k.stride(2),
        stride_k_cache_3=k.stride(3),
        stride_v_cache_0=v.stride(0),
        stride_v_cache_1=v.stride(1),
        stride_v_cache_2=v.stride(2),
        stride_v_cache_3=v.stride(3),
        query_start_len_ptr=cu_seqlens_q,
        BLOCK_Q=plan["BLOCK_Q"],
        num_seqs=num_seqs,
        BLOCK_M=plan["BLOCK_M"],
        ALL_DECODE=plan["ALL_DECODE"],
        TILE_SIZE=plan["TILE_SIZE"],
        num_warps=plan["num_warps"],
        num_stages=plan["num_stages"],
    )
    with contextlib.ExitStack() as stack:
        if interpreted:
            stack.enter_context(loader.interpreted_stdlib())
            # numpy warns on the padded query rows of a tile (1 / L with L = 0); they are never stored
            stack.enter_context(np.errstate(divide="ignore", invalid="ignore"))
        _launch(mod, plan, q, out, common, seqused_k, cu_seqlens_q, table, head_size, head_padded, num_seqs)
    return plan


def _launch(mod, plan, q, out, common, seqused_k, cu_seqlens_q, table, head_size, head_padded, num_seqs) -> None:
    if plan["kernel"] == "2d":
        mod.kernel_unified_attention_2d[plan["grid"]](
            output_ptr=out,
            out_scale=1.0,
            output_stride_0=out.stride(0),
            output_stride_1=out.stride(1),
            USE_FP8=False,
            **common,
        )
        return
    segments = plan["NUM_SEGMENTS_PER_SEQ"]
    shape = (q.shape[0], q.shape[1], segments)
    segm_output = torch.empty(*shape, head_padded, dtype=torch.float32, device=q.device)
    segm_max = torch.empty(shape, dtype=torch.float32, device=q.device)
    segm_expsum = torch.empty(shape, dtype=torch.float32, device=q.device)
    mod.kernel_unified_attention_3d[plan["grid"]](
        segm_output_ptr=segm_output,
        segm_max_ptr=segm_max,
        segm_expsum_ptr=segm_expsum,
        NUM_SEGMENTS_PER_SEQ=segments,
        **common,
    )
    mod.reduce_segments[(q.shape[0], q.shape[1])](
        output_ptr=out,
        segm_output_ptr=segm_output,
        segm_max_ptr=segm_max,
        segm_expsum_ptr=segm_expsum,
        seq_lens_ptr=seqused_k,
        num_seqs=num_seqs,
        num_query_heads=q.shape[1],
        out_scale_inv=1.0,
        output_stride_0=out.stride(0),
        output_stride_1=out.stride(1),
        block_table_stride=table.stride(0),
        TILE_SIZE=plan["TILE_SIZE"],
        HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=head_padded,
        query_start_len_ptr=cu_seqlens_q,
        BLOCK_Q=plan["BLOCK_Q"],
        NUM_SEGMENTS_PER_SEQ=segments,
        USE_FP8=False,
        num_warps=plan["reduce_num_warps"],
        num_stages=1,
    )


@functools.lru_cache(maxsize=1)
def interpreter_status() -> tuple[bool, str]:
    """Whether Triton's CPU interpreter runs aiter's kernel here: one tiny launch, once per process.

    Measured on the H200 image (triton 3.6.0, numpy 2.5.2): it does not. Triton 3.6's interpreter
    converts loaded scalars with ``int(array)``, which NumPy 2.5 refuses for one-element 1-D
    arrays; triton 3.9 squeezes first. A version table would guess; the launch settles it.
    """
    import triton

    ok, reason = loader.aiter_triton_status()
    if not ok:
        return ok, reason
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 1, 16, generator=g) for n in (1, 16, 16))
    out = torch.empty_like(q)
    try:
        unified_attention(
            q, k.view(1, 16, 1, 16), v.view(1, 16, 1, 16), out, torch.tensor([0, 1], dtype=torch.int32), 1,
            torch.tensor([5], dtype=torch.int32), 16, 0.25, (-1, -1), torch.zeros(1, 1, dtype=torch.int32),
        )
    except Exception as exc:  # the interpreter's failure modes are not a stable API
        return False, (
            f"Triton {triton.__version__}'s CPU interpreter cannot run aiter's kernel with numpy {np.__version__}: "
            f"{type(exc).__name__}: {exc}"[:400] + " (use a GPU, or triton >= 3.9 for the interpreter)"
        )
    weights = torch.softmax((q[0, 0] @ k[:5, 0].T) * 0.25, dim=-1)
    if not torch.allclose(out[0, 0], weights @ v[:5, 0], atol=1e-4):
        return False, f"Triton {triton.__version__}'s CPU interpreter runs aiter's kernel but gives wrong numbers"
    return True, f"Triton {triton.__version__} CPU interpreter, numpy {np.__version__}"


def available() -> tuple[bool, str]:
    """Runs where aiter's kernels load and either a GPU or a working CPU interpreter is present."""
    ok, reason = loader.aiter_triton_status()
    if not ok or torch.cuda.is_available():
        return ok, reason
    return interpreter_status()


def _tier(device: torch.device) -> str:
    return "aiter-triton-interpreter" if device.type == "cpu" else "aiter-triton-gpu"


def run_unified(batch: AttentionBatch, window_arg: Any, *, kernel: str = "auto") -> AttentionResult:
    """Run aiter's unified attention kernels on ``batch``; ``window_arg`` in the ``aiter_unified`` convention."""
    if batch.tree_masks is not None:
        raise PathUnavailableError(
            "aiter_triton_unified is causal only (a linear chain); a tree verify needs a path that takes a "
            "custom mask (the reference, or SGLang's extend_attention_fwd route)"
        )
    to_keys("aiter_unified", window_arg)  # validates: (left >= 0, 0|-1) or (-1, -1)
    if batch.device.type == "cpu":
        ok, reason = interpreter_status()
        if not ok:
            raise PathUnavailableError(f"aiter_triton_unified on CPU: {reason}")
    q = batch.q.contiguous()
    k, v = batch.paged_kv()
    out = torch.empty_like(q)
    q_lens, seq_lens = batch.q_lens, batch.seq_lens
    plan = unified_attention(
        q,
        k,
        v,
        out,
        cu_seqlens_q=batch.qo_indptr.to(device=q.device, dtype=torch.int32),
        max_seqlen_q=int(q_lens.max()),
        seqused_k=seq_lens.to(device=q.device, dtype=torch.int32),
        max_seqlen_k=int(seq_lens.max()),
        softmax_scale=float(batch.sm_scale),
        window_size=tuple(window_arg),
        block_table=batch.block_table().to(torch.int32),
        kernel=kernel,
    )
    where = "Triton CPU interpreter" if q.device.type == "cpu" else torch.cuda.get_device_name(q.device)
    notes = [
        f"aiter {loader.aiter_version()} {plan['kernel']} kernel, SLIDING_WINDOW={1 + int(window_arg[0])}, "
        f"TILE_SIZE={plan['TILE_SIZE']}, block size {batch.page_size}, on {where}"
    ]
    return AttentionResult(out, path="aiter_triton_unified", tier=_tier(q.device), device=str(q.device), notes=notes)
