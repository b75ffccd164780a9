"""What one attention call reads, in SGLang's token-level layout, and what it returns.

An :class:`AttentionBatch` is one layer's view of a batch of requests:

* ``q``: ``[total_q, Hq, D]``, the queries of all requests back to back (``qo_indptr``);
* ``k_buffer`` / ``v_buffer``: ``[num_slots, Hkv, D]``, the layer's KV buffer, the
  full pool's or the SWA pool's (``MHATokenToKVPool.get_kv_buffer(layer_id)``);
* ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]``: for request ``b``, the slot of each
  key position ``0 .. seq_len - 1`` in that buffer: SGLang's ``req_to_token`` row,
  already translated to SWA slots when the layer reads the SWA pool.

Queries are aligned to the end of their request's keys: query ``i`` of a request with
``q_len`` queries and ``seq_len`` keys sits at position ``seq_len - q_len + i``. That
covers prefill (``q_len == seq_len``), extend, decode (``q_len == 1``) and chain verify;
a tree verify adds ``tree_masks`` (see :mod:`swa_kit.masks`).

Paths that take a block table (aiter's Triton ``unified_attention``, the kit's kernel)
get it from :meth:`AttentionBatch.block_table`, which checks that every page of a
request really is one contiguous, aligned run of slots.

A batch is built one of three ways: :meth:`AttentionBatch.from_lengths` (per-request
query and key counts and the slots), :meth:`AttentionBatch.from_pools` (one layer read
from the kit's or SGLang's pools, as the attention backend builds it), or
:func:`random_paged_batch` (random data in shuffled pages, for tests, the probe and the
benchmarks), with :func:`poison_unattended` to fill the slots no query attends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from swa_kit.errors import SlotError, UsageError
from swa_kit.window import Window


def indptr(lengths: Sequence[int] | torch.Tensor, *, dtype: torch.dtype = torch.int32,
           device: str | torch.device | None = None) -> torch.Tensor:
    """``[0, l0, l0 + l1, ...]``: where each request's run starts in a flat array (SGLang's ``qo_indptr`` /
    ``kv_indptr``)."""
    counts = torch.as_tensor(lengths, dtype=torch.int64).flatten()
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(dtype=dtype, device=device)


@dataclass
class AttentionBatch:
    """One layer's attention inputs for a batch of requests (token-level layout)."""

    q: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    sm_scale: float
    page_size: int = 1
    tree_masks: list[torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.q.dim() != 3 or self.k_buffer.dim() != 3 or self.v_buffer.dim() != 3:
            raise UsageError(
                f"q {tuple(self.q.shape)}, k_buffer {tuple(self.k_buffer.shape)} and v_buffer "
                f"{tuple(self.v_buffer.shape)} must be [tokens, heads, head_dim]"
            )
        hq, hkv = self.q.shape[1], self.k_buffer.shape[1]
        if hq % hkv:
            raise UsageError(f"query heads {hq} are not a multiple of KV heads {hkv} (GQA needs Hq = g * Hkv)")
        if self.q.shape[2] != self.k_buffer.shape[2]:
            raise UsageError(f"query head_dim {self.q.shape[2]} != key head_dim {self.k_buffer.shape[2]}")
        q_lens, seq_lens = self.q_lens.tolist(), self.seq_lens.tolist()
        if len(q_lens) != len(seq_lens):
            raise UsageError(f"qo_indptr has {len(q_lens)} requests but kv_indptr has {len(seq_lens)}")
        if int(self.qo_indptr[-1]) != self.q.shape[0]:
            raise UsageError(f"qo_indptr ends at {int(self.qo_indptr[-1])} but q holds {self.q.shape[0]} tokens")
        for b, (q_len, seq_len) in enumerate(zip(q_lens, seq_lens)):
            if not 0 < q_len <= seq_len:
                raise UsageError(f"request {b}: q_len {q_len} must be in 1..seq_len ({seq_len})")
        self._check_slots()
        self._check_tree_masks(q_lens, seq_lens)

    def _check_slots(self) -> None:
        if not self.kv_indices.numel():
            return
        low, high = int(self.kv_indices.min()), int(self.kv_indices.max())
        if low < 0 or high >= self.k_buffer.shape[0]:
            bad = low if low < 0 else high
            raise SlotError(
                f"kv_indices holds slot {bad}, outside the layer's buffer of {self.k_buffer.shape[0]} slots: "
                "full-pool ids read against an SWA buffer? translate them with translate_loc_from_full_to_swa"
            )

    def _check_tree_masks(self, q_lens: list[int], seq_lens: list[int]) -> None:
        if self.tree_masks is None:
            return
        for b, (mask, q_len, seq_len) in enumerate(zip(self.tree_masks, q_lens, seq_lens)):
            if tuple(mask.shape) != (q_len, seq_len) or mask.dtype != torch.bool:
                raise UsageError(
                    f"request {b}: tree mask {tuple(mask.shape)} {mask.dtype} must be bool [{q_len}, {seq_len}]"
                )

    @classmethod
    def from_lengths(cls, q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, q_lens: Sequence[int],
                     seq_lens: Sequence[int], kv_indices: torch.Tensor, *, sm_scale: float | None = None,
                     page_size: int = 1, tree_masks: list[torch.Tensor] | None = None) -> AttentionBatch:
        """A batch from per-request query and key counts; ``kv_indices`` holds every request's slots back to back.

        The indptrs are built here on ``q``'s device; ``sm_scale`` defaults to ``1 / sqrt(head_dim)``.
        """
        if kv_indices.numel() != sum(int(n) for n in seq_lens):
            raise UsageError(f"kv_indices holds {kv_indices.numel()} slots but seq_lens {list(seq_lens)} add up to "
                             f"{sum(int(n) for n in seq_lens)}: give one slot per key position of every request")
        device = q.device
        return cls(q, k_buffer, v_buffer, indptr(q_lens, device=device), indptr(seq_lens, device=device),
                   kv_indices.to(device), q.shape[-1] ** -0.5 if sm_scale is None else sm_scale, page_size,
                   tree_masks)

    @classmethod
    def from_pools(cls, q: torch.Tensor, kv_pool: Any, layer_id: int, req_to_token_pool: Any,
                   req_pool_indices: Sequence[int], q_lens: Sequence[int], seq_lens: Sequence[int], *,
                   swa_kv_pool: Any = None, tree_masks: list[torch.Tensor] | None = None,
                   sm_scale: float | None = None) -> AttentionBatch:
        """Layer ``layer_id``'s batch read from the pools, as SGLang's attention backend builds it.

        Request ``b``'s keys are positions ``0 .. seq_lens[b] - 1`` of row ``req_pool_indices[b]`` of
        ``req_to_token_pool.req_to_token``: full-pool slot ids. With ``swa_kv_pool`` (the resolver's pool, given
        only for a layer that reads the SWA pool) they are translated by its ``translate_loc_from_full_to_swa``
        first; the buffers are ``kv_pool.get_kv_buffer(layer_id)``. The kit's pools and SGLang's both fit.
        """
        if len(req_pool_indices) != len(seq_lens):
            raise UsageError(f"{len(req_pool_indices)} req_pool_indices but {len(seq_lens)} seq_lens: give one "
                             "req_to_token row per request")
        req_to_token = req_to_token_pool.req_to_token
        ids = torch.cat([req_to_token[row, :n].to(torch.int64) for row, n in zip(req_pool_indices, seq_lens)])
        if swa_kv_pool is not None:
            ids = swa_kv_pool.translate_loc_from_full_to_swa(ids)
        k_buffer, v_buffer = kv_pool.get_kv_buffer(layer_id)
        return cls.from_lengths(q, k_buffer, v_buffer, q_lens, seq_lens, ids, sm_scale=sm_scale,
                                tree_masks=tree_masks)

    @property
    def batch_size(self) -> int:
        return self.qo_indptr.numel() - 1

    @property
    def q_lens(self) -> torch.Tensor:
        return (self.qo_indptr[1:] - self.qo_indptr[:-1]).cpu()

    @property
    def seq_lens(self) -> torch.Tensor:
        return (self.kv_indptr[1:] - self.kv_indptr[:-1]).cpu()

    @property
    def device(self) -> torch.device:
        return self.q.device

    def request_slots(self, b: int) -> torch.Tensor:
        """Slot ids of request ``b``'s keys, in position order."""
        return self.kv_indices[int(self.kv_indptr[b]) : int(self.kv_indptr[b + 1])]

    def query_positions(self, b: int) -> torch.Tensor:
        """Absolute positions of request ``b``'s queries (aligned to the end of its keys)."""
        q_len, seq_len = int(self.q_lens[b]), int(self.seq_lens[b])
        return torch.arange(seq_len - q_len, seq_len)

    def block_table(self) -> torch.Tensor:
        """``[B, max_pages]`` page ids, for paths that read KV as ``[pages, page_size, Hkv, D]``.

        Raises SlotError when a request's slots are not whole aligned pages, which a
        block-table kernel would silently misread.
        """
        ps = self.page_size
        rows = []
        for b in range(self.batch_size):
            slots = self.request_slots(b).to(torch.int64).cpu()
            n_pages = -(-slots.numel() // ps)
            pages = slots[::ps] // ps
            expected = (pages.repeat_interleave(ps) * ps + torch.arange(ps).repeat(n_pages))[: slots.numel()]
            if not torch.equal(expected, slots):
                raise SlotError(
                    f"request {b}: slots are not whole aligned pages of {ps} (first slots {slots[:8].tolist()}); "
                    "allocate with a paged allocator of the same page_size"
                )
            rows.append(pages)
        width = max(1, max(r.numel() for r in rows))
        table = torch.zeros(self.batch_size, width, dtype=torch.int32)
        for b, pages in enumerate(rows):
            table[b, : pages.numel()] = pages.to(torch.int32)
        return table.to(self.device)

    def paged_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V buffers viewed as ``[pages, page_size, Hkv, D]`` (no copy)."""
        ps = self.page_size
        if self.k_buffer.shape[0] % ps:
            raise UsageError(f"buffer of {self.k_buffer.shape[0]} slots is not a whole number of pages of {ps}")
        k = self.k_buffer.view(-1, ps, *self.k_buffer.shape[1:])
        v = self.v_buffer.view(-1, ps, *self.v_buffer.shape[1:])
        return k, v


def poison_unattended(batch: AttentionBatch, window_keys: int | None,
                      fill: float = float("nan")) -> list[torch.Tensor]:
    """Write ``fill`` into every K/V slot no query of ``batch`` attends under ``window_keys`` (and its tree masks).

    That covers the dummy page, unused pages and the keys that left every query's window, as an SWA
    pool's freed and reused slots would hold them. With NaN, a path that reads one key outside the
    window returns NaN instead of a plausible wrong number. Returns, per request, the key positions
    filled (bool ``[seq_len]``).
    """
    window = Window(window_keys)
    keep = torch.zeros(batch.k_buffer.shape[0], dtype=torch.bool, device=batch.device)
    filled = []
    for b in range(batch.batch_size):
        seen = window.attends(batch.query_positions(b)[:, None], torch.arange(int(batch.seq_lens[b]))[None, :])
        if batch.tree_masks is not None:
            seen = seen & batch.tree_masks[b].cpu()
        attended = seen.any(dim=0)
        keep[batch.request_slots(b).to(torch.int64)[attended.to(batch.device)]] = True
        filled.append(~attended)
    batch.k_buffer[~keep] = fill
    batch.v_buffer[~keep] = fill
    return filled


def random_paged_batch(
    q_lens: Sequence[int],
    seq_lens: Sequence[int],
    *,
    num_q_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 64,
    page_size: int = 1,
    spare_pages: int = 1,
    garbage: float | None = None,
    window_keys: int | None = None,
    tree_masks: list[torch.Tensor] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> AttentionBatch:
    """Requests with ``q_lens[b]`` queries over ``seq_lens[b]`` keys, each owning randomly permuted whole pages.

    Page 0 stays unused, like SGLang's reserved dummy page, and so do ``spare_pages`` more. With ``garbage``
    None every slot holds random data; with ``garbage`` set only the requests' slots get random data, and
    every slot no query attends under ``window_keys`` (and ``tree_masks``) holds ``garbage``
    (:func:`poison_unattended`): finite garbage for paths that load whole tiles, NaN to catch a leak.
    Data is drawn in float32 from ``generator`` (seed 0 when None), then cast to ``dtype``.
    """
    if len(q_lens) != len(seq_lens):
        raise UsageError(f"q_lens has {len(q_lens)} requests, seq_lens {len(seq_lens)}")
    if garbage is None and window_keys is not None:
        raise UsageError(f"window_keys={window_keys} only chooses the slots that hold garbage: give garbage too "
                         "(or call poison_unattended on the batch)")
    gen = generator or torch.Generator().manual_seed(0)
    pages = [-(-int(n) // page_size) for n in seq_lens]
    total_pages = 1 + sum(pages) + spare_pages
    order = torch.randperm(total_pages - 1, generator=gen) + 1
    shape = (total_pages * page_size, num_kv_heads, head_dim)
    if garbage is None:
        k_buffer = torch.randn(shape, generator=gen).to(dtype)
        v_buffer = torch.randn(shape, generator=gen).to(dtype)
    else:
        k_buffer, v_buffer = torch.full(shape, garbage, dtype=dtype), torch.full(shape, garbage, dtype=dtype)
    slots, used = [], 0
    for seq_len, count in zip(seq_lens, pages):
        own = order[used : used + count]
        used += count
        request = (own[:, None] * page_size + torch.arange(page_size)).flatten()[:seq_len]
        if garbage is not None:  # only what some query may read is drawn
            k_buffer[request] = torch.randn(seq_len, num_kv_heads, head_dim, generator=gen).to(dtype)
            v_buffer[request] = torch.randn(seq_len, num_kv_heads, head_dim, generator=gen).to(dtype)
        slots.append(request)
    q = torch.randn(sum(int(n) for n in q_lens), num_q_heads, head_dim, generator=gen).to(dtype)
    batch = AttentionBatch.from_lengths(
        q.to(device), k_buffer.to(device), v_buffer.to(device), q_lens, seq_lens, torch.cat(slots).to(torch.int32),
        page_size=page_size, tree_masks=None if tree_masks is None else [m.to(device) for m in tree_masks])
    if garbage is not None:
        poison_unattended(batch, window_keys, fill=garbage)
    return batch


@dataclass
class AttentionResult:
    """An attention output and how it was computed: never anonymous."""

    out: torch.Tensor
    path: str
    tier: str
    device: str
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"path={self.path} tier={self.tier} device={self.device}"
