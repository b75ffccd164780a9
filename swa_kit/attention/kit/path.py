"""The kit's kernel as an attention path: lay out the batch, choose the launch, launch, register ``kit_triton_swa``.

:func:`plan_batch` (or :func:`plan_decode`, for tables already laid out) checks a decode or chain-verify batch against
what the kernel computes exactly and does the host-side work once per batch, like a serving engine's per-step
metadata: tables, the launch policy (:mod:`swa_kit.attention.kit.policy`), the split, scratch buffers. What is left,
:meth:`DecodePlan.run`, is only the kernel launches (:mod:`swa_kit.attention.kit.kernel`); that is what the benchmarks
time. On a CPU, :func:`run_interpreted` runs the kernel in Triton's interpreter, in a child process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.attention.kit.interpreted import interpreter_active, refuse_bfloat16, run_in_interpreter
from swa_kit.attention.kit.policy import (
    FP_FUSION,
    MAX_QUERIES,
    KernelLaunch,
    LaunchPolicy,
    Merge,
    is_latency_bound,
    kernel_constexprs,
    launch_policy,
    plan_launch,
    with_overrides,
)
from swa_kit.errors import PathUnavailableError
from swa_kit.window import Window

try:  # Triton is a Linux dependency of the kit; elsewhere the path reports itself unavailable
    import triton

    from swa_kit.attention.kit import kernel
except ImportError:  # pragma: no cover - exercised only where Triton is missing
    triton = kernel = None  # type: ignore[assignment]

NAME = "kit_triton_swa"

#: A window wider than any context: what "no window" (full causal attention) becomes.
NO_WINDOW = 2**31 - 1

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class DecodePlan:
    """One batch's launch plan: everything but the queries, computed once on the host.

    A plan never reads a device tensor back to the host, so :meth:`run` is launches only
    and can be captured in a CUDA graph. It runs on one stream at a time: the fused merge's
    split counters (``locks``) belong to the plan, and each call leaves them at zero.
    """

    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    table: torch.Tensor  # int32 page (or slot) ids
    row_start: torch.Tensor  # int32, where request b's row starts in ``table``
    seq_lens: torch.Tensor  # int32 keys per request
    q_start: torch.Tensor  # int32 qo_indptr [B + 1]: request b's queries are q[q_start[b]:q_start[b + 1]]
    max_q_len: int  # longest query run (1: decode; 2..MAX_QUERIES: chain verify)
    page_size: int
    window: int  # keys; NO_WINDOW for full attention
    sm_scale: float
    policy: LaunchPolicy  # tile, warps, switches (overrides applied)
    launch: KernelLaunch  # split, merge, pipeline depth, register cap, edge placement, offsets
    sinks: torch.Tensor | None = None  # [Hq] float32 sink logits (GPT-OSS), or None
    locks: torch.Tensor | None = None  # Merge.LAST_SPLIT: int32 split counters, reset by the merging program

    def facts(self) -> dict[str, Any]:
        """What this plan launches, as a benchmark row records it."""
        p, launch = self.policy, self.launch
        return {"splits": launch.splits, "chunk": launch.chunk, "rows": p.rows, "block_n": p.block_n,
                "num_warps": p.num_warps, "num_stages": launch.num_stages, "max_registers": launch.max_registers,
                "edge": launch.edge.name.lower(), "merge": launch.merge.label, "int32_offsets": launch.int32_offsets,
                "clamped_walk": p.clamped_walk}

    def run(self, q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Attention of ``q`` ``[T, Hq, D]`` (the batch's queries back to back) over each query's window."""
        tokens, hq, dim = q.shape
        hkv = self.k_buffer.shape[1]
        splits = self.launch.splits
        out = torch.empty_like(q) if out is None else out
        if splits > 1:
            part_out = torch.empty(tokens, hq, splits, dim, dtype=torch.float32, device=q.device)
            part_lse = torch.empty(tokens, hq, splits, dtype=torch.float32, device=q.device)
        else:
            part_out = part_lse = out  # unused by the single-split kernel
        sinks = self.sinks if self.sinks is not None else out  # a placeholder pointer when unused
        kernel._swa_attend_kernel[(self.seq_lens.numel(), hkv, splits)](
            q, self.k_buffer, self.v_buffer, self.q_start, self.table, self.row_start, self.seq_lens, sinks,
            out, part_out, part_lse, self.locks if self.locks is not None else out,
            self.sm_scale * math.log2(math.e), self.window, self.launch.chunk, splits,
            q.stride(0), q.stride(1), self.k_buffer.stride(0), self.k_buffer.stride(1),
            self.v_buffer.stride(0), self.v_buffer.stride(1), out.stride(0), out.stride(1),
            **kernel_constexprs(self.policy, self.launch, group=hq // hkv, head_dim=dim, page_size=self.page_size,
                                sinks=self.sinks is not None),
            num_warps=self.policy.num_warps, num_stages=self.launch.num_stages, enable_fp_fusion=FP_FUSION,
            **self._register_cap(),
        )
        if self.launch.merge == Merge.KERNEL:
            kernel._merge_splits_kernel[(tokens, hq)](
                part_out, part_lse, sinks, out, out.stride(0), out.stride(1), splits,
                SPLITS_PAD=max(2, triton.next_power_of_2(splits)), HEAD_DIM=dim,
                USE_SINKS=self.sinks is not None, enable_fp_fusion=FP_FUSION,
            )
        return out

    def _register_cap(self) -> dict[str, int]:
        """CUDA's per-thread register cap, where there is one (ROCm's Triton has no such option)."""
        cap = self.launch.max_registers
        return {"maxnreg": cap} if cap and torch.version.hip is None else {}


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # Triton's CPU interpreter: a few splits still exercise the merge


