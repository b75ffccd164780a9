"""A teaching kernel: the window-bounded paged decode walk, with nothing tuned.

One program per (request, KV head) holds every query head of its GQA group and walks the window's keys only, each
key's slot found through its page in the table, so only the pages that hold the window's keys are read; an online
softmax folds the keys in. The kit's tuned kernel (:mod:`swa_kit.attention.kit.kernel`) does the same walk, split
across programs, with chain verify, sinks and a launch policy; read this one first. It runs anywhere Triton runs: on
a GPU, or in Triton's CPU interpreter through a child process (:func:`run`).
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.attention.kit.interpreted import refuse_bfloat16, run_in_interpreter
from swa_kit.errors import PathUnavailableError
from swa_kit.window import Window

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where Triton is missing
    triton = None

NAME = "kit_teaching"
NO_WINDOW = 2**31 - 1  # wider than any context: full causal attention
# Keys per loop step, so that every axis of a step's tiles is 16 long or more. Stepping a page at a time, page size 1
# gave outputs 8x too large on an H200 (Triton 3.6), where the CPU interpreter was right.
KEYS = 16


if triton is not None:

    @triton.jit
    def window_decode_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr,  # q, out [B, Hq, D]; k, v [slots, Hkv, D]
        block_table_ptr, seq_lens_ptr,  # block_table [B, max_pages] page ids; seq_lens [B] keys per request
        window, sm_scale, max_pages,  # keys a query attends (counting itself); softmax scale; the table's width
        stride_qb, stride_qh, stride_kslot, stride_kh, stride_vslot, stride_vh, stride_ob, stride_oh,
        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, KEYS: tl.constexpr,
    ):
        b = tl.program_id(0)  # the request
        kv_head = tl.program_id(1)  # the KV head, shared by GROUP query heads (GQA)
        heads = kv_head * GROUP + tl.arange(0, GROUP_PAD)
        head_ok = tl.arange(0, GROUP_PAD) < GROUP
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :],
                    mask=head_ok[:, None], other=0.0).to(tl.float32)

        # The query sits at position seq_len - 1 and attends the window's keys: positions first .. seq_len - 1.
        seq_len = tl.load(seq_lens_ptr + b)
        first = tl.maximum(seq_len - window, 0)  # the window's first key

        m = tl.full([GROUP_PAD], float("-inf"), tl.float32)  # running max of the scores
        denom = tl.zeros([GROUP_PAD], tl.float32)  # running sum of exp(score - m)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)  # running sum of exp(score - m) * value
        for start in range(first, seq_len, KEYS):  # the window's keys only, KEYS positions at a time
            pos = start + tl.arange(0, KEYS)
            in_window = pos < seq_len
            page = tl.load(block_table_ptr + b * max_pages + pos // PAGE, mask=in_window, other=0)  # each key's page
            slots = page * PAGE + pos % PAGE  # and its slot, inside that page
            k = tl.load(k_ptr + slots[:, None] * stride_kslot + kv_head * stride_kh + dims[None, :],
                        mask=in_window[:, None], other=0.0).to(tl.float32)  # nothing outside the window is read
            v = tl.load(v_ptr + slots[:, None] * stride_vslot + kv_head * stride_vh + dims[None, :],
                        mask=in_window[:, None], other=0.0).to(tl.float32)
            scores = tl.sum(q[:, None, :] * k[None, :, :], 2) * sm_scale  # [GROUP_PAD, KEYS]
            scores = tl.where(in_window[None, :], scores, float("-inf"))
            # Online softmax: rescale what came before to the new max, then add these keys.
            m_new = tl.maximum(m, tl.max(scores, 1))
            rescale = tl.exp(m - m_new)
            p = tl.exp(scores - m_new[:, None])
            denom = denom * rescale + tl.sum(p, 1)
            acc = acc * rescale[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)
            m = m_new

        out = acc / denom[:, None]
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])


def _check(batch: AttentionBatch) -> None:
    """Refuse what the teaching kernel does not compute: a verify, a shape tl.arange cannot take, bf16 on a CPU."""
    q_lens, head_dim = batch.q_lens, batch.q.shape[2]
    if bool((q_lens != 1).any()):
        raise PathUnavailableError(f"{NAME}: decode only (one query per request), got q_lens {q_lens.tolist()}; "
                                      "run a verify on 'kit_triton_swa' or 'reference'")
    if head_dim & (head_dim - 1) or batch.page_size & (batch.page_size - 1):
        raise PathUnavailableError(f"{NAME}: head_dim {head_dim} and page_size {batch.page_size} must be powers "
                                      "of two (tl.arange's lengths)")
    if batch.device.type == "cpu":
        refuse_bfloat16(NAME, batch.k_buffer.dtype)


def window_decode(batch: AttentionBatch, keys: Any) -> torch.Tensor:
    """Decode attention of ``batch`` (one query per request) over each query's window of ``keys`` keys (None: no
    window), by :func:`window_decode_kernel`. On a CPU the process must run Triton's interpreter (:func:`run`)."""
    if triton is None:
        raise PathUnavailableError(f"{NAME}: Triton is not installed here (it needs Linux or WSL): pip install "
                                      "triton")
    window = Window(keys)
    _check(batch)
    hq, hkv = batch.q.shape[1], batch.k_buffer.shape[1]
    table = batch.block_table().to(torch.int32)  # page size 1: one slot per entry
    seq_lens = batch.seq_lens.to(device=batch.device, dtype=torch.int32)
    q, k, v = batch.q, batch.k_buffer, batch.v_buffer
    out = torch.full_like(q, float("nan"))  # an element the kernel leaves unwritten stays NaN
    window_decode_kernel[(batch.batch_size, hkv)](
        q, k, v, out, table, seq_lens, NO_WINDOW if window.keys is None else window.keys, batch.sm_scale,
        table.shape[1], q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0),
        out.stride(1), GROUP=hq // hkv, GROUP_PAD=triton.next_power_of_2(hq // hkv), HEAD_DIM=q.shape[2],
        PAGE=batch.page_size, KEYS=KEYS,
    )
    return out


def run(batch: AttentionBatch, keys: Any) -> AttentionResult:
    """:func:`window_decode` on ``batch``'s device: compiled on a GPU, in Triton's CPU interpreter (a child process)
    on a CPU. The result says which."""
    Window(keys)
    _check(batch)
    if batch.device.type == "cpu":
        out = run_in_interpreter(window_decode, batch, keys)
        return AttentionResult(out, path=NAME, tier="kit-triton-interpreter", device="cpu")
    return AttentionResult(window_decode(batch, keys), path=NAME, tier="kit-triton", device=str(batch.device))
