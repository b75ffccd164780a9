"""The kit's Triton kernels: sliding-window decode and chain verify over the paged KV layout.

A decode query at position ``L - 1`` with a window of ``W`` keys sees only positions ``L - W .. L - 1``: the walk
over the page table starts at the page holding position ``L - W`` and stops at the last one, so it touches ``W`` keys
whatever the context ``L``. Nothing outside the window is ever loaded, so freed (even NaN) slots cannot leak in.

Both of the kit's layouts address one buffer, ``k_buffer[slot, kv_head, :]``; only the table's granularity
differs: at page size 1 (SGLang's ``kv_indices``) ``slot = table[pos]``; at page size ``P`` (a block table)
``slot = table[pos // P] * P + pos % P``.

A program owns one request, one KV head (with every query head of its GQA group, so each K/V tile is read once for
the group) and one chunk of the window (flash-decoding). With several splits each writes a partial output and its
log-sum-exp, and ``MERGE`` says who merges them. A chain verify (2..8 drafts per request) walks the same middle of
the window that every draft attends; the few keys that only some drafts see make one masked edge tile, and ``EDGE``
says where it goes. The host side (:mod:`swa_kit.attention.kit.path`) plans the launch from
:mod:`swa_kit.attention.kit.policy`; :mod:`swa_kit.attention.kit.teaching` is the same walk without the tuning.
"""

from __future__ import annotations

import triton
import triton.language as tl

from swa_kit.attention.kit.policy import Edge, Merge

