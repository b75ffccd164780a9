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
``splits`` chunks; each writes a partial output and its log-sum-exp, and the last split of
each (request, KV head) to finish merges them (in a latency-bound batch, one pair per 8 SMs or
fewer, a small merge kernel does, its programs side by side). With one split the kernel writes the output directly.

Chain verify (2..8 draft tokens per request, ragged) is the same walk: every draft attends the
middle of the window, ``L - W .. L - q_len``, which the splits share out as in decode; the
``q_len - 1`` keys on either side, which only some drafts see, go into one extra 16-key tile
with a per-query causal-and-window mask, folded in by split 0 before its walk (at head_dim <= 64 loaded
before the walk and folded in after it, so its round trips overlap the walk's). In a latency-bound batch
whose window is split anyway, the edge tile is a program of its own, beside the middle's.

:class:`DecodePlan` does the host-side work once per batch (tables, splits, scratch
buffers), like a serving engine's per-step metadata, so that :meth:`DecodePlan.run` is
only the kernel launches; that is what the benchmarks time.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.attention.kit.interpreted import refuse_bfloat16
from swa_kit.errors import PathUnavailableError
from swa_kit.window import Window

try:  # Triton is a Linux dependency of the kit; elsewhere the path reports itself unavailable
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where Triton is missing
    triton = None

#: A window wider than any context: what "no window" (full causal attention) becomes.
NO_WINDOW = 2**31 - 1

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)

#: Most queries one request may bring: speculative decoding verifies 2-8 draft tokens per step.
MAX_QUERIES = 8

# Tuned on an H200 (docs/kernel-notes.md, v4-v13): K (and V) tiles of 16 KiB per pipeline stage (64 keys
# at head_dim 128 in bf16), 8 KiB once a program carries more than 32 query rows (a verify's drafts x
# the GQA group); 4 warps; 3 pipeline stages (2 at head_dim 64), 5 where the grid is small (below); the window
# split into at most one wave of two programs per SM (v10), never chunks under 256 keys but in a latency-bound
# batch (below). A verify walks the same middle of the window as decode (v5), split the same way (v10).
TILE_BYTES = 16 * 1024
TILE_BYTES_MANY_ROWS = 8 * 1024  # rows > 32
NUM_WARPS = 4
NUM_STAGES = 3
NUM_STAGES_NARROW = 2  # head_dim <= 64, but a verify's 64-row tile at page size 1 (below)
PROGRAMS_PER_SM = 2
# Two K/V tiles in flight per program where the grid leaves each SM at most two programs. Triton's pipeliner puts
# a tile's table read a stage ahead of its K/V loads, so up to four stages buy one K/V buffer: a program waits
# out one tile's round trip at a time. Five buy two (70-78 KiB of shared memory a program). Against v9's
# policy, which split into more programs of one buffer each (rounding up to two or more per SM, a verify to
# four): decode 0.84-1.02x at B 8 (median 0.93x), verify 0.83-1.08x at B 8-32 (median 0.95x at B 8) (v10).
# Where four programs share an SM (B 128), two buffers cost residency: up to 1.37x slower.
DEEP_STAGES = 5
DEEP_PROGRAMS_PER_SM = 2
# A verify's registers per thread, capped (CUDA's maxnreg) so that four programs of four warps fit an
# SM's 65,536, as decode's 96-128 do: its taller query tile and edge tile would otherwise take 140-170, and
# with a quarter fewer programs in flight its walk fell up to 1.47x behind decode's (v5). Decode runs uncapped
# (the cap cost it 1-2%), and so does a verify with two K/V buffers: two programs an SM leave 256 a thread.
MAX_REGISTERS = 128
# The cap was measured where a verify's output accumulator (rows x head_dim fp32 values over the program's 128
# threads) takes 32 registers a thread: every head shape of the grid (32 rows at head_dim 128, 16 at 256, 64 at 64).
# A taller or wider tile runs uncapped: at 64 rows and head_dim 256 (GQA 8 with 8 drafts) the accumulator alone takes
# 128 and ptxas refuses the cap ("Insufficient registers"); at 128 rows and head_dim 128 the cap spills 664 bytes.
CAPPED_ACCUMULATOR_REGISTERS = 32
MIN_CHUNK = 256
# A batch with at most one (request, KV head) pair per 8 SMs (B 1 at 8-16 KV heads on an H200) is
# latency-bound: its window is cut into chunks as short as one tile (Gemma's B 1 W 128: 10.7 against 14.4 us),
# and a second kernel merges them, its programs side by side (a fused merge puts 8-32 partials on one
# program's path: 0.5-7 us slower there). In every other batch the last split to finish merges (one launch
# fewer: verify up to 11% faster at B 8-32, decode from 4% faster to 1% slower) (v6).
LATENCY_BOUND_SMS_PER_PAIR = 8
# A chain's edge tile is loaded before the walk and folded in after it, so its two dependent round trips
# (table, then K/V) overlap the walk's, where its K and V (2 x 16 keys) fit in the registers: at head_dim 64
# they take 8 a thread, and GPT-OSS's verify was 1-12% faster in every cell; at 128 and 256 they take 16-32
# and spill under the cap: slower in 43 of 48 cells, by up to 36% (v6).
EDGE_PREFETCH_MAX_HEAD_DIM = 64
# In a latency-bound verify the edge tile gets a program of its own, beside the middle's chunks, where the window
# is split anyway (the merge runs either way): the edge's two round trips leave split 0's path. At B 1 that took
# Gemma's W 128 verify from 1.19-1.20x decode to 1.02-1.04x, 32/8/128's from 1.21-1.22x to 1.08-1.09x. In a
# batch that fills the GPU the extra program only costs (up to 2.15x decode at B 128 W 128); where the window fits
# one program it would add the merge kernel's launch (GPT-OSS B 1 W 128: 8.8 to 10.0 us) (v8).
# Where a verify's launch gets two K/V buffers (head_dim 128 and 256), the edge tile is the walk's last iteration
# instead: the pipeliner then issues its table and K/V reads ahead like any tile's. Loaded before the walk (even when
# folded in after it), its K went to shared memory for the dot, and was waited for, before the walk's first load.
# 0.90-0.98x the time at 32/8/128 B 8-32, 0.93-1.01x at Gemma's B 8; with one buffer it cost up to 8% (32/8/128
# B 128), and at GPT-OSS's 64 query rows a whole 64-key tile for 14 keys cost 4-22% (v11).
# A verify addresses K and V with 32-bit offsets where the buffers allow (offsets below 2**31 elements): 32-bit
# address arithmetic takes fewer instructions and registers. 0.943-1.013x v11's time (median 0.987x), where decode's
# unchanged code took 0.975-1.051x in the same A/B. Decode keeps 64-bit offsets: with 32-bit ones 32/8/128's
# one-buffer decode takes 96 registers against 106-121, a fifth program joins each SM at B 128, and those launches
# took 1.04-1.05x (v12). (A small batch waits on the latencies along each tile's dependent chain, not on its
# instruction count: v13's counters.)
INT32_OFFSETS_LIMIT = 2**31  # elements of a K or V buffer that 32-bit offsets can address
# A verify's walk loads whole tiles unmasked: a tile past its chunk's end reads the chunk's last key again (masked in
# the scores), and a slot's page and offset in it come from unsigned arithmetic (a shift and an AND at a power-of-two
# page, where signed division and remainder take four instructions). Each masked 16-byte copy cost a warp three to
# four predicate instructions more: with both, 32/8/128's capped verify walk's loop holds 546 SASS instructions
# against 623 (page size 16, sm_90), and took 0.948-1.020x v12's time at 32/8/128 (median 0.972x at B 128),
# 0.95-1.02x elsewhere.
# Decode keeps v12's masked walk: there the change moved registers both ways (Gemma's 126 to 148 at page size 16, a
# program fewer per SM: 1.15-1.33x at B 32; 32/8/128's 106 to 84 at page size 1, a fifth program per SM: 1.04-1.06x
# at B 128), and its time at B 1-8 by 0.91-1.05x (v13).