def _unsupported(what: str) -> PathUnavailableError:
    return PathUnavailableError(f"{NAME}: {what}; run this batch on 'reference' or 'aiter_triton_unified' instead")


def _check_supported(k_buffer: torch.Tensor, v_buffer: torch.Tensor, page_size: int, num_heads_q: int,
                     max_q_len: int, sinks: torch.Tensor | None) -> None:
    """Refuse (PathUnavailableError) every input the kernel cannot compute exactly."""
    dim, hkv = k_buffer.shape[2], k_buffer.shape[1]
    if k_buffer.dtype not in SUPPORTED_DTYPES or v_buffer.dtype != k_buffer.dtype:
        raise _unsupported(f"KV dtype {k_buffer.dtype}/{v_buffer.dtype} (supported: float16, bfloat16, both alike)")
    if k_buffer.device.type == "cpu":  # the CPU runs the kernel in Triton's interpreter
        refuse_bfloat16(NAME, k_buffer.dtype)
    if dim < 16 or dim & (dim - 1) or v_buffer.shape[2] != dim:
        raise _unsupported(f"head_dim {dim} (K) / {v_buffer.shape[2]} (V): needs one power of two >= 16")
    if k_buffer.stride(2) != 1 or v_buffer.stride(2) != 1:
        raise _unsupported("K/V buffers whose head_dim is not contiguous")
    if page_size < 1 or page_size & (page_size - 1):
        raise _unsupported(f"page_size {page_size}: needs a power of two")
    if num_heads_q % hkv:
        raise _unsupported(f"{num_heads_q} query heads over {hkv} KV heads (GQA needs a whole group per KV head)")
    if not 1 <= max_q_len <= MAX_QUERIES:
        raise _unsupported(f"{max_q_len} queries in one request: decode takes 1, chain verify 2..{MAX_QUERIES}")
    if sinks is not None and tuple(sinks.shape) != (num_heads_q,):
        raise _unsupported(f"sinks of shape {tuple(sinks.shape)}: one logit per query head ({num_heads_q},)")


