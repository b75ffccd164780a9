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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from swa_kit.errors import SlotError, UsageError

FORWARD_MODES = ("prefill", "extend", "decode", "verify", "tree")


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
        if self.kv_indices.numel():
            low, high = int(self.kv_indices.min()), int(self.kv_indices.max())
            if low < 0 or high >= self.k_buffer.shape[0]:
                bad = low if low < 0 else high
                raise SlotError(
                    f"kv_indices holds slot {bad}, outside the layer's buffer of {self.k_buffer.shape[0]} slots: "
                    "full-pool ids read against an SWA buffer? translate them with translate_loc_from_full_to_swa"
                )
        if self.tree_masks is not None:
            for b, (mask, q_len, seq_len) in enumerate(zip(self.tree_masks, q_lens, seq_lens)):
                if tuple(mask.shape) != (q_len, seq_len) or mask.dtype != torch.bool:
                    raise UsageError(
                        f"request {b}: tree mask {tuple(mask.shape)} {mask.dtype} must be bool [{q_len}, {seq_len}]"
                    )

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