# Each score is scaled inside one fused multiply-add (``_fold_tile``, v9), so the kernels ask for fusion by name:
# Triton 3.9 fuses by default and warns that from 3.10 on it will not.
FP_FUSION = True


def block_n_for(head_dim: int, itemsize: int = 2, rows: int = 16) -> int:
    """Keys per tile: a constant K tile in bytes per pipeline stage, at least 16 (tl.dot's minimum)."""
    tile = TILE_BYTES if rows <= 32 else TILE_BYTES_MANY_ROWS
    return max(16, tile // (head_dim * itemsize))


BLOCK_N = block_n_for(128)


def rows_for(max_q_len: int, group: int) -> int:
    """Rows of a program's query tile: every (query, head) pair of one KV head, padded to a power of two
    of at least 16 (tl.dot's smallest)."""
    return max(16, 1 << max(0, max_q_len * group - 1).bit_length())


def accumulator_registers(rows: int, head_dim: int, num_warps: int = NUM_WARPS) -> int:
    """Registers a thread holds for a program's fp32 output accumulator, ``rows`` x ``head_dim``."""
    return rows * head_dim // (32 * num_warps)


def launch_config(head_dim: int, group: int, max_q_len: int, itemsize: int = 2,
                  latency_bound: bool = False, page_size: int = 16) -> dict[str, int]:
    """Tile, warps, pipeline depth, register cap and split policy for one shape (docs/kernel-notes.md);
    ``latency_bound``: the batch is too small to fill the GPU (:func:`is_latency_bound`)."""
    rows = rows_for(max_q_len, group)
    block_n = block_n_for(head_dim, itemsize, rows)
    # At page size 1 every key's slot is a table read that the K/V load waits on; a third stage lets the
    # pipeliner issue it a tile early. Decode's 16 rows hide it; GPT-OSS's 64-row verify did not: 93.1 against
    # 113.1 us at B 128 W 1024, 313 against 387 us at W 4096 (v6).
    narrow = head_dim <= 64 and not (rows > 32 and page_size == 1)
    # Two buffers were measured on an H200 only; on ROCm, Triton pipelines differently and an MI300's 64 KiB of
    # shared memory (LDS) per workgroup would not hold a program's 70-78 KiB.
    deep = not latency_bound and torch.version.hip is None
    return {
        "deep_pipeline": int(deep),
        "edge_prefetch": int(max_q_len > 1 and head_dim <= EDGE_PREFETCH_MAX_HEAD_DIM),
        "edge_split": int(max_q_len > 1 and latency_bound),
        "edge_in_walk": int(max_q_len > 1 and head_dim > EDGE_PREFETCH_MAX_HEAD_DIM and deep),
        "int32_offsets": int(max_q_len > 1),
        "clamped_walk": int(max_q_len > 1),
        "fused_merge": int(not latency_bound),
        "rows": rows,
        "block_n": block_n,
        "num_warps": NUM_WARPS,
        "num_stages": NUM_STAGES_NARROW if narrow else NUM_STAGES,
        "max_registers": MAX_REGISTERS if max_q_len > 1 and accumulator_registers(rows, head_dim)
        <= CAPPED_ACCUMULATOR_REGISTERS else 0,
        "programs_per_sm": PROGRAMS_PER_SM,
        "whole_wave": int(not latency_bound),
        "min_chunk": block_n if latency_bound else MIN_CHUNK,
    }


def runs_deep(config: dict[str, int], programs: int, chunk: int, num_sms: int) -> bool:
    """Whether a launch gets two K/V buffers (:data:`DEEP_STAGES`, uncapped registers): the config allows it, the grid
    leaves each SM at most :data:`DEEP_PROGRAMS_PER_SM` programs, and a chunk has more than one tile to overlap."""
    return bool(config["deep_pipeline"]) and programs <= DEEP_PROGRAMS_PER_SM * num_sms and chunk > config["block_n"]


def walks_edge(config: dict[str, int], deep: bool, overridden: Container[str] = ()) -> bool:
    """Whether a verify walks its edge tile as the loop's last iteration. Where ``edge_in_walk`` is among the
    ``overridden`` names, as the config says (an explicit choice); otherwise where the config allows it, the launch
    has two K/V buffers (:func:`runs_deep`), and no other switch places the edge tile (prefetched, or a program of
    its own)."""
    if "edge_in_walk" in overridden:
        return bool(config["edge_in_walk"])
    return bool(config["edge_in_walk"]) and deep and not (config["edge_prefetch"] or config["edge_split"])


def is_latency_bound(pairs: int, num_sms: int) -> bool:
    """Whether a batch of ``pairs`` (request, KV head) pairs leaves most SMs idle, whatever its window."""
    return pairs * LATENCY_BOUND_SMS_PER_PAIR <= num_sms


def kernel_constexprs(*, group: int, head_dim: int, rows: int, page_size: int, block_n: int, splits: int,
                      verify: bool, edge_prefetch: bool, edge_split: bool, fused_merge: bool, sinks: bool,
                      edge_in_walk: bool = False, int32_offsets: bool = False,
                      clamped_walk: bool = False) -> dict[str, Any]:
    """The attend kernel's compile-time arguments: what :meth:`DecodePlan.run` launches with, and what
    ``benchmarks/kernel_resources.py`` compiles (one list, so the two cannot drift apart)."""
    merged_here = fused_merge and splits > 1
    return {"GROUP": group, "ROWS": rows, "HEAD_DIM": head_dim, "PAGE": page_size, "BLOCK_N": block_n,
            "SPLIT": splits > 1, "VERIFY": verify, "EDGE": MAX_QUERIES, "EDGE_PREFETCH": edge_prefetch,
            "EDGE_SPLIT": edge_split, "EDGE_IN_WALK": verify and edge_in_walk, "FUSED_MERGE": merged_here,
            "USE_SINKS": sinks, "INT32_OFFSETS": int32_offsets, "CLAMPED_WALK": clamped_walk,
            "MERGE_SPLITS": 1 << (splits - 1).bit_length() if merged_here else 1}


if triton is not None:

    @triton.jit
    def _kv_slots(table_ptr, row, pos, valid, PAGE: tl.constexpr, INT32_OFFSETS: tl.constexpr,
                  UNMASKED: tl.constexpr):
        """Buffer slot of each key position: its page from the table, then the offset inside the page (int32 where
        every offset into the K and V buffers fits, int64 otherwise). ``UNMASKED``: every position is a key, read
        without a mask, its page and offset from unsigned arithmetic (positions are never negative)."""
        if UNMASKED:
            upos = pos.to(tl.uint32)
            page = tl.load(table_ptr + row + (upos // PAGE).to(tl.int32))
            in_page = (upos % PAGE).to(tl.int32)
        else:
            page = tl.load(table_ptr + row + pos // PAGE, mask=valid, other=0)
            in_page = pos % PAGE
        if INT32_OFFSETS:
            return page * PAGE + in_page
        else:
            return page.to(tl.int64) * PAGE + in_page

    @triton.jit
    def _load_kv(k_ptr, v_ptr, table_ptr, row, kv_head, dims, pos, valid, stride_ks, stride_kh, stride_vs, stride_vh,
                 PAGE: tl.constexpr, INT32_OFFSETS: tl.constexpr, UNMASKED: tl.constexpr = False):
        """K and V of the keys at ``pos`` (zero where not ``valid``: nothing is read there). ``UNMASKED``: every
        position is a key to read (``valid`` is not looked at)."""
        slot = _kv_slots(table_ptr, row, pos, valid, PAGE, INT32_OFFSETS, UNMASKED)
        k_ptrs = k_ptr + slot[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
        v_ptrs = v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + dims[None, :]
        if UNMASKED:
            return tl.load(k_ptrs), tl.load(v_ptrs)
        else:
            return tl.load(k_ptrs, mask=valid[:, None], other=0.0), tl.load(v_ptrs, mask=valid[:, None], other=0.0)

    @triton.jit
    def _fold_tile(s, scale_log2, v, m_i, l_i, acc, SAFE_MAX: tl.constexpr):
        """Online softmax: fold one tile of raw scores ``s`` (pairs not attended at -inf) and its values in.

        The running max ``m_i`` is in base-2 logits. The scale (> 0, so the max commutes with it) is applied to
        the row max, then once per score inside ``s * scale - m``, which compiles to one fused multiply-add
        (GPT-OSS's 64-row verify: up to 3% faster, median 1.4%, than scaling every score first; v9).
        ``SAFE_MAX``: some row may have no key yet; ``exp2(-inf - 0) = 0`` keeps it empty instead of NaN.
        """
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        if SAFE_MAX:
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        p = tl.exp2(s * scale_log2 - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, l_i, acc

    @triton.jit
    def _edge_tile(k_ptr, v_ptr, table_ptr, row, kv_head, dims, first, mid_lo, mid_hi, seq_len, on,
                   stride_ks, stride_kh, stride_vs, stride_vh, PAGE: tl.constexpr, EDGE: tl.constexpr,
                   INT32_OFFSETS: tl.constexpr):
        """Both edges of a chain's window in one tile of 2 x EDGE keys: ``[first, mid_lo)`` in its first half,
        ``[mid_hi, seq_len)`` in its second (both empty unless ``on``). Returns the positions, which of them
        are keys, and K and V."""
        j = tl.arange(0, 2 * EDGE)
        in_front = j < EDGE
        pos = tl.where(in_front, first + j, mid_hi + j - EDGE)
        valid = pos < tl.where(in_front, tl.where(on, mid_lo, first), tl.where(on, seq_len, mid_hi))
        k, v = _load_kv(k_ptr, v_ptr, table_ptr, row, kv_head, dims, pos, valid, stride_ks, stride_kh, stride_vs,
                        stride_vh, PAGE, INT32_OFFSETS)
        return pos, valid, k, v

    @triton.jit
    def _fold_edge(q, q_pos, pos, valid, k, v, window, sm_scale_log2, m_i, l_i, acc):
        """Fold the edge tile in, each row masked to its query's window and causally."""
        keep = valid[None, :] & (pos[None, :] <= q_pos[:, None]) & (pos[None, :] > q_pos[:, None] - window)
        s = tl.where(keep, tl.dot(q, tl.trans(k)), float("-inf"))
        return _fold_tile(s, sm_scale_log2, v, m_i, l_i, acc, True)

    @triton.jit
    def _walk(q, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, sm_scale_log2, m_i, l_i, acc, stride_ks,
              stride_kh, stride_vs, stride_vh, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
              INT32_OFFSETS: tl.constexpr, CLAMPED_WALK: tl.constexpr):
        """The chunk ``[lo, hi)`` of the middle, with no mask but the chunk's end: every row sees every key.
        ``CLAMPED_WALK``: a tile reads past the chunk's end its last key again, unmasked (the scores mask it)."""
        for start in range(lo, hi, BLOCK_N):
            pos = start + tl.arange(0, BLOCK_N)
            valid = pos < hi
            k, v = _load_kv(k_ptr, v_ptr, table_ptr, row, kv_head, dims,
                            tl.minimum(pos, hi - 1) if CLAMPED_WALK else pos, valid, stride_ks, stride_kh, stride_vs,
                            stride_vh, PAGE, INT32_OFFSETS, CLAMPED_WALK)
            s = tl.where(valid[None, :], tl.dot(q, tl.trans(k)), float("-inf"))
            m_i, l_i, acc = _fold_tile(s, sm_scale_log2, v, m_i, l_i, acc, False)  # each tile has a key every row sees
        return m_i, l_i, acc

    @triton.jit
    def _walk_then_edge(q, q_pos, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, first, mid_lo, mid_hi, seq_len,
                        on, window, sm_scale_log2, m_i, l_i, acc, stride_ks, stride_kh, stride_vs, stride_vh,
                        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, EDGE: tl.constexpr, ROWS: tl.constexpr,
                        INT32_OFFSETS: tl.constexpr, CLAMPED_WALK: tl.constexpr):
        """The chunk ``[lo, hi)`` of the middle, then (if ``on``) the edge tile as one more iteration of the same loop,
        so that the pipeliner loads it ahead like any tile. Only that iteration is masked per query. ``CLAMPED_WALK``:
        as in :func:`_walk`, with the edge iteration's positions clamped to the request's last key (every position
        from ``first`` on is in some query's window)."""
        j = tl.arange(0, BLOCK_N)
        in_front = j < EDGE
        e_pos = tl.where(in_front, first + j, mid_hi + j - EDGE)  # both edges, as in _edge_tile, then nothing
        e_ok = (j < 2 * EDGE) & (e_pos < tl.where(in_front, mid_lo, seq_len))
        n_mid = tl.cdiv(tl.maximum(hi - lo, 0), BLOCK_N)
        for it in range(0, n_mid + on.to(tl.int32)):
            is_edge = it == n_mid
            pos = tl.where(is_edge, e_pos, lo + it * BLOCK_N + j)
            valid = tl.where(is_edge, e_ok, pos < hi)
            last = tl.where(is_edge, seq_len, hi) - 1
            k, v = _load_kv(k_ptr, v_ptr, table_ptr, row, kv_head, dims,
                            tl.minimum(pos, last) if CLAMPED_WALK else pos, valid, stride_ks, stride_kh, stride_vs,
                            stride_vh, PAGE, INT32_OFFSETS, CLAMPED_WALK)
            qk = tl.dot(q, tl.trans(k))
            if is_edge:
                keep = valid[None, :] & (pos[None, :] <= q_pos[:, None]) & (pos[None, :] > q_pos[:, None] - window)
            else:
                keep = tl.broadcast_to(valid[None, :], (ROWS, BLOCK_N))
            # SAFE_MAX: with no middle (a window under the drafts) the edge comes first, and a row may have no key in it
            m_i, l_i, acc = _fold_tile(tl.where(keep, qk, float("-inf")), sm_scale_log2, v, m_i, l_i, acc, True)
        return m_i, l_i, acc

    @triton.jit
    def _sink_log2(sink_ptr, heads):
        """Each head's attention-sink logit (natural log, as aiter's ``sinks`` takes it) in the kernel's base 2."""
        return tl.load(sink_ptr + heads).to(tl.float32) * 1.4426950408889634

    @triton.jit
    def _merge_rows(part_out_ptr, part_lse_ptr, sink_ptr, out_ptr, first_part, num_splits, tok, heads, dims, row_ok,
                    stride_ot, stride_oh, HEAD_DIM: tl.constexpr, USE_SINKS: tl.constexpr, MERGE_SPLITS: tl.constexpr):
        """Merge every split's partial output of one program's rows, in split order (so the result does not
        depend on which program merges), and write the output. Reads go to L2 (``.cg``): other SMs wrote them.
        The loop over splits is unrolled (``MERGE_SPLITS``: their count rounded up to a power of two), so that
        every split's reads can be in flight at once instead of one L2 round trip after another."""
        splits = tl.arange(0, MERGE_SPLITS)
        lse = tl.load(part_lse_ptr + first_part[:, None] + splits[None, :],
                      mask=row_ok[:, None] & (splits[None, :] < num_splits), other=float("-inf"), cache_modifier=".cg")
        top = tl.max(lse, 1)
        if USE_SINKS:
            sink = _sink_log2(sink_ptr, heads)
            top = tl.maximum(top, sink)
        top = tl.where(top == float("-inf"), 0.0, top)  # a row with no key and no sink: weights stay zero
        weight = tl.exp2(lse - top[:, None])
        denom = tl.sum(weight, 1)
        if USE_SINKS:
            denom += tl.exp2(sink - top)
        acc = tl.zeros([first_part.shape[0], HEAD_DIM], tl.float32)
        for s in tl.static_range(MERGE_SPLITS):  # no read waits on another: the mask needs only num_splits
            live = row_ok & (tl.full(first_part.shape, s, tl.int32) < num_splits)
            part = tl.load(part_out_ptr + (first_part + s)[:, None] * HEAD_DIM + dims[None, :], mask=live[:, None],
                           other=0.0, cache_modifier=".cg")
            acc += part * tl.sum(tl.where(splits[None, :] == s, weight, 0.0), 1)[:, None]
        o_ptrs = out_ptr + tok[:, None] * stride_ot + heads[:, None] * stride_oh + dims[None, :]
        tl.store(o_ptrs, (acc / denom[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])

    @triton.jit
    def _swa_attend_kernel(
        q_ptr, k_ptr, v_ptr,  # q [T, Hq, D] (T = total queries); k, v [slots, Hkv, D] (last dim contiguous)
        q_start_ptr,  # qo_indptr: request b's queries are rows q_start[b] .. q_start[b + 1] - 1 of q
        table_ptr, row_start_ptr, seq_len_ptr,  # page table, where each request's row starts, keys per request
        sink_ptr,  # [Hq] float32 attention-sink logits (natural log, on the scaled-logit scale), if USE_SINKS
        out_ptr, part_out_ptr, part_lse_ptr,  # out [T, Hq, D]; partials [T, Hq, S, D] and [T, Hq, S]
        lock_ptr,  # FUSED_MERGE: one int32 counter per (request, KV head), zero between calls
        sm_scale_log2,  # softmax scale times log2(e): the kernel works in base 2 (exp2 is one instruction)
        window,  # keys a query attends, counting itself
        chunk,  # window positions per split (a multiple of BLOCK_N)
        num_splits,
        stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_ot, stride_oh,
        GROUP: tl.constexpr, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
        BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,  # SPLIT: write partials, then merge them (FUSED_MERGE) or not
        VERIFY: tl.constexpr,  # more than one query per request: the window's edges need a per-query mask
        EDGE: tl.constexpr,  # keys per half of the edge tile: an edge holds at most MAX_QUERIES - 1 keys
        EDGE_PREFETCH: tl.constexpr,  # load the edge tile before the walk, fold it in after
        EDGE_SPLIT: tl.constexpr,  # the edge tile is the last split's only work (its chunk of the middle is empty)
        EDGE_IN_WALK: tl.constexpr,  # the edge tile is the walk's last iteration, its loads pipelined with the middle's
        FUSED_MERGE: tl.constexpr,  # SPLIT: the last split to finish merges; otherwise _merge_splits_kernel does
        USE_SINKS: tl.constexpr,
        MERGE_SPLITS: tl.constexpr,  # FUSED_MERGE: the split count rounded up to a power of two (1 otherwise)
        INT32_OFFSETS: tl.constexpr,  # every offset into K and V fits in 32 bits: cheaper address arithmetic
        CLAMPED_WALK: tl.constexpr,  # the walk's tiles load unmasked, past the chunk's end its last key again
    ):
        b = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)

        # Rows of the tile: query i of the request and head h of the GQA group, row = i * GROUP + h.
        q_first = tl.load(q_start_ptr + b)
        q_len = tl.load(q_start_ptr + b + 1) - q_first
        rows = tl.arange(0, ROWS)
        qi = rows // GROUP
        heads = kv_head * GROUP + rows % GROUP
        row_ok = qi < q_len
        dims = tl.arange(0, HEAD_DIM)
        tok = (q_first + qi).to(tl.int64)
        q = tl.load(q_ptr + tok[:, None] * stride_qt + heads[:, None] * stride_qh + dims[None, :],
                    mask=row_ok[:, None], other=0.0)

        # The window bounds the walk: the first query (position L - q_len) sees keys from
        # L - q_len - W + 1 on, the last query up to L - 1. Nothing before is ever loaded.
        # Every query attends the middle [L - W, L - q_len + 1), which the splits share out
        # exactly as in decode; only the q_len - 1 keys before it (seen by the earlier queries) and
        # the q_len - 1 after it (the drafts, seen by the later ones) need a per-query mask: split 0
        # takes both in one tile before its walk (placed after it, the tile's addressing stayed live
        # through the walk and cost registers), or as its walk's last iteration (EDGE_IN_WALK), or
        # prefetched (EDGE_PREFETCH), or in a split of its own (EDGE_SPLIT). In decode (q_len 1) the
        # middle is the window.
        seq_len = tl.load(seq_len_ptr + b)
        first = tl.maximum(seq_len - q_len - window + 1, 0)
        mid_lo = tl.maximum(seq_len - window, first)
        mid_hi = tl.maximum(seq_len - q_len + 1, mid_lo)
        lo = mid_lo + split * chunk  # this program's chunk of the middle: [lo, hi)
        hi = tl.minimum(lo + chunk, mid_hi)
        edge_on = (split == (num_splits - 1 if EDGE_SPLIT else 0)) & (q_len > 1)
        row = tl.load(row_start_ptr + b).to(tl.int64)

        m_i = tl.full([ROWS], float("-inf"), tl.float32)  # running max (base-2 logits)
        l_i = tl.zeros([ROWS], tl.float32)  # running softmax denominator
        acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
        q_pos = seq_len - q_len + qi
        if VERIFY and not EDGE_IN_WALK:
            if EDGE_PREFETCH:  # in flight during the walk; only split 0 of a chain loads anything
                e_pos, e_ok, e_k, e_v = _edge_tile(k_ptr, v_ptr, table_ptr, row, kv_head, dims, first, mid_lo,
                                                   mid_hi, seq_len, edge_on, stride_ks, stride_kh, stride_vs,
                                                   stride_vh, PAGE, EDGE, INT32_OFFSETS)
            else:
                if edge_on:
                    e_pos, e_ok, e_k, e_v = _edge_tile(k_ptr, v_ptr, table_ptr, row, kv_head, dims, first, mid_lo,
                                                       mid_hi, seq_len, edge_on, stride_ks, stride_kh, stride_vs,
                                                       stride_vh, PAGE, EDGE, INT32_OFFSETS)
                    m_i, l_i, acc = _fold_edge(q, q_pos, e_pos, e_ok, e_k, e_v, window, sm_scale_log2, m_i, l_i, acc)

        if EDGE_IN_WALK:
            m_i, l_i, acc = _walk_then_edge(q, q_pos, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, first,
                                            mid_lo, mid_hi, seq_len, edge_on, window, sm_scale_log2, m_i, l_i, acc,
                                            stride_ks, stride_kh, stride_vs, stride_vh, PAGE, BLOCK_N, EDGE, ROWS,
                                            INT32_OFFSETS, CLAMPED_WALK)
        else:
            m_i, l_i, acc = _walk(q, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, sm_scale_log2, m_i, l_i, acc,
                                  stride_ks, stride_kh, stride_vs, stride_vh, PAGE, BLOCK_N, INT32_OFFSETS,
                                  CLAMPED_WALK)
        if VERIFY and not EDGE_IN_WALK:
            if EDGE_PREFETCH:
                if edge_on:
                    m_i, l_i, acc = _fold_edge(q, q_pos, e_pos, e_ok, e_k, e_v, window, sm_scale_log2, m_i, l_i, acc)

        if not SPLIT:
            denom = l_i
            if USE_SINKS:  # the sink is one more logit in the softmax with a zero value row
                denom += tl.exp2(_sink_log2(sink_ptr, heads) - m_i)
            o_ptrs = out_ptr + tok[:, None] * stride_ot + heads[:, None] * stride_oh + dims[None, :]
            tl.store(o_ptrs, (acc / denom[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
        else:
            # A chunk past the end of a short request (or of a query's window) is empty: weight zero.
            empty = l_i == 0.0
            part = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
            lse = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
            base = (tok * tl.num_programs(1) * GROUP + heads) * num_splits + split  # [T, Hq, S] flat index
            tl.store(part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :], part, mask=row_ok[:, None])
            tl.store(part_lse_ptr + base, lse, mask=row_ok)
            if FUSED_MERGE:  # the last split of this (request, KV head) to finish merges them all: no second launch
                tl.debug_barrier()  # every thread's partials are written before the count goes up
                lock = lock_ptr + b * tl.num_programs(1) + kv_head
                if tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu") == num_splits - 1:
                    tl.atomic_xchg(lock, 0)  # ready for the next call (a plan runs on one stream at a time)
                    _merge_rows(part_out_ptr, part_lse_ptr, sink_ptr, out_ptr, base - split, num_splits, tok, heads,
                                dims, row_ok, stride_ot, stride_oh, HEAD_DIM, USE_SINKS, MERGE_SPLITS)

    @triton.jit
    def _merge_splits_kernel(
        part_out_ptr, part_lse_ptr, sink_ptr, out_ptr, stride_ot, stride_oh, num_splits,
        SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, USE_SINKS: tl.constexpr,
    ):
        tok = tl.program_id(0)
        head = tl.program_id(1)
        splits = tl.arange(0, SPLITS_PAD)
        dims = tl.arange(0, HEAD_DIM)
        base = (tok.to(tl.int64) * tl.num_programs(1) + head) * num_splits + splits
        lse = tl.load(part_lse_ptr + base, mask=splits < num_splits, other=float("-inf"))
        top = tl.max(lse, 0)  # the first split holds the query's first key, so the max is finite
        if USE_SINKS:
            sink = _sink_log2(sink_ptr, head)
            top = tl.maximum(top, sink)
        weight = tl.exp2(lse - top)
        part = tl.load(part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :],
                       mask=(splits < num_splits)[:, None], other=0.0)
        denom = tl.sum(weight, 0)
        if USE_SINKS:
            denom += tl.exp2(sink - top)
        out = tl.sum(part * weight[:, None], 0) / denom
        tl.store(out_ptr + tok.to(tl.int64) * stride_ot + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def _unsupported(what: str) -> PathUnavailableError:
    return PathUnavailableError(
        f"kit_triton_swa: {what}; run this batch on 'reference' or 'aiter_triton_unified' instead"
    )


def choose_splits(pairs: int, window_tokens: int, num_sms: int, block_n: int = BLOCK_N,
                  programs_per_sm: int = PROGRAMS_PER_SM, min_chunk: int = MIN_CHUNK,
                  whole_wave: bool = False) -> tuple[int, int]:
    """``(splits, chunk)``: cut a window of ``window_tokens`` keys so the grid fills the GPU.

    ``pairs`` = requests x KV heads, one program each without splitting. About ``programs_per_sm``
    programs per SM, rounded up, or with ``whole_wave`` never more. Chunks are whole
    tiles of ``block_n`` keys, at least ``min_chunk`` keys where the window allows; the
    split count depends on the window, never the context.
    """
    tiles = max(1, math.ceil(window_tokens / block_n))
    per_pair = programs_per_sm * num_sms / max(pairs, 1)
    wanted = max(1, math.floor(per_pair) if whole_wave else math.ceil(per_pair))
    wanted = min(wanted, max(1, window_tokens // min_chunk))
    chunk = math.ceil(tiles / min(tiles, wanted)) * block_n
    return math.ceil(tiles * block_n / chunk), chunk


def split_window(config: dict[str, int], pairs: int, window_tokens: int, num_sms: int,
                 splits: int | None = None) -> tuple[int, int, str]:
    """``(splits, chunk, merged_by)`` of one launch config (:func:`launch_config`): the policy's split of the window
    (:func:`choose_splits`) or ``splits`` forced, and who merges the partials: ``"-"`` (one split, nothing to
    merge), ``"last split"`` (the fused merge) or ``"merge kernel"``."""
    if splits is None:
        splits, chunk = choose_splits(pairs, window_tokens, num_sms, config["block_n"], config["programs_per_sm"],
                                      config["min_chunk"], bool(config["whole_wave"]))
    elif not isinstance(splits, int) or isinstance(splits, bool) or splits < 1:
        raise ValueError(f"splits={splits!r}: give an int >= 1 (or None for the policy's choice)")
    else:
        chunk = math.ceil(math.ceil(window_tokens / config["block_n"]) / splits) * config["block_n"]
    if config["edge_split"] and splits > 1:  # one program past the middle's chunks: its walk is empty
        splits += 1
    merged_by = "-" if splits == 1 else "last split" if config["fused_merge"] else "merge kernel"
    return splits, chunk, merged_by


class Launch(NamedTuple):
    """How one batch launches under a launch config (:func:`plan_launch`)."""

    splits: int  # programs per (request, KV head), an edge program included
    chunk: int  # window positions per split
    merged_by: str  # "-", "last split" or "merge kernel" (:func:`split_window`)
    deep: bool  # two K/V buffers (:func:`runs_deep`)
    num_stages: int
    max_registers: int  # 0: no cap
    edge_in_walk: bool  # a verify's edge tile as the walk's last iteration (:func:`walks_edge`)
    edge_split: bool  # a verify's edge tile in a program of its own


def plan_launch(config: dict[str, int], pairs: int, window_tokens: int, num_sms: int, splits: int | None = None,
                overridden: Container[str] = ()) -> Launch:
    """The launch :func:`plan_decode` makes of ``config`` for ``pairs`` (request, KV head) pairs over a window of
    ``window_tokens`` keys on ``num_sms`` SMs, without any tensor: the split, who merges, the pipeline depth and
    register cap, and where a verify's edge tile goes. ``overridden``: the config's names the caller gave explicitly
    (an explicit ``num_stages``, ``max_registers`` or ``edge_in_walk`` is taken as given)."""
    n_splits, chunk, merged_by = split_window(config, pairs, window_tokens, num_sms, splits)
    deep = runs_deep(config, pairs * n_splits, chunk, num_sms)
    return Launch(n_splits, chunk, merged_by, deep,
                  config["num_stages"] if "num_stages" in overridden or not deep else DEEP_STAGES,
                  config["max_registers"] if "max_registers" in overridden or not deep else 0,
                  walks_edge(config, deep, overridden), bool(config["edge_split"]) and n_splits > 1)


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
    splits: int
    chunk: int
    rows: int = 16  # the query tile's rows: every (query, head) pair of one KV head, padded
    block_n: int = BLOCK_N
    num_warps: int = NUM_WARPS
    num_stages: int = NUM_STAGES
    max_registers: int = 0  # per-thread register cap (CUDA), 0: none
    edge_prefetch: bool = False  # a chain's edge tile: loaded before the walk and folded in after it
    sinks: torch.Tensor | None = None  # [Hq] float32 sink logits (GPT-OSS), or None
    locks: torch.Tensor | None = None  # fused merge: int32 split counters, reset by the merging program
    edge_split: bool = False  # a chain's edge tile in a program of its own, the last split
    edge_in_walk: bool = False  # a chain's edge tile as the walk's last iteration
    int32_offsets: bool = False  # K and V addressed with 32-bit offsets (:func:`addresses_in_int32`)
    clamped_walk: bool = False  # the walk's tiles loaded unmasked (:data:`launch_config`'s ``clamped_walk``)

    def run(self, q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Attention of ``q`` ``[T, Hq, D]`` (the batch's queries back to back) over each query's window."""
        tokens, hq, dim = q.shape
        hkv = self.k_buffer.shape[1]
        group = hq // hkv
        out = torch.empty_like(q) if out is None else out
        if self.splits > 1:
            part_out = torch.empty(tokens, hq, self.splits, dim, dtype=torch.float32, device=q.device)
            part_lse = torch.empty(tokens, hq, self.splits, dtype=torch.float32, device=q.device)
        else:
            part_out = part_lse = out  # unused by the single-split kernel
        sinks = self.sinks if self.sinks is not None else out  # a placeholder pointer when unused
        _swa_attend_kernel[(self.seq_lens.numel(), hkv, self.splits)](
            q, self.k_buffer, self.v_buffer, self.q_start, self.table, self.row_start, self.seq_lens, sinks,
            out, part_out, part_lse, self.locks if self.locks is not None else out,
            self.sm_scale * math.log2(math.e), self.window, self.chunk, self.splits,
            q.stride(0), q.stride(1), self.k_buffer.stride(0), self.k_buffer.stride(1),
            self.v_buffer.stride(0), self.v_buffer.stride(1), out.stride(0), out.stride(1),
            **kernel_constexprs(group=group, head_dim=dim, rows=self.rows, page_size=self.page_size,
                                block_n=self.block_n, splits=self.splits, verify=self.max_q_len > 1,
                                edge_prefetch=self.edge_prefetch, edge_split=self.edge_split,
                                fused_merge=self.locks is not None, sinks=self.sinks is not None,
                                edge_in_walk=self.edge_in_walk, int32_offsets=self.int32_offsets,
                                clamped_walk=self.clamped_walk),
            num_warps=self.num_warps, num_stages=self.num_stages, enable_fp_fusion=FP_FUSION,
            **self._register_cap(),
        )
        if self.splits > 1 and self.locks is None:
            _merge_splits_kernel[(tokens, hq)](
                part_out, part_lse, sinks, out, out.stride(0), out.stride(1), self.splits,
                SPLITS_PAD=max(2, triton.next_power_of_2(self.splits)), HEAD_DIM=dim,
                USE_SINKS=self.sinks is not None, enable_fp_fusion=FP_FUSION,
            )
        return out

    def _register_cap(self) -> dict[str, int]:
        """CUDA's per-thread register cap, where there is one (ROCm's Triton has no such option)."""
        return {"maxnreg": self.max_registers} if self.max_registers and torch.version.hip is None else {}


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # Triton's CPU interpreter: a few splits still exercise the merge


def _check_supported(k_buffer: torch.Tensor, v_buffer: torch.Tensor, page_size: int, num_heads_q: int,
                     max_q_len: int, sinks: torch.Tensor | None) -> None:
    """Refuse (PathUnavailableError) every input the kernel cannot compute exactly."""
    dim, hkv = k_buffer.shape[2], k_buffer.shape[1]
    if k_buffer.dtype not in SUPPORTED_DTYPES or v_buffer.dtype != k_buffer.dtype:
        raise _unsupported(f"KV dtype {k_buffer.dtype}/{v_buffer.dtype} (supported: float16, bfloat16, both alike)")
    if k_buffer.device.type == "cpu":  # the CPU runs the kernel in Triton's interpreter
        refuse_bfloat16("kit_triton_swa", k_buffer.dtype)
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


def plan_decode(k_buffer: torch.Tensor, v_buffer: torch.Tensor, table: torch.Tensor, row_start: torch.Tensor,
                seq_lens: torch.Tensor, page_size: int, keys: Any, sm_scale: float, num_heads_q: int, *,
                q_start: torch.Tensor | None = None, max_q_len: int = 1, sinks: torch.Tensor | None = None,
                max_seq_len: int | None = None, splits: int | None = None, **overrides: int) -> DecodePlan:
    """Check a decode (or chain-verify) batch against what the kernel supports and plan its launch.

    ``table``/``row_start`` are ``kv_indices``/``kv_indptr[:-1]`` at page size 1, or the
    flattened block table and ``b * max_pages`` at larger page sizes. ``q_start`` is the
    batch's ``qo_indptr`` (default: one query per request) and ``max_q_len`` its longest
    query run, as a host int (a serving engine knows it without reading the GPU). ``sinks``:
    ``[Hq]`` per-head sink logits, as aiter's ``unified_attention(sinks=...)`` takes them.
    ``max_seq_len`` (a host int) spares the one read of ``seq_lens`` the plan otherwise makes. Each request's queries
    are its last keys (``1 <= q_len <= seq_len``, as :class:`AttentionBatch` checks): the plan reads no other device
    tensor, so it cannot check that again, and a verify's clamped walk reads the request's last key.
    ``splits`` forces the split count; ``overrides`` replace entries of :func:`launch_config`
    (the tuning sweeps use them; ``rows`` pads the query tile further, ``max_registers=0`` lifts the cap).
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
    config = with_overrides(launch_config(dim, num_heads_q // hkv, max_q_len, k_buffer.element_size(),
                                          is_latency_bound(pairs, sms), page_size), overrides)
    if "edge_in_walk" in overrides and config["edge_in_walk"] and (config["edge_prefetch"] or config["edge_split"]):
        raise ValueError("launch override edge_in_walk=1 places the edge tile itself: give edge_prefetch=0 and "
                         "edge_split=0 with it")
    for switch in ("edge_split", "edge_in_walk"):  # edge_split would launch a program with nothing to do
        if config[switch] and max_q_len == 1:
            raise ValueError(f"launch override {switch}=1 applies to a verify (max_q_len > 1): a decode batch has no "
                             "edge tile; leave it out")
    launch = plan_launch(config, pairs, span, sms, splits, overrides)
    if q_start is None:
        q_start = torch.arange(seq_lens.numel() + 1, device=device)
    return DecodePlan(
        k_buffer, v_buffer, table.to(device=device, dtype=torch.int32).contiguous(),
        row_start.to(device=device, dtype=torch.int32).contiguous(), seq_lens.to(device=device, dtype=torch.int32),
        q_start.to(device=device, dtype=torch.int32).contiguous(), max_q_len, page_size,
        NO_WINDOW if window.keys is None else window.keys, sm_scale, launch.splits, launch.chunk,
        config["rows"], config["block_n"], config["num_warps"], launch.num_stages, launch.max_registers,
        bool(config["edge_prefetch"]),
        None if sinks is None else sinks.to(device=device, dtype=torch.float32).contiguous(),
        torch.zeros(seq_lens.numel() * hkv, dtype=torch.int32, device=device) if launch.merged_by == "last split"
        else None,
        edge_split=launch.edge_split, edge_in_walk=launch.edge_in_walk,
        int32_offsets=addresses_in_int32(config, max(addressed_elements(k_buffer), addressed_elements(v_buffer)),
                                         overrides),
        clamped_walk=bool(config["clamped_walk"]),
    )


SWITCHES = {name: (0, 1) for name in ("clamped_walk", "deep_pipeline", "edge_in_walk", "edge_prefetch", "edge_split",
                                      "fused_merge", "int32_offsets", "whole_wave")}  # on (1) or off (0)


def addressed_elements(buffer: torch.Tensor) -> int:
    """How far past its first element a kernel's offsets into ``buffer`` reach, plus one: its element count when
    contiguous, more for a strided view (K as one half of a fused K/V buffer, say)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(buffer.shape, buffer.stride(), strict=True))


def addresses_in_int32(config: dict[str, int], buffer_elements: int, overridden: Container[str] = ()) -> bool:
    """Whether a launch addresses K and V with 32-bit offsets: where the config asks for them and the larger buffer
    reaches fewer than :data:`INT32_OFFSETS_LIMIT` elements (:func:`addressed_elements`). Asked for explicitly
    (``int32_offsets`` among the ``overridden`` names) on a buffer too large, refused by name: they would wrap."""
    fits = buffer_elements < INT32_OFFSETS_LIMIT
    if config["int32_offsets"] and not fits and "int32_offsets" in overridden:
        raise ValueError(f"launch override int32_offsets=1: a K or V buffer whose offsets reach {buffer_elements} "
                         f"elements needs 64-bit ones (32-bit offsets reach fewer than {INT32_OFFSETS_LIMIT}); leave "
                         "it out")
    return bool(config["int32_offsets"]) and fits


def with_overrides(config: dict[str, int], overrides: dict[str, int]) -> dict[str, int]:
    """``config`` with the tuning sweep's replacements, refused where unknown or (rows) too few."""
    unknown = sorted(set(overrides) - set(config))
    if unknown:
        raise ValueError(f"unknown launch override(s) {unknown}; known: {sorted(config)}")
    for name, value in overrides.items():
        lowest, highest = SWITCHES.get(name, (0, None) if name == "max_registers" else (1, None))  # 0 registers: no cap
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < lowest
                                  or (highest is not None and value > highest)):
            bounds = f">= {lowest}" if highest is None else f"in {lowest}..{highest}"
            raise ValueError(f"launch override {name}={value!r}: give an int {bounds} (or leave it out)")
    block_n = overrides.get("block_n") or config["block_n"]
    if block_n < 16 or block_n & (block_n - 1):
        raise _unsupported(f"block_n={block_n}: a key tile needs a power of two >= 16 (tl.dot's smallest)")
    rows = overrides.get("rows", config["rows"])
    if rows < config["rows"] or rows & (rows - 1):
        raise _unsupported(f"rows={rows}: the query tile needs a power of two >= {config['rows']}")
    return {**config, **{k: v for k, v in overrides.items() if v is not None}}


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


def _tier_device(batch: AttentionBatch) -> str:
    return str(batch.device) if batch.device.type != "cpu" else "cpu (Triton interpreter)"


def run_batch(batch: AttentionBatch, keys: Any) -> AttentionResult:
    """The path's entry point: ``keys`` is the window in the kit's unit (None = full)."""
    out = plan_batch(batch, keys).run(batch.q)
    return AttentionResult(out, path="kit_triton_swa", tier="kit-triton", device=_tier_device(batch))


def available() -> tuple[bool, str]:
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