def addressed_elements(buffer: torch.Tensor) -> int:
    """How far past its first element a kernel's offsets into ``buffer`` reach, plus one: its element count when
    contiguous, more for a strided view (K as one half of a fused K/V buffer, say)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(buffer.shape, buffer.stride(), strict=True))


def plan_decode(k_buffer: torch.Tensor, v_buffer: torch.Tensor, table: torch.Tensor, row_start: torch.Tensor,
                seq_lens: torch.Tensor, page_size: int, keys: Any, sm_scale: float, num_heads_q: int, *,
                q_start: torch.Tensor | None = None, max_q_len: int = 1, sinks: torch.Tensor | None = None,
                max_seq_len: int | None = None, splits: int | None = None, **overrides: Any) -> DecodePlan:
    """Check a decode (or chain-verify) batch against what the kernel supports and plan its launch.

    ``table``/``row_start`` are ``kv_indices``/``kv_indptr[:-1]`` at page size 1, or the
    flattened block table and ``b * max_pages`` at larger page sizes. ``q_start`` is the
    batch's ``qo_indptr`` (default: one query per request) and ``max_q_len`` its longest
    query run, as a host int (a serving engine knows it without reading the GPU). ``sinks``:
    ``[Hq]`` per-head sink logits, as aiter's ``unified_attention(sinks=...)`` takes them.
    ``max_seq_len`` (a host int) spares the one read of ``seq_lens`` the plan otherwise makes. Each request's queries
    are its last keys (``1 <= q_len <= seq_len``, as :class:`AttentionBatch` checks): the plan reads no other device
    tensor, so it cannot check that again, and a verify's clamped walk reads the request's last key.
    ``splits`` forces the split count; ``overrides`` replace fields of the :class:`LaunchPolicy` (the tuning sweeps
    use them; ``rows`` pads the query tile further, ``max_registers=0`` lifts the cap).
    """
    if triton is None:
        raise _unsupported("Triton is not installed")
    window = Window(keys)
    dim, hkv = k_buffer.shape[2], k_buffer.shape[1]
    _check_supported(k_buffer, v_buffer, page_size, num_heads_q, max_q_len, sinks)
    if not (math.isfinite(sm_scale) and sm_scale > 0):  # the kernel scales each tile's row max, which needs > 0
        raise _unsupported(f"sm_scale {sm_scale!r}: the kernel needs a finite softmax scale > 0")
    device = k_buffer.device
    longest = max_seq_len if max_seq_len is not None else (int(seq_lens.max()) if seq_lens.numel() else 0)
    span = longest if window.keys is None else min(window.keys, longest)  # the middle every query attends, at most
    pairs, sms = seq_lens.numel() * hkv, _num_sms(device)
    policy = with_overrides(launch_policy(dim, num_heads_q // hkv, max_q_len, k_buffer.element_size(),
                                          is_latency_bound(pairs, sms), page_size), overrides)
    launch = plan_launch(policy, pairs, span, sms, verify=max_q_len > 1, splits=splits, overridden=overrides,
                         buffer_elements=max(addressed_elements(k_buffer), addressed_elements(v_buffer)))
    if q_start is None:
        q_start = torch.arange(seq_lens.numel() + 1, device=device)
    return DecodePlan(
        k_buffer, v_buffer, table.to(device=device, dtype=torch.int32).contiguous(),
        row_start.to(device=device, dtype=torch.int32).contiguous(), seq_lens.to(device=device, dtype=torch.int32),
        q_start.to(device=device, dtype=torch.int32).contiguous(), max_q_len, page_size,
        NO_WINDOW if window.keys is None else window.keys, sm_scale, policy, launch,
        None if sinks is None else sinks.to(device=device, dtype=torch.float32).contiguous(),
        torch.zeros(pairs, dtype=torch.int32, device=device) if launch.merge == Merge.LAST_SPLIT else None,
    )


def plan_batch(batch: AttentionBatch, keys: Any, sinks: torch.Tensor | None = None, **tuning: Any) -> DecodePlan:
    """:func:`plan_decode` for an :class:`AttentionBatch` of decode or chain-verify requests."""
    if batch.tree_masks is not None:
        raise _unsupported("tree masks (a tree verify needs a custom mask; chain verify is supported)")
    q_lens = batch.q_lens
    longest = int(q_lens.max())
    if longest > MAX_QUERIES:
        b = int((q_lens > MAX_QUERIES).nonzero()[0])
        raise _unsupported(f"decode or chain verify up to {MAX_QUERIES} queries; "
                           f"request {b} has q_len {int(q_lens[b])}")
    if batch.page_size == 1:
        table, row_start = batch.kv_indices, batch.kv_indptr[:-1]
    else:
        block_table = batch.block_table()
        table = block_table.flatten()
        row_start = torch.arange(batch.batch_size, device=block_table.device) * block_table.shape[1]
    return plan_decode(batch.k_buffer, batch.v_buffer, table, row_start, batch.seq_lens, batch.page_size, keys,
                       batch.sm_scale, batch.q.shape[1], q_start=batch.qo_indptr, max_q_len=longest, sinks=sinks,
                       **tuning)


def run_batch(batch: AttentionBatch, keys: Any) -> AttentionResult:
    """The path's entry point: ``keys`` is the window in the kit's unit (None = full)."""
    out = plan_batch(batch, keys).run(batch.q)
    device = str(batch.device) if batch.device.type != "cpu" else "cpu (Triton interpreter)"
    return AttentionResult(out, path=NAME, tier="kit-triton", device=device)


def run_nan_filled(batch: AttentionBatch, keys: Any) -> torch.Tensor:
    """The kernel's output on ``batch``, written over NaN: an element the kernel leaves unwritten stays NaN."""
    out = torch.full_like(batch.q, float("nan"))
    plan_batch(batch, keys).run(batch.q, out)
    return out


def run_interpreted(batch: AttentionBatch, keys: Any, timeout_s: float = 300) -> AttentionResult:
    """The kit's kernel on a CPU ``batch`` in Triton's CPU interpreter, from any process (a child process runs it:
    :func:`~swa_kit.attention.kit.interpreted.run_in_interpreter`). Tiny batches only: the interpreter executes
    the kernel in Python, one program at a time. The batch is planned here first, so what the kernel cannot
    compute is refused before any child starts."""
    if triton is None:
        raise PathUnavailableError("Triton is not installed here (it needs Linux or WSL): pip install triton")
    if batch.device.type != "cpu":
        raise PathUnavailableError(f"the interpreter runs CPU tensors; this batch is on {batch.device}")
    plan_batch(batch, keys)
    out = run_in_interpreter(run_nan_filled, batch, keys, timeout_s=timeout_s)
    # the tier says "interpreter", as aiter's interpreted kernel's does (announce wants one word per field)
    return AttentionResult(out, path=NAME, tier="kit-triton-interpreter", device="cpu")


def available() -> tuple[bool, str]:
    if triton is None:
        return False, "Triton is not installed (pip install triton; ROCm builds of torch bring their own)"
    if torch.cuda.is_available():
        return True, f"Triton {triton.__version__} on {torch.cuda.get_device_name()}"
    if interpreter_active():
        return True, f"Triton {triton.__version__} CPU interpreter (TRITON_INTERPRET=1 set before triton's import)"
    return False, "no GPU; on CPU start Python with TRITON_INTERPRET=1 (Triton's interpreter) or use the reference"
