"""Requests over the pools: prefill, extend, decode, out-of-window SWA eviction, finish.

Mirrors SGLang 0.5.23's request-side KV bookkeeping (``Req.kv``: ``req_pool_idx``,
``kv_allocated_len``, ``cache_protected_len``, the SWA eviction cursor) and
``free_swa_out_of_window_slots`` in ``srt/mem_cache/common.py``, with the window in the
kit's one unit (:class:`swa_kit.window.Window`, keys attended counting the query).

The rule. The oldest query still to run sits at ``q = kv_len - num_draft_tokens`` (the
draft tokens of a speculative step may all be rejected, so the next query can land on
the first of them). It attends keys ``q - keys + 1 .. q``; every SWA slot below that is
dead. Eviction frees the SWA slots (never the full slots) of positions
``[swa_evicted_seqlen, keep_from)``, where ``keep_from = Window.first_key(q)`` or, with
``page_slack``, a whole page-rounded window further back (what SGLang does when a radix
cache shares prefixes), floored to a page boundary. Positions below
``cache_protected_len`` are never window-evicted.

:class:`RequestTable` runs many requests over a ``ReqToTokenPool`` and any of the
kit's (or SGLang's) token allocators. Where an allocator answers ``None`` it raises
:class:`~swa_kit.errors.PoolExhaustedError` naming what was asked and what was left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping

import torch

from swa_kit.errors import LayerMappingError, PoolExhaustedError, PoolUsageError
from swa_kit.engine.pools import get_num_new_pages, layer_id_of
from swa_kit.window import Keys, Window

__all__ = ["EvictionResult", "ReqKV", "RequestTable", "free_swa_out_of_window_slots", "swa_keep_from"]


@dataclass
class ReqKV:
    """One request's KV bookkeeping (SGLang's ``req.kv``): its row and how far each side reaches."""

    rid: Hashable
    req_pool_idx: int
    kv_allocated_len: int = 0
    cache_protected_len: int = 0  # positions [0, here) are never window-evicted
    swa_evicted_seqlen: int = 0  # SWA slots of positions [cache_protected_len, here) are freed


@dataclass(frozen=True)
class EvictionResult:
    """What one eviction step freed: positions ``[start, end)`` of one request, their full ids and former SWA ids."""

    rid: Hashable
    start: int
    end: int
    full_slots: torch.Tensor
    swa_slots: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


def _window(window: Window | Keys) -> Window:
    return window if isinstance(window, Window) else Window(window)


def _is_swa_allocator(allocator: Any) -> bool:
    return hasattr(allocator, "free_swa_segment") and hasattr(allocator, "full_to_swa_index_mapping")


def swa_keep_from(kv_len: int, window: Window | Keys, page_size: int = 1, *, page_slack: bool = False,
                  num_draft_tokens: int = 0) -> int:
    """The oldest position whose SWA slot must stay, before page flooring (0 when nothing can go).

    ``kv_len`` tokens are in the row; the last ``num_draft_tokens`` of them are drafts
    awaiting verification. Exact: the first key the oldest pending query sees. With
    ``page_slack``: ``q - ceil_to_page(max(sliding_window_size, page_size))``, SGLang's rule when a radix
    cache shares prefixes (a key ending on a page boundary keeps a full window of SWA).
    """
    w = _window(window)
    if num_draft_tokens < 0 or num_draft_tokens > kv_len:
        raise PoolUsageError(f"num_draft_tokens={num_draft_tokens} must be in 0..kv_len={kv_len}")
    if w.keys is None:
        return 0
    q = kv_len - num_draft_tokens
    if not page_slack:
        return w.first_key(q)
    # SGLang writes this rule in its own unit, sliding_window_size; convert at the edge, not by hand.
    back = -(-max(w.to("sglang"), page_size) // page_size) * page_size
    return max(0, q - back)


def free_swa_out_of_window_slots(req: ReqKV, kv_len: int, *, window: Window | Keys, page_size: int,
                                 req_to_token_pool: Any, token_to_kv_pool_allocator: Any, page_slack: bool = False,
                                 num_draft_tokens: int = 0, eviction_interval: int = 1) -> EvictionResult | None:
    """Free the SWA slots of ``req``'s tokens that have left the window; return what was freed (None: nothing).

    ``eviction_interval``: wait until at least this many tokens are past the cursor
    (SGLang's ``SGLANG_SWA_EVICTION_INTERVAL``, 1 by default).
    """
    w = _window(window)
    if eviction_interval < 1:
        raise PoolUsageError(f"eviction_interval={eviction_interval} must be >= 1")
    if req.cache_protected_len % page_size:
        raise PoolUsageError(f"request {req.rid!r}: cache_protected_len={req.cache_protected_len} must be a "
                             f"multiple of page_size={page_size}")
    if kv_len > req.kv_allocated_len:
        raise PoolUsageError(f"request {req.rid!r}: kv_len={kv_len} exceeds its {req.kv_allocated_len} "
                             "allocated tokens")
    keep_exact = swa_keep_from(kv_len, w, page_size, num_draft_tokens=num_draft_tokens)
    if w.keys is None or keep_exact < req.swa_evicted_seqlen + eviction_interval:
        return None
    evicted = max(req.swa_evicted_seqlen, req.cache_protected_len)
    req.swa_evicted_seqlen = evicted
    keep = swa_keep_from(kv_len, w, page_size, page_slack=page_slack, num_draft_tokens=num_draft_tokens)
    new_evicted = max(evicted, keep) // page_size * page_size
    if new_evicted <= evicted:
        return None
    row = req_to_token_pool.req_to_token[req.req_pool_idx, evicted:new_evicted].to(torch.int64)
    swa = token_to_kv_pool_allocator.translate_loc_from_full_to_swa(row).clone()
    token_to_kv_pool_allocator.free_swa_segment(row, start_pos=evicted)
    req.swa_evicted_seqlen = new_evicted
    return EvictionResult(req.rid, evicted, new_evicted, row, swa)


class RequestTable:
    """Many requests over one ``ReqToTokenPool`` and one token allocator, driven as SGLang's scheduler drives them.

    ``prefill`` / ``extend`` / ``decode`` take batches and call the allocator once per
    batch (so slots come out in SGLang's batch order); ``evict`` runs the out-of-window
    step for every request inside one free group, as ``maybe_evict_swa`` does; ``finish``
    gives a request's row and slots back.
    """

    def __init__(self, req_to_token_pool: Any, token_to_kv_pool_allocator: Any) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.page_size = int(token_to_kv_pool_allocator.page_size)
        self.reqs: dict[Hashable, ReqKV] = {}

    # -- lookups ---------------------------------------------------------------------------------------------------

    def __contains__(self, rid: Hashable) -> bool:
        return rid in self.reqs

    def req(self, rid: Hashable) -> ReqKV:
        try:
            return self.reqs[rid]
        except (KeyError, TypeError):
            raise PoolUsageError(f"no live request {rid!r}; live: {list(self.reqs)}; prefill it first") from None

    def seq_len(self, rid: Hashable) -> int:
        return self.req(rid).kv_allocated_len

    @property
    def is_swa(self) -> bool:
        return _is_swa_allocator(self.token_to_kv_pool_allocator)

    def get_kv_indices(self, rid: Hashable, layer: Any = None) -> torch.Tensor:
        """Slot ids of ``rid``'s tokens ``0 .. seq_len - 1`` as ``layer`` reads them.

        Full-pool ids for full-attention layers (or ``layer=None``); SWA-pool ids for the
        sliding layers of an SWA pool, where evicted tokens read 0, the dummy slot.
        """
        req = self.req(rid)
        ids = self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv_allocated_len].to(torch.int64)
        if layer is None:
            return ids
        pool = self.token_to_kv_pool_allocator.get_kvcache()
        if hasattr(pool, "translate_loc_for_layer"):
            return pool.translate_loc_for_layer(layer, ids)
        mapping = getattr(pool, "layers_mapping", None)  # SGLang's SWAKVPool
        if mapping is not None:
            layer_id = layer_id_of(layer)
            if layer_id not in mapping:
                raise LayerMappingError(f"layer {layer_id} is not in the pool's layers_mapping")
            return pool.translate_loc_from_full_to_swa(ids) if mapping[layer_id][1] else ids
        return ids

    def _last_loc(self, req: ReqKV) -> int:
        n = req.kv_allocated_len
        return int(self.req_to_token_pool.req_to_token[req.req_pool_idx, n - 1]) if n else -1

    def _exhausted(self, what: str, tokens: int, pages: int | None) -> PoolExhaustedError:
        alloc = self.token_to_kv_pool_allocator
        asked = f"{tokens} token(s)" + (f" ({pages} new page(s) of {self.page_size})" if pages is not None else "")
        if self.is_swa:
            left = f"full pool has {alloc.full_available_size()}, SWA pool has {alloc.swa_available_size()} free"
        else:
            left = f"pool has {alloc.available_size()} free"
        hint = " (evict out-of-window SWA slots first)" if self.is_swa else ""
        return PoolExhaustedError(f"{what}: asked for {asked}; {left}{hint}; finish requests or build larger pools")

    # -- allocation ------------------------------------------------------------------------------------------------

    def prefill(self, lens: Mapping[Hashable, int], cache_protected_len: Mapping[Hashable, int] | None = None
                ) -> dict[Hashable, torch.Tensor]:
        """New requests ``{rid: prompt_len}``: one row each, then one extend over the batch."""
        rids = list(lens)
        for rid in rids:
            if rid in self.reqs:
                raise PoolUsageError(f"request {rid!r} is already live; extend it or finish it first")
        if len(set(rids)) != len(rids):
            raise PoolUsageError("prefill: each request id once")
        protected = dict(cache_protected_len or {})
        for rid, n in protected.items():
            if n % self.page_size or n < 0 or n > lens.get(rid, 0):
                raise PoolUsageError(f"request {rid!r}: cache_protected_len={n} must be a page-aligned length "
                                     f"within its prompt of {lens.get(rid, 0)}")
        self._check_lens(lens, {rid: 0 for rid in rids})
        rows = self.req_to_token_pool.alloc_rows(len(rids))
        if rows is None:
            raise PoolExhaustedError(f"prefill: asked for {len(rids)} request row(s); "
                                     f"{self.req_to_token_pool.available_size()} free; finish requests first")
        for rid, row in zip(rids, rows):
            self.reqs[rid] = ReqKV(rid, int(row), 0, protected.get(rid, 0))
        try:
            return self.extend(lens)
        except PoolExhaustedError:
            self.req_to_token_pool.free_rows(rows)
            for rid in rids:
                del self.reqs[rid]
            raise

    def _check_lens(self, lens: Mapping[Hashable, int], current: Mapping[Hashable, int]) -> None:
        cap = self.req_to_token_pool.max_context_len
        for rid, n in lens.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise PoolUsageError(f"request {rid!r}: token count {n!r} must be an int >= 0")
            if current[rid] + n > cap:
                raise PoolUsageError(f"request {rid!r}: {current[rid]} + {n} tokens exceed max_context_len={cap}")

    def extend(self, lens: Mapping[Hashable, int]) -> dict[Hashable, torch.Tensor]:
        """Add ``{rid: n}`` tokens to live requests in one allocation; return each request's new full slot ids."""
        reqs = [self.req(rid) for rid in lens]
        self._check_lens(lens, {r.rid: r.kv_allocated_len for r in reqs})
        extend = [lens[r.rid] for r in reqs]
        total = sum(extend)
        alloc = self.token_to_kv_pool_allocator
        if self.page_size == 1:
            out = alloc.alloc(total)
            if out is None:
                raise self._exhausted("extend", total, None)
        else:
            pre = torch.tensor([r.kv_allocated_len for r in reqs], dtype=torch.int64)
            seq = pre + torch.tensor(extend, dtype=torch.int64)
            last = torch.tensor([self._last_loc(r) for r in reqs], dtype=torch.int64)
            dev = getattr(alloc, "device", "cpu")
            out = alloc.alloc_extend(pre.to(dev), pre, seq.to(dev), seq, last.to(dev), total)
            if out is None:
                raise self._exhausted("extend", total, get_num_new_pages(seq, self.page_size, pre))
        return self._write(reqs, extend, out)

    def decode(self, rids: Iterable[Hashable]) -> dict[Hashable, torch.Tensor]:
        """One new token for each request, allocated as one decode batch."""
        reqs = [self.req(rid) for rid in rids]
        self._check_lens({r.rid: 1 for r in reqs}, {r.rid: r.kv_allocated_len for r in reqs})
        alloc = self.token_to_kv_pool_allocator
        if self.page_size == 1:
            out = alloc.alloc(len(reqs))
            pages = None
        else:
            seq = torch.tensor([r.kv_allocated_len + 1 for r in reqs], dtype=torch.int64)
            last = torch.tensor([self._last_loc(r) for r in reqs], dtype=torch.int64)
            dev = getattr(alloc, "device", "cpu")
            out = alloc.alloc_decode(seq.to(dev), seq, last.to(dev))
            pages = get_num_new_pages(seq, self.page_size, decode=True)
        if out is None:
            raise self._exhausted("decode", len(reqs), pages)
        return self._write(reqs, [1] * len(reqs), out)

    def _write(self, reqs: list[ReqKV], counts: list[int], out: torch.Tensor) -> dict[Hashable, torch.Tensor]:
        result, offset = {}, 0
        for req, n in zip(reqs, counts):
            ids = out[offset: offset + n]
            start = req.kv_allocated_len
            self.req_to_token_pool.req_to_token[req.req_pool_idx, start: start + n] = ids.to(torch.int32)
            req.kv_allocated_len += n
            result[req.rid] = ids
            offset += n
        return result

    # -- eviction and release --------------------------------------------------------------------------------------

    def evict(self, window: Window | Keys, rids: Iterable[Hashable] | None = None, *, page_slack: bool = False,
              num_draft_tokens: int | Mapping[Hashable, int] = 0, eviction_interval: int = 1
              ) -> dict[Hashable, EvictionResult]:
        """Free out-of-window SWA slots of ``rids`` (all by default) in one free group; return what each freed.

        ``num_draft_tokens``: trailing tokens of each request still awaiting verification (an
        int for all, or ``{rid: n}``); they and the window behind the first of them stay.
        """
        if not self.is_swa:
            raise PoolUsageError("evict: this allocator has no SWA pool; out-of-window eviction needs an "
                                 "SWATokenToKVPoolAllocator")
        reqs = [self.req(rid) for rid in (self.reqs if rids is None else rids)]
        drafts = num_draft_tokens if isinstance(num_draft_tokens, Mapping) else {r.rid: num_draft_tokens for r in reqs}
        freed: dict[Hashable, EvictionResult] = {}
        alloc = self.token_to_kv_pool_allocator
        alloc.free_group_begin()
        try:
            for req in reqs:
                res = free_swa_out_of_window_slots(
                    req, req.kv_allocated_len, window=window, page_size=self.page_size,
                    req_to_token_pool=self.req_to_token_pool, token_to_kv_pool_allocator=alloc,
                    page_slack=page_slack, num_draft_tokens=drafts.get(req.rid, 0),
                    eviction_interval=eviction_interval)
                if res is not None:
                    freed[req.rid] = res
        finally:
            alloc.free_group_end()
        return freed

    def finish(self, rid: Hashable) -> None:
        """Give back the request's slots (full only where its SWA side was evicted) and its row."""
        req = self.req(rid)
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv_allocated_len].to(torch.int64)
        alloc = self.token_to_kv_pool_allocator
        if self.is_swa and req.swa_evicted_seqlen > req.cache_protected_len:
            lo, hi = req.cache_protected_len, req.swa_evicted_seqlen
            alloc.free_full_segment(row[lo:hi], start_pos=lo)  # SWA side already freed by eviction
            for start, end in ((0, lo), (hi, req.kv_allocated_len)):
                if end > start:
                    alloc.free_segment(row[start:end], start_pos=start)
        elif req.kv_allocated_len:
            alloc.free_segment(row, start_pos=0)
        self.req_to_token_pool.free_rows([req.req_pool_idx])
        del self.reqs[rid]