# The kernel's choices as Triton constants (a jitted function reads only constexpr globals).
EDGE_BEFORE = tl.constexpr(int(Edge.BEFORE))
EDGE_PREFETCH = tl.constexpr(int(Edge.PREFETCH))
EDGE_IN_WALK = tl.constexpr(int(Edge.IN_WALK))
EDGE_OWN_SPLIT = tl.constexpr(int(Edge.OWN_SPLIT))
MERGE_NONE = tl.constexpr(int(Merge.NONE))
MERGE_LAST_SPLIT = tl.constexpr(int(Merge.LAST_SPLIT))


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
    the row max, then once per score inside ``s * scale - m``, which compiles to one fused multiply-add (v9).
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
               stride_ks, stride_kh, stride_vs, stride_vh, PAGE: tl.constexpr, EDGE_KEYS: tl.constexpr,
               INT32_OFFSETS: tl.constexpr):
    """Both edges of a chain's window in one tile of 2 x EDGE_KEYS keys: ``[first, mid_lo)`` in its first half,
    ``[mid_hi, seq_len)`` in its second (both empty unless ``on``). Returns the positions, which of them
    are keys, and K and V."""
    j = tl.arange(0, 2 * EDGE_KEYS)
    in_front = j < EDGE_KEYS
    pos = tl.where(in_front, first + j, mid_hi + j - EDGE_KEYS)
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
                    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, EDGE_KEYS: tl.constexpr, ROWS: tl.constexpr,
                    INT32_OFFSETS: tl.constexpr, CLAMPED_WALK: tl.constexpr):
    """The chunk ``[lo, hi)`` of the middle, then (if ``on``) the edge tile as one more iteration of the same loop,
    so that the pipeliner loads it ahead like any tile. Only that iteration is masked per query. ``CLAMPED_WALK``:
    as in :func:`_walk`, with the edge iteration's positions clamped to the request's last key (every position
    from ``first`` on is in some query's window)."""
    j = tl.arange(0, BLOCK_N)
    in_front = j < EDGE_KEYS
    e_pos = tl.where(in_front, first + j, mid_hi + j - EDGE_KEYS)  # both edges, as in _edge_tile, then nothing
    e_ok = (j < 2 * EDGE_KEYS) & (e_pos < tl.where(in_front, mid_lo, seq_len))
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
    lock_ptr,  # MERGE_LAST_SPLIT: one int32 counter per (request, KV head), zero between calls
    sm_scale_log2,  # softmax scale times log2(e): the kernel works in base 2 (exp2 is one instruction)
    window,  # keys a query attends, counting itself
    chunk,  # window positions per split (a multiple of BLOCK_N)
    num_splits,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_ot, stride_oh,
    GROUP: tl.constexpr, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
    MERGE: tl.constexpr,  # policy.Merge: one split writes the output; else partials, merged by a kernel or here
    EDGE: tl.constexpr,  # policy.Edge: where a verify's edge tile goes (EDGE_NONE: decode)
    EDGE_KEYS: tl.constexpr,  # keys per half of the edge tile: an edge holds at most MAX_QUERIES - 1 keys
    USE_SINKS: tl.constexpr,
    MERGE_SPLITS: tl.constexpr,  # MERGE_LAST_SPLIT: the split count rounded up to a power of two (1 otherwise)
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
    # the q_len - 1 after it (the drafts, seen by the later ones) need a per-query mask: one edge
    # tile, which EDGE places (before split 0's walk, prefetched across it, as its last iteration,
    # or in a split of its own). In decode (q_len 1) the middle is the window.
    seq_len = tl.load(seq_len_ptr + b)
    first = tl.maximum(seq_len - q_len - window + 1, 0)
    mid_lo = tl.maximum(seq_len - window, first)
    mid_hi = tl.maximum(seq_len - q_len + 1, mid_lo)
    lo = mid_lo + split * chunk  # this program's chunk of the middle: [lo, hi)
    hi = tl.minimum(lo + chunk, mid_hi)
    edge_on = (split == (num_splits - 1 if EDGE == EDGE_OWN_SPLIT else 0)) & (q_len > 1)
    row = tl.load(row_start_ptr + b).to(tl.int64)

    m_i = tl.full([ROWS], float("-inf"), tl.float32)  # running max (base-2 logits)
    l_i = tl.zeros([ROWS], tl.float32)  # running softmax denominator
    acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
    q_pos = seq_len - q_len + qi
    if EDGE == EDGE_PREFETCH:  # in flight during the walk; only split 0 of a chain loads anything
        e_pos, e_ok, e_k, e_v = _edge_tile(k_ptr, v_ptr, table_ptr, row, kv_head, dims, first, mid_lo, mid_hi,
                                           seq_len, edge_on, stride_ks, stride_kh, stride_vs, stride_vh, PAGE,
                                           EDGE_KEYS, INT32_OFFSETS)
    if EDGE == EDGE_BEFORE or EDGE == EDGE_OWN_SPLIT:  # (placed after the walk, its addressing stayed live)
        if edge_on:
            e_pos, e_ok, e_k, e_v = _edge_tile(k_ptr, v_ptr, table_ptr, row, kv_head, dims, first, mid_lo, mid_hi,
                                               seq_len, edge_on, stride_ks, stride_kh, stride_vs, stride_vh, PAGE,
                                               EDGE_KEYS, INT32_OFFSETS)
            m_i, l_i, acc = _fold_edge(q, q_pos, e_pos, e_ok, e_k, e_v, window, sm_scale_log2, m_i, l_i, acc)

    if EDGE == EDGE_IN_WALK:
        m_i, l_i, acc = _walk_then_edge(q, q_pos, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, first,
                                        mid_lo, mid_hi, seq_len, edge_on, window, sm_scale_log2, m_i, l_i, acc,
                                        stride_ks, stride_kh, stride_vs, stride_vh, PAGE, BLOCK_N, EDGE_KEYS, ROWS,
                                        INT32_OFFSETS, CLAMPED_WALK)
    else:
        m_i, l_i, acc = _walk(q, k_ptr, v_ptr, table_ptr, row, kv_head, dims, lo, hi, sm_scale_log2, m_i, l_i, acc,
                              stride_ks, stride_kh, stride_vs, stride_vh, PAGE, BLOCK_N, INT32_OFFSETS, CLAMPED_WALK)
    if EDGE == EDGE_PREFETCH:
        if edge_on:
            m_i, l_i, acc = _fold_edge(q, q_pos, e_pos, e_ok, e_k, e_v, window, sm_scale_log2, m_i, l_i, acc)

    if MERGE == MERGE_NONE:
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
        if MERGE == MERGE_LAST_SPLIT:  # the last split of this (request, KV head) to finish merges them all
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
