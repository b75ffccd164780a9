"""The kit's own Triton kernel: sliding-window decode over the paged KV layout.

What it teaches: a decode query at position ``L - 1`` with a window of ``W`` keys sees
only positions ``L - W .. L - 1``. The kernel therefore starts its walk over the page
table at the page holding position ``L - W`` (the first in-window page) and stops at
the last one, so it touches ``W`` keys whatever the context ``L``: cost follows the
window, not the context. Nothing outside the window is ever loaded, so freed (even NaN)
slots cannot leak in.

One kernel serves both of the kit's layouts, because both address the same buffer
``k_buffer[slot, kv_head, :]``; only the table's granularity differs:

* page size 1 (SGLang's token-level layout): the table is ``kv_indices`` and request
  ``b``'s row starts at ``kv_indptr[b]``: one entry per token, ``slot = table[pos]``;
* page size ``P`` (a block table): row ``b`` of ``block_table`` holds page ids, and
  ``slot = table[pos // P] * P + pos % P``.

Work split (flash-decoding): a program owns one request, one KV head and one chunk of
the window. All ``Hq / Hkv`` query heads that share the KV head ride in the same
program (GQA), so each K/V tile is read from memory once for the whole group. When a
batch has too few (request, KV head) pairs to fill the GPU, the window is cut into
``splits`` chunks; each writes a partial output and its log-sum-exp, and a small
reduce kernel merges them. With one split the first kernel writes the output directly.

:class:`DecodePlan` does the host-side work once per batch (tables, splits, scratch
buffers), like a serving engine's per-step metadata, so that :meth:`DecodePlan.run` is
only the kernel launches; that is what the benchmarks time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from swa_kit.attention.backends import Backend, register
from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import BackendUnavailableError
from swa_kit.window import Window

try:  # Triton is a Linux dependency of the kit; elsewhere the path reports itself unavailable
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where Triton is missing
    triton = None

#: A window wider than any context: what "no window" (full causal attention) becomes.
NO_WINDOW = 2**31 - 1

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)

# Tuned on an H200 (docs/kernel-notes.md): K tiles of 8 KiB (32 keys at head_dim 128 in
# bf16), 4 warps, 3 pipeline stages (2 from head_dim 256 on: 3 ran at 65% of copy there, 2 at
# 91-93%); about four programs per multiprocessor before the window is split further, but
# never chunks under 256 keys (shorter chunks cost more than they hide).
TILE_BYTES = 8 * 1024
NUM_WARPS = 4
NUM_STAGES = 3
NUM_STAGES_WIDE_HEADS = 2  # head_dim >= 256
PROGRAMS_PER_SM = 4
MIN_CHUNK = 256


def block_n_for(head_dim: int, itemsize: int = 2) -> int:
    """Keys per tile: a constant 8 KiB of K (and of V) per pipeline stage, at least 16 (tl.dot's minimum)."""
    return max(16, TILE_BYTES // (head_dim * itemsize))


BLOCK_N = block_n_for(128)


if triton is not None:

    @triton.jit
    def _swa_decode_kernel(
        q_ptr, k_ptr, v_ptr,  # q [B, Hq, D]; k, v [slots, Hkv, D] (last dim contiguous)
        table_ptr, row_start_ptr, seq_len_ptr,  # page table, where each request's row starts, keys per request
        out_ptr, part_out_ptr, part_lse_ptr,  # out [B, Hq, D]; partials [B, Hq, S, D] and [B, Hq, S]
        sm_scale_log2,  # softmax scale times log2(e): the kernel works in base 2 (exp2 is one instruction)
        window,  # keys a query attends, counting itself
        chunk,  # window positions per split (a multiple of BLOCK_N)
        num_splits,
        stride_qb, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_ob, stride_oh,
        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,  # SPLIT: write partials
    ):
        b = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)

        # The window bounds the walk: keys L - W .. L - 1, i.e. from page (L - W) // PAGE on.
        seq_len = tl.load(seq_len_ptr + b)
        first = tl.maximum(seq_len - window, 0)
        lo = first + split * chunk
        hi = tl.minimum(lo + chunk, seq_len)
        row = tl.load(row_start_ptr + b).to(tl.int64)

        heads = kv_head * GROUP + tl.arange(0, GROUP_PAD)  # the query heads sharing this KV head
        head_ok = tl.arange(0, GROUP_PAD) < GROUP
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :], mask=head_ok[:, None], other=0.0)

        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)  # running max (base-2 logits)
        l_i = tl.zeros([GROUP_PAD], tl.float32)  # running softmax denominator
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            pos = start + tl.arange(0, BLOCK_N)
            valid = pos < hi
            page = tl.load(table_ptr + row + pos // PAGE, mask=valid, other=0)
            slot = page.to(tl.int64) * PAGE + pos % PAGE
            k = tl.load(k_ptr + slot[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
                        mask=valid[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k)) * sm_scale_log2  # [GROUP_PAD, BLOCK_N]
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds a valid key
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + dims[None, :],
                        mask=valid[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new

        if not SPLIT:
            o_ptrs = out_ptr + b * stride_ob + heads[:, None] * stride_oh + dims[None, :]
            tl.store(o_ptrs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
        else:
            # A chunk past the end of a short request is empty: weight zero in the reduce.
            empty = l_i == 0.0
            part = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
            lse = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
            base = (b * tl.num_programs(1) * GROUP + heads) * num_splits + split  # [B, Hq, S] flat index
            tl.store(part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :], part, mask=head_ok[:, None])
            tl.store(part_lse_ptr + base, lse, mask=head_ok)

    @triton.jit
    def _merge_splits_kernel(
        part_out_ptr, part_lse_ptr, out_ptr, stride_ob, stride_oh, num_splits,
        SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    ):
        b = tl.program_id(0)
        head = tl.program_id(1)
        splits = tl.arange(0, SPLITS_PAD)
        dims = tl.arange(0, HEAD_DIM)
        base = (b * tl.num_programs(1) + head) * num_splits + splits
        lse = tl.load(part_lse_ptr + base, mask=splits < num_splits, other=float("-inf"))
        weight = tl.exp2(lse - tl.max(lse, 0))  # the first split is never empty, so the max is finite
        part = tl.load(part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :],
                       mask=(splits < num_splits)[:, None], other=0.0)
        out = tl.sum(part * weight[:, None], 0) / tl.sum(weight, 0)
        tl.store(out_ptr + b * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def _unsupported(what: str) -> BackendUnavailableError:
    return BackendUnavailableError(
        f"kit_triton_swa: {what}; run this batch on 'reference' or 'aiter_triton_unified' instead"
    )


def choose_splits(pairs: int, window_tokens: int, num_sms: int, block_n: int = BLOCK_N,
                  programs_per_sm: int = PROGRAMS_PER_SM, min_chunk: int = MIN_CHUNK) -> tuple[int, int]:
    """``(splits, chunk)``: cut a window of ``window_tokens`` keys so the grid fills the GPU.

    ``pairs`` = requests x KV heads, one program each without splitting. Chunks are whole
    tiles of ``block_n`` keys, at least ``min_chunk`` keys where the window allows; the
    split count depends on the window, never the context.
    """
    tiles = max(1, math.ceil(window_tokens / block_n))
    wanted = max(1, math.ceil(programs_per_sm * num_sms / max(pairs, 1)))
    wanted = min(wanted, max(1, window_tokens // min_chunk))
    chunk = math.ceil(tiles / min(tiles, wanted)) * block_n
    return math.ceil(tiles * block_n / chunk), chunk


@dataclass
class DecodePlan:
    """One batch's launch plan: everything but the queries, computed once on the host."""

    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    table: torch.Tensor  # int32 page (or slot) ids
    row_start: torch.Tensor  # int32, where request b's row starts in ``table``
    seq_lens: torch.Tensor  # int32 keys per request
    page_size: int
    window: int  # keys; NO_WINDOW for full attention
    sm_scale: float
    splits: int
    chunk: int
    block_n: int = BLOCK_N
    num_warps: int = NUM_WARPS
    num_stages: int = NUM_STAGES

    def run(self, q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Attention of ``q`` ``[B, Hq, D]`` (one query per request) over its window."""
        batch, hq, dim = q.shape
        hkv = self.k_buffer.shape[1]
        group = hq // hkv
        out = torch.empty_like(q) if out is None else out
        if self.splits > 1:
            part_out = torch.empty(batch, hq, self.splits, dim, dtype=torch.float32, device=q.device)
            part_lse = torch.empty(batch, hq, self.splits, dtype=torch.float32, device=q.device)
        else:
            part_out = part_lse = out  # unused by the single-split kernel
        _swa_decode_kernel[(batch, hkv, self.splits)](
            q, self.k_buffer, self.v_buffer, self.table, self.row_start, self.seq_lens,
            out, part_out, part_lse, self.sm_scale * math.log2(math.e), self.window, self.chunk, self.splits,
            q.stride(0), q.stride(1), self.k_buffer.stride(0), self.k_buffer.stride(1),
            self.v_buffer.stride(0), self.v_buffer.stride(1), out.stride(0), out.stride(1),
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=dim,
            PAGE=self.page_size, BLOCK_N=self.block_n, SPLIT=self.splits > 1,
            num_warps=self.num_warps, num_stages=self.num_stages,
        )
        if self.splits > 1:
            _merge_splits_kernel[(batch, hq)](
                part_out, part_lse, out, out.stride(0), out.stride(1), self.splits,
                SPLITS_PAD=max(2, triton.next_power_of_2(self.splits)), HEAD_DIM=dim,
            )
        return out


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # Triton's CPU interpreter: a few splits still exercise the merge


def plan_decode(k_buffer: torch.Tensor, v_buffer: torch.Tensor, table: torch.Tensor, row_start: torch.Tensor,
                seq_lens: torch.Tensor, page_size: int, keys: Any, sm_scale: float, num_heads_q: int,
                splits: int | None = None, block_n: int | None = None, num_warps: int = NUM_WARPS,
                num_stages: int | None = None, programs_per_sm: int = PROGRAMS_PER_SM) -> DecodePlan:
    """Check a decode batch against what the kernel supports and plan its launch.

    ``table``/``row_start`` are ``kv_indices``/``kv_indptr[:-1]`` at page size 1, or the
    flattened block table and ``b * max_pages`` at larger page sizes. ``splits`` forces a
    split count, ``block_n`` keys per tile (the tuning sweep uses both); by default
    :func:`choose_splits` and :func:`block_n_for` pick them.
    """
    if triton is None:
        raise _unsupported("Triton is not installed")
    window = Window(keys)
    dim, hkv = k_buffer.shape[2], k_buffer.shape[1]
    if k_buffer.dtype not in SUPPORTED_DTYPES or v_buffer.dtype != k_buffer.dtype:
        raise _unsupported(f"KV dtype {k_buffer.dtype}/{v_buffer.dtype} (supported: float16, bfloat16, both alike)")
    if dim < 16 or dim & (dim - 1) or v_buffer.shape[2] != dim:
        raise _unsupported(f"head_dim {dim} (K) / {v_buffer.shape[2]} (V): needs one power of two >= 16")
    if k_buffer.stride(2) != 1 or v_buffer.stride(2) != 1:
        raise _unsupported("K/V buffers whose head_dim is not contiguous")
    if page_size < 1 or page_size & (page_size - 1):
        raise _unsupported(f"page_size {page_size}: needs a power of two")
    if num_heads_q % hkv:
        raise _unsupported(f"{num_heads_q} query heads over {hkv} KV heads (GQA needs a whole group per KV head)")
    longest = int(seq_lens.max()) if seq_lens.numel() else 0
    span = longest if window.keys is None else min(window.keys, longest)
    block_n = block_n or block_n_for(dim, k_buffer.element_size())
    num_stages = num_stages or (NUM_STAGES if dim < 256 else NUM_STAGES_WIDE_HEADS)
    auto_splits, chunk = choose_splits(seq_lens.numel() * hkv, span, _num_sms(k_buffer.device), block_n,
                                       programs_per_sm)
    if splits is not None:
        chunk = math.ceil(math.ceil(span / block_n) / splits) * block_n
        auto_splits = splits
    device = k_buffer.device
    return DecodePlan(
        k_buffer, v_buffer, table.to(device=device, dtype=torch.int32).contiguous(),
        row_start.to(device=device, dtype=torch.int32).contiguous(), seq_lens.to(device=device, dtype=torch.int32),
        page_size, NO_WINDOW if window.keys is None else window.keys, sm_scale, auto_splits, chunk,
        block_n, num_warps, num_stages,
    )


def plan_batch(batch: AttentionBatch, keys: Any, **tuning: Any) -> DecodePlan:
    """:func:`plan_decode` for an :class:`AttentionBatch` of decode requests (q_len 1 each)."""
    q_lens = batch.q_lens
    if bool((q_lens != 1).any()):
        b = int((q_lens != 1).nonzero()[0])
        raise _unsupported(f"decode only (one query per request); request {b} has q_len {int(q_lens[b])}")
    if batch.tree_masks is not None:
        raise _unsupported("tree masks (verify mode)")
    if batch.page_size == 1:
        table, row_start = batch.kv_indices, batch.kv_indptr[:-1]
    else:
        block_table = batch.block_table()
        table = block_table.flatten()
        row_start = torch.arange(batch.batch_size, device=block_table.device) * block_table.shape[1]
    return plan_decode(batch.k_buffer, batch.v_buffer, table, row_start, batch.seq_lens, batch.page_size, keys,
                       batch.sm_scale, batch.q.shape[1], **tuning)


def _tier_device(batch: AttentionBatch) -> str:
    return str(batch.device) if batch.device.type != "cpu" else "cpu (Triton interpreter)"


def run_batch(batch: AttentionBatch, keys: Any) -> AttentionResult:
    """The backend's entry point: ``keys`` is the window in the kit's unit (None = full)."""
    out = plan_batch(batch, keys).run(batch.q)
    return AttentionResult(out, path="kit_triton_swa", tier="kit-triton", device=_tier_device(batch))


def _available() -> tuple[bool, str]:
    if triton is None:
        return False, "Triton is not installed (pip install triton; ROCm builds of torch bring their own)"
    if torch.cuda.is_available():
        return True, f"Triton {triton.__version__} on {torch.cuda.get_device_name()}"
    if interpreter_active():
        return True, f"Triton {triton.__version__} CPU interpreter (TRITON_INTERPRET=1 set before triton's import)"
    return False, "no GPU; on CPU start Python with TRITON_INTERPRET=1 (Triton's interpreter) or use the reference"


def interpreter_active() -> bool:
    """Whether this process runs Triton kernels in the CPU interpreter.

    ``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates a function, and Triton
    decorates its own library functions (``tl.zeros``, ``tl.max``...) when ``triton`` is
    first imported. An interpreted kernel calling a compiled ``tl.zeros`` fails, so the
    variable must be set before anything imports triton: a process is interpreted or it
    is not. That is why the CPU tests run the kernel in a child process started with it.
    """
    return triton is not None and type(tl.zeros).__name__ == "InterpretedFunction"


register(
    Backend(
        name="kit_triton_swa",
        tier="kit-triton",
        description="the kit's Triton sliding-window decode kernel (split window, GQA groups, paged)",
        modes=frozenset({"decode"}),
        honours_window=True,
        convention="hf",  # the kit's own unit: keys attended, counting the query
        kv_layout="token",  # page size 1 via kv_indices; larger pages via AttentionBatch.block_table()
        devices=frozenset({"cuda", "rocm"}),
        available=_available,
        run=run_batch,
    )
)
