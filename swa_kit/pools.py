"""KV memory pools and slot allocators, mirroring SGLang 0.5.23's ``srt/mem_cache``.

Names, constructor arguments, allocation order and return values follow SGLang, so the
kit can be read beside ``memory_pool.py``, ``swa_memory_pool.py`` and ``allocator/``:

* :class:`ReqToTokenPool`: ``req_to_token[req_pool_idx, position] -> full-pool slot id``;
  row 0 is a padding row, rows are handed out from the tail of the free list.
* :class:`TokenToKVPoolAllocator` (page_size 1) and :class:`PagedTokenToKVPoolAllocator`
  (whole pages): slot 0 (page 0) is the reserved dummy; ``alloc*`` returns ``None`` when
  the pool cannot serve. A paged free puts pages at the *front* of the free list, a
  page-1 free at the *back* (SGLang does the same; with ``need_sort`` both stage frees
  and sort them in when an allocation runs short).
* :class:`MHATokenToKVPool`: per-layer K and V buffers ``[size + page_size, heads, dim]``.
* :class:`SWAKVPool`: a full sub-pool for full-attention layers, a (smaller) SWA sub-pool
  for sliding layers, ``layers_mapping[layer_id] = (index in its sub-pool, is_swa)``.
* :class:`SWATokenToKVPoolAllocator`: one sub-allocator per side and the mapping
  ``full_to_swa_index_mapping`` (``size + page_size`` zeros and a trailing -1, so a
  ``last_loc`` of -1 translates to -1); ``free_swa`` returns SWA slots and keeps full ones.

Where SGLang would silently corrupt state, the kit raises instead (``swa_kit.errors``):
freeing a slot that is not allocated (never handed out, freed twice, the dummy slot),
an unknown layer id, an id out of range, a sliding-layer write without its SWA location.
Each allocator therefore keeps a ``live`` flag per page next to SGLang's free list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from swa_kit.errors import LayerMappingError, PoolUsageError, SlotError

__all__ = [
    "KVWriteLoc",
    "MHATokenToKVPool",
    "PagedTokenToKVPoolAllocator",
    "ReqToTokenPool",
    "SWAKVPool",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
    "get_num_new_pages",
    "layer_id_of",
    "unwrap_write_loc",
]


def layer_id_of(layer: Any) -> int:
    """A layer id from an int or from any object with ``layer_id`` (SGLang's ``RadixAttention``)."""
    layer_id = getattr(layer, "layer_id", layer)
    if isinstance(layer_id, bool) or not isinstance(layer_id, int):
        raise LayerMappingError(f"layer {layer!r}: pass an int layer id or an object with an int `layer_id`")
    return layer_id


def _as_index(ids: Any, device: Any) -> torch.Tensor:
    """Slot ids as a 1-D int64 tensor on ``device`` (ints, lists and tensors accepted)."""
    t = torch.as_tensor(ids, device=device)
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise SlotError(f"slot ids must be integers, got dtype {t.dtype}")
    return t.reshape(-1).to(torch.int64)


_Free = TypeVar("_Free", bound=Callable[..., None])


def frees_ids(method: _Free) -> _Free:
    """A free method's first argument as a 1-D int64 tensor on ``self.device``; an empty one frees nothing."""

    @functools.wraps(method)
    def wrapper(self: Any, ids: Any, *args: Any, **kwargs: Any) -> None:
        ids = _as_index(ids, self.device)
        if ids.numel():
            method(self, ids, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _ints(values: Any) -> list[int]:
    return [int(v) for v in torch.as_tensor(values).reshape(-1).tolist()]


def get_num_new_pages(seq_lens: Any, page_size: int, prefix_lens: Any = None, decode: bool = False) -> int:
    """Pages a batch needs beyond the ones its requests already hold (SGLang's helper of that name)."""
    seq = torch.as_tensor(seq_lens).to(torch.int64).cpu()
    if prefix_lens is None or decode:
        return int((seq % page_size == 1).sum())  # a decode step opens a page when it lands at offset 0
    pre = torch.as_tensor(prefix_lens).to(torch.int64).cpu()
    return int(((seq + page_size - 1) // page_size - (pre + page_size - 1) // page_size).sum())


# -- request rows ------------------------------------------------------------------------------------------------------


class ReqToTokenPool:
    """``req_to_token[req_pool_idx, position]``: the full-pool slot of each token of each request.

    Row 0 is a padding row (SGLang points padded batch entries at it); real rows are 1..size.
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu",
                 enable_memory_saver: bool = False) -> None:
        if size < 1 or max_context_len < 1:
            raise PoolUsageError(f"ReqToTokenPool(size={size}, max_context_len={max_context_len}): both must be >= 1")
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=torch.int32, device=device)
        self.clear()

    def clear(self) -> None:
        self.free_slots: list[int] = list(range(1, self.size + 1))
        self._live = [False] * (self.size + 1)

    def write(self, indices: Any, values: Any) -> None:
        """``req_to_token[indices] = values`` (SGLang's ``write``)."""
        self.req_to_token[indices] = torch.as_tensor(values, device=self.req_to_token.device).to(torch.int32)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc_rows(self, need_size: int) -> list[int] | None:
        """Take ``need_size`` rows from the tail of the free list, or None when too few are free."""
        if need_size < 0:
            raise PoolUsageError(f"alloc_rows(need_size={need_size}): need_size must be >= 0")
        if need_size > len(self.free_slots):
            return None
        if need_size == 0:
            return []
        rows = self.free_slots[-need_size:]
        del self.free_slots[-need_size:]
        for r in rows:
            self._live[r] = True
        return rows

    def free_rows(self, indices: Iterable[int]) -> None:
        """Give rows back (appended to the free list, as SGLang does)."""
        rows = [int(r) for r in indices]
        for i, r in enumerate(rows):
            if not 0 <= r <= self.size:
                raise SlotError(f"request row {r} is out of range 1..{self.size}")
            if r == 0:
                raise SlotError("request row 0 is the padding row; it is never allocated, so it cannot be freed")
            if not self._live[r] or r in rows[:i]:
                raise SlotError(f"request row {r} is not allocated (never handed out or already freed)")
        for r in rows:
            self._live[r] = False
        self.free_slots.extend(rows)


# -- token allocators --------------------------------------------------------------------------------------------------


class PageLedger:
    """Which pages an allocator has handed out: the kit's addition to SGLang's free lists, so a bad free raises.

    Page 0 is the reserved dummy; at page_size 1 a page is a slot. ``live[page]`` is True from
    the allocation that hands the page out until the free that retires it.
    """

    def __init__(self, size: int, page_size: int) -> None:
        self.num_pages = size // page_size
        self.num_slots = size + page_size  # the rows of the kvcache this allocator serves
        self.unit = "slot" if page_size == 1 else "page"
        self.page_size = page_size
        self.live = torch.zeros(self.num_pages + 1, dtype=torch.bool)

    def hand_out(self, pages: torch.Tensor) -> None:
        self.live[pages.cpu()] = True

    def check_live(self, pages: torch.Tensor, what: str) -> None:
        """Refuse (``SlotError``) pages out of range, the dummy, pages not handed out, and a page listed twice."""
        pages, unit = pages.cpu(), self.unit
        bad = pages[(pages < 0) | (pages > self.num_pages)]
        if bad.numel():
            raise SlotError(f"{what}: {unit} {int(bad[0])} is out of range 1..{self.num_pages}")
        if bool((pages == 0).any()):
            raise SlotError(f"{what}: {unit} 0 is the reserved dummy (padding and evicted tokens point at it); "
                            "it is never allocated, so it cannot be freed")
        dead = pages[~self.live[pages]]
        if dead.numel():
            raise SlotError(f"{what}: {unit} {int(dead[0])} is not allocated (never handed out or already freed)")
        if torch.unique(pages).numel() != pages.numel():
            raise SlotError(f"{what}: the same {unit} appears twice in one free; each is freed once")

    def check_slots_live(self, slots: torch.Tensor, what: str) -> torch.Tensor:
        """The pages ``slots`` lie on (each once), after checking the slots are in range and those pages live."""
        s = slots.cpu()
        bad = s[(s < 0) | (s >= self.num_slots)]
        if bad.numel():
            raise SlotError(f"{what}: slot {int(bad[0])} is out of range 0..{self.num_slots - 1}")
        pages = torch.unique(slots // self.page_size)
        self.check_live(pages, what)
        return pages

    def retire(self, pages: torch.Tensor, what: str) -> None:
        """Check ``pages`` as :meth:`check_live` does, then mark them freed (the free list is the caller's part)."""
        self.check_live(pages, what)
        self.live[pages.cpu()] = False


class BaseTokenToKVPoolAllocator:
    """What every token allocator shares: sizes, the kvcache it serves, free groups, segment frees.

    The two one-pool allocators below keep a :class:`PageLedger` (``ledger``) next to their free
    list; ``release_slots`` / ``release_page_ids`` put pages its ``retire`` already checked back on
    that list. The SWA allocator frees through those of its two sub-allocators.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, device: str | torch.device,
                 kvcache: Any, need_sort: bool) -> None:
        if size < 0 or page_size < 1:
            raise PoolUsageError(f"allocator size={size}, page_size={page_size}: need size >= 0 and page_size >= 1")
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self.need_sort = need_sort
        self.num_pages = size // page_size
        self.free_group: list[torch.Tensor] | None = None

    @property
    def size_full(self) -> int:
        return self.size

    def get_kvcache(self) -> Any:
        return self._kvcache

    def free_group_begin(self) -> None:
        """Hold frees until :meth:`free_group_end`, which releases them together (SGLang's free groups)."""
        if self.free_group is not None:
            raise PoolUsageError("free groups cannot be nested: call free_group_end() first")
        self.free_group = []

    def free_group_end(self) -> None:
        pending, self.free_group = self.free_group, None
        if pending:
            self.release_slots(torch.cat(pending))

    def alloc_extend(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        raise PoolUsageError("alloc_extend is for paged allocators (page_size > 1); use alloc(need_size)")

    def alloc_decode(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        raise PoolUsageError("alloc_decode is for paged allocators (page_size > 1); use alloc(need_size)")

    def free_segment(self, free_index: Any, *, start_pos: int) -> None:
        """Free one request's ``kv_row[start_pos : start_pos + n]``."""
        self.free(free_index)

    # The release half of a free: put slots (pages) whose ledger entries are already retired back on
    # the free list. The SWA allocator never reaches these: it releases through its sub-allocators.
    def release_slots(self, free_index: torch.Tensor) -> None:
        """Put already-retired slots back on the free list (their pages, for a paged allocator)."""
        raise TypeError(f"{type(self).__name__} keeps no free list of its own to release slots into")

    def release_page_ids(self, page_ids: torch.Tensor) -> None:
        """Put already-retired pages back on the free list."""
        raise TypeError(f"{type(self).__name__} keeps no free list of its own to release pages into")


class TokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page-size-1 allocator: slots 1..size, handed out from the front, frees appended at the back."""

    def __init__(self, size: int, dtype: torch.dtype, device: str | torch.device, kvcache: Any = None,
                 need_sort: bool = False) -> None:
        super().__init__(size, 1, dtype, device, kvcache, need_sort)
        self.clear()

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        self.release_pages = torch.empty((0,), dtype=torch.int64, device=self.device)
        self.free_group = None
        self.ledger = PageLedger(self.size, 1)

    def available_size(self) -> int:
        return len(self.free_pages) + len(self.release_pages)

    def merge_and_sort_free(self) -> None:
        if len(self.release_pages) > 0:
            self.free_pages = torch.sort(torch.cat((self.free_pages, self.release_pages))).values
            self.release_pages = torch.empty((0,), dtype=torch.int64, device=self.device)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if need_size < 0:
            raise PoolUsageError(f"alloc(need_size={need_size}): need_size must be >= 0")
        if self.need_sort and need_size > len(self.free_pages):
            self.merge_and_sort_free()
        if need_size > len(self.free_pages):
            return None
        select = self.free_pages[:need_size]
        self.free_pages = self.free_pages[need_size:]
        self.ledger.hand_out(select)
        return select

    @frees_ids
    def free(self, free_index: torch.Tensor) -> None:
        self.ledger.retire(free_index, "free")
        if self.free_group is not None:
            self.free_group.append(free_index.clone())
        else:
            self.release_slots(free_index)

    def free_page_ids(self, page_ids: Any) -> None:
        self.free(page_ids)  # page ids are slot ids at page_size 1

    def release_slots(self, free_index: torch.Tensor) -> None:
        self.release_page_ids(free_index)

    def release_page_ids(self, page_ids: torch.Tensor) -> None:
        if self.need_sort:
            self.release_pages = torch.cat((self.release_pages, page_ids))
        else:
            self.free_pages = torch.cat((self.free_pages, page_ids))


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Whole-page allocator: pages 1..size // page_size; page p holds slots p*page_size .. p*page_size + page_size - 1.

    ``alloc_extend`` first fills a request's partly used last page (``last_loc + 1`` on),
    then takes new pages from the front of the free list in batch order; ``alloc_decode``
    opens a new page only for requests whose next token starts one.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, device: str | torch.device,
                 kvcache: Any = None, need_sort: bool = False) -> None:
        super().__init__(size, page_size, dtype, device, kvcache, need_sort)
        self.clear()

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device)
        self.free_group = None
        self.free_page_ids_group: list[torch.Tensor] = []
        self.staged_pages: list[torch.Tensor] = []  # need_sort: freed pages wait here until an alloc runs short
        self.num_staged_pages = 0
        self.ledger = PageLedger(self.size, self.page_size)

    def available_size(self) -> int:
        return (len(self.free_pages) + self.num_staged_pages) * self.page_size

    def get_all_free_pages(self) -> torch.Tensor:
        return torch.cat((self.free_pages, *self.staged_pages))

    def merge_and_sort_free(self) -> None:
        if not self.staged_pages:
            return
        self.free_pages = torch.sort(self.get_all_free_pages()).values
        self.staged_pages = []
        self.num_staged_pages = 0

    def _take_pages(self, n: int) -> torch.Tensor:
        pages = self.free_pages[:n]
        self.free_pages = self.free_pages[n:]
        self.ledger.hand_out(pages)
        return pages

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if need_size < 0 or need_size % self.page_size:
            # SGLang floors need_size // page_size here (checked only in debug mode) and hands out fewer slots.
            raise PoolUsageError(f"alloc(need_size={need_size}): a paged allocator hands out whole pages, so "
                                 f"need_size must be a multiple of page_size={self.page_size}; use alloc_extend "
                                 "for token counts")
        num_pages = need_size // self.page_size
        if num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        if num_pages > len(self.free_pages):
            return None
        pages = self._take_pages(num_pages)
        offsets = torch.arange(self.page_size, device=pages.device)
        return (pages[:, None] * self.page_size + offsets).reshape(-1)

    def _check_last_loc(self, last_loc: list[int], prefix: list[int], what: str) -> None:
        """A request whose prefix ends mid-page continues at ``last_loc + 1``: that page must be its own and live."""
        ps = self.page_size
        for i, (loc, pre) in enumerate(zip(last_loc, prefix)):
            if pre % ps == 0:
                continue
            if (loc + 1) % ps != pre % ps:
                raise SlotError(f"{what}: request {i} has prefix {pre} (offset {pre % ps} in its page) but "
                                f"last_loc {loc} sits at offset {loc % ps}; pass the slot of its last token")
            page = loc // ps
            if not (0 < page <= self.num_pages and bool(self.ledger.live[page])):
                raise SlotError(f"{what}: request {i}'s last_loc {loc} is on page {page}, which is not allocated "
                                "(a freed or evicted page would hand out another owner's slots)")

    def alloc_extend(self, prefix_lens: Any, prefix_lens_cpu: Any, seq_lens: Any, seq_lens_cpu: Any,
                     last_loc: Any, extend_num_tokens: int, num_new_pages: int | None = None) -> torch.Tensor | None:
        """Slots for tokens ``prefix_lens[i] .. seq_lens[i] - 1`` of each request, concatenated in batch order."""
        ps = self.page_size
        pre, seq, last = _ints(prefix_lens_cpu), _ints(seq_lens_cpu), _ints(last_loc)
        if not len(pre) == len(seq) == len(last):
            raise PoolUsageError(f"alloc_extend: prefix_lens ({len(pre)}), seq_lens ({len(seq)}) and last_loc "
                                 f"({len(last)}) must have one entry per request")
        if any(s < p or p < 0 for p, s in zip(pre, seq)):
            raise PoolUsageError(f"alloc_extend: need 0 <= prefix_lens <= seq_lens, got {pre} and {seq}")
        if extend_num_tokens != sum(s - p for p, s in zip(pre, seq)):
            raise PoolUsageError(f"alloc_extend: extend_num_tokens={extend_num_tokens} but the lengths add up to "
                                 f"{sum(s - p for p, s in zip(pre, seq))}")
        self._check_last_loc(last, pre, "alloc_extend")
        # SGLang merges staged frees only when this bound exceeds the free list; the bound decides the order.
        if extend_num_tokens // ps + len(pre) + 1 > len(self.free_pages):
            self.merge_and_sort_free()
        needed = get_num_new_pages(seq, ps, pre)
        if num_new_pages is not None and num_new_pages != needed:
            raise PoolUsageError(f"alloc_extend: num_new_pages={num_new_pages} but the lengths need {needed}")
        if needed > len(self.free_pages):
            return None
        pages = self._take_pages(needed).tolist()
        out: list[int] = []
        for p, s, loc in zip(pre, seq, last):
            head = min(s, -(-p // ps) * ps) - p  # fill the partly used last page first
            out.extend(range(loc + 1, loc + 1 + head))
            pos = p + head
            while pos < s:
                page = pages.pop(0)
                n = min(ps, s - pos)
                out.extend(range(page * ps, page * ps + n))
                pos += n
        return torch.tensor(out, dtype=torch.int64, device=self.device)

    def alloc_decode(self, seq_lens: Any, seq_lens_cpu: Any, last_loc: Any) -> torch.Tensor | None:
        """One slot per request for its token at position ``seq_lens[i] - 1``."""
        ps = self.page_size
        seq, last = _ints(seq_lens_cpu), _ints(last_loc)
        if len(seq) != len(last) or any(s < 1 for s in seq):
            raise PoolUsageError(f"alloc_decode: need one seq_len >= 1 and one last_loc per request, got {seq}, {last}")
        self._check_last_loc(last, [s - 1 for s in seq], "alloc_decode")
        if len(seq) > len(self.free_pages):
            self.merge_and_sort_free()
        needed = get_num_new_pages(seq, ps, decode=True)
        if needed > len(self.free_pages):
            return None
        pages = self._take_pages(needed).tolist()
        out = [pages.pop(0) * ps if (s - 1) % ps == 0 else loc + 1 for s, loc in zip(seq, last)]
        return torch.tensor(out, dtype=torch.int64, device=self.device)

    @frees_ids
    def free(self, free_index: torch.Tensor) -> None:
        """Free every page any of ``free_index`` lies on (whole pages, each once)."""
        pages = self.ledger.check_slots_live(free_index, "free")
        self.ledger.retire(pages, "free")
        if self.free_group is not None:
            self.free_group.append(free_index.clone())
        else:
            self.release_page_ids(pages)

    def release_slots(self, free_index: torch.Tensor) -> None:
        self.release_page_ids(torch.unique(free_index // self.page_size))

    @frees_ids
    def free_page_ids(self, page_ids: torch.Tensor) -> None:
        """Free exactly these pages (no dedup: each must be live and listed once)."""
        self.ledger.retire(page_ids, "free_page_ids")
        if self.free_group is not None:
            self.free_page_ids_group.append(page_ids.clone())
        else:
            self.release_page_ids(page_ids)

    @frees_ids
    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free a page-aligned run of one request's row: one representative per page, no unique."""
        reps = _segment_page_reps(free_index, start_pos, self.page_size, "free_segment")
        self.free_page_ids(reps // self.page_size)

    def release_page_ids(self, page_ids: torch.Tensor) -> None:
        if self.need_sort:
            self.staged_pages.append(page_ids)
            self.num_staged_pages += page_ids.numel()
        else:
            self.free_pages = torch.cat((page_ids, self.free_pages))

    def free_group_begin(self) -> None:
        super().free_group_begin()
        self.free_page_ids_group = []

    def free_group_end(self) -> None:
        super().free_group_end()
        if self.free_page_ids_group:
            self.release_page_ids(torch.cat(self.free_page_ids_group))
            self.free_page_ids_group = []


def _segment_page_reps(free_index: torch.Tensor, start_pos: int, page_size: int, what: str) -> torch.Tensor:
    """``free_index[::page_size]`` after checking it names each page of the segment once."""
    if start_pos % page_size:
        raise PoolUsageError(f"{what}: segment start {start_pos} is not a multiple of page_size={page_size}")
    reps = free_index[::page_size]
    if page_size > 1:
        pages = torch.unique(free_index // page_size)
        if not torch.equal(torch.sort(reps // page_size).values, pages) or \
                not bool((free_index // page_size == torch.repeat_interleave(
                    reps // page_size, page_size)[: free_index.numel()]).all()):
            raise SlotError(f"{what}: the slots are not one request's contiguous row (each page_size run must "
                            "lie on one page, each page once)")
    return reps


# -- KV buffers --------------------------------------------------------------------------------------------------------


@dataclass
class KVWriteLoc:
    """Where ``set_kv_buffer`` writes: the full-pool ``loc`` and, for hybrid SWA pools, the translated ``swa_loc``.

    SGLang's attention backends translate once per forward and hand both to the pool;
    the pool never translates inside ``set_kv_buffer``.
    """

    loc: torch.Tensor
    swa_loc: torch.Tensor | None = None
    full_loc: torch.Tensor | None = None


def unwrap_write_loc(loc_info: Any) -> tuple[Any, Any, Any]:
    """``(loc, swa_loc, full_loc)`` from a :class:`KVWriteLoc` (or anything shaped like one) or a bare loc."""
    if hasattr(loc_info, "loc") and hasattr(loc_info, "swa_loc"):
        return loc_info.loc, loc_info.swa_loc, getattr(loc_info, "full_loc", None)
    return loc_info, None, None


class MHATokenToKVPool:
    """Per-layer K and V buffers of ``[size + page_size, head_num, head_dim]`` (row 0 / page 0 is the dummy).

    ``swa_head_num`` / ``swa_head_dim`` / ``swa_v_head_dim`` override the shapes, as in SGLang,
    so an :class:`SWAKVPool` can give its sliding sub-pool other head shapes than its full one.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str | torch.device = "cpu", enable_memory_saver: bool = False,
                 v_head_dim: int | None = None, swa_head_num: int | None = None, swa_head_dim: int | None = None,
                 swa_v_head_dim: int | None = None, start_layer: int | None = None, end_layer: int | None = None,
                 **_unused: Any) -> None:
        if size < 0 or page_size < 1 or layer_num < 0:
            raise PoolUsageError(f"MHATokenToKVPool(size={size}, page_size={page_size}, layer_num={layer_num}): "
                                 "need size >= 0, page_size >= 1, layer_num >= 0")
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.store_dtype = dtype
        self.device = device
        self.layer_num = layer_num
        self.start_layer = start_layer or 0
        self.end_layer = end_layer or layer_num - 1
        self.head_num = swa_head_num if swa_head_num is not None else head_num
        self.head_dim = swa_head_dim if swa_head_dim is not None else head_dim
        self.v_head_dim = (swa_v_head_dim if swa_v_head_dim is not None
                           else v_head_dim if v_head_dim is not None else head_dim)
        rows = size + page_size
        self.k_buffer = [torch.zeros((rows, self.head_num, self.head_dim), dtype=dtype, device=device)
                         for _ in range(layer_num)]
        self.v_buffer = [torch.zeros((rows, self.head_num, self.v_head_dim), dtype=dtype, device=device)
                         for _ in range(layer_num)]
        self.model_layer_ids = tuple(range(self.start_layer, self.start_layer + layer_num))

    def _local(self, layer_id: int) -> int:
        local = layer_id - self.start_layer
        if not 0 <= local < self.layer_num:
            raise LayerMappingError(f"layer {layer_id} is not in this pool (layers {self.start_layer}.."
                                    f"{self.start_layer + self.layer_num - 1}); pass a layer id it holds")
        return local

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[self._local(layer_id_of(layer_id))]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[self._local(layer_id_of(layer_id))]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_v_head_dim(self) -> int:
        return self.v_head_dim

    def translate_loc_for_layer(self, layer: Any, loc: Any) -> torch.Tensor:
        """The slots ``layer`` reads for full-pool ids ``loc``: the ids themselves in a single pool."""
        self._local(layer_id_of(layer))
        return _as_index(loc, self.device)

    def set_kv_buffer(self, layer: Any, loc: Any, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      k_scale: float | None = None, v_scale: float | None = None,
                      layer_id_override: int | None = None) -> None:
        """Write ``cache_k`` / ``cache_v`` ``[n, heads, dim]`` at slots ``loc`` of one layer."""
        loc, _, _ = unwrap_write_loc(loc)
        loc = _as_index(loc, self.k_buffer[0].device if self.k_buffer else self.device)
        layer_id = layer_id_override if layer_id_override is not None else layer_id_of(layer)
        local = self._local(layer_id)
        rows = self.size + self.page_size
        bad = loc[(loc < 0) | (loc >= rows)]
        if bad.numel():
            raise SlotError(f"set_kv_buffer layer {layer_id}: slot {int(bad[0])} is out of range 0..{rows - 1}")
        if cache_k.shape[0] != loc.numel() or cache_v.shape[0] != loc.numel():
            raise PoolUsageError(f"set_kv_buffer layer {layer_id}: {loc.numel()} slots but cache_k has "
                                 f"{cache_k.shape[0]} rows and cache_v {cache_v.shape[0]}")
        if tuple(cache_k.shape[1:]) != (self.head_num, self.head_dim) or \
                tuple(cache_v.shape[1:]) != (self.head_num, self.v_head_dim):
            raise PoolUsageError(f"set_kv_buffer layer {layer_id}: this pool holds K [n, {self.head_num}, "
                                 f"{self.head_dim}] and V [n, {self.head_num}, {self.v_head_dim}], got "
                                 f"{list(cache_k.shape)} and {list(cache_v.shape)}")
        if cache_k.dtype != self.dtype:
            if k_scale is not None:
                cache_k = cache_k / k_scale
            if v_scale is not None:
                cache_v = cache_v / v_scale
            cache_k, cache_v = cache_k.to(self.dtype), cache_v.to(self.dtype)
        self.k_buffer[local][loc] = cache_k
        self.v_buffer[local][loc] = cache_v


class SWAKVPool:
    """Hybrid pool: full-attention layers in ``full_kv_pool`` (``size``), sliding in ``swa_kv_pool`` (``size_swa``).

    ``head_num`` / ``head_dim`` / ``v_head_dim`` shape both sub-pools; ``swa_head_num`` /
    ``swa_head_dim`` / ``swa_v_head_dim`` (keyword) override the sliding side, as in SGLang
    (Gemma-4's full layers use head_dim 512, its sliding layers 256). As in SGLang, the sliding
    side's V head dim falls back to ``v_head_dim`` / ``head_dim``, not to ``swa_head_dim``: pass
    ``swa_v_head_dim`` too.
    """

    def __init__(self, size: int, size_swa: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 swa_attention_layer_ids: Sequence[int], full_attention_layer_ids: Sequence[int],
                 device: str | torch.device = "cpu", token_to_kv_pool_class: type = MHATokenToKVPool,
                 full_kv_pool_class: type | None = None, swa_kv_pool_class: type | None = None,
                 full_kv_pool_kwargs: dict | None = None, swa_kv_pool_kwargs: dict | None = None,
                 enable_memory_saver: bool = False, **kwargs: Any) -> None:
        swa_ids, full_ids = [layer_id_of(i) for i in swa_attention_layer_ids], [layer_id_of(i) for i in
                                                                              full_attention_layer_ids]
        both = swa_ids + full_ids
        if len(set(both)) != len(both) or any(i < 0 for i in both):
            raise LayerMappingError(f"SWAKVPool: layer ids must be distinct and >= 0, each either sliding or full; "
                                    f"got swa={swa_ids}, full={full_ids}")
        self.size = size
        self.size_swa = size_swa
        self.page_size = page_size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.device = device
        self.swa_layer_nums = len(swa_ids)
        self.full_layer_nums = len(full_ids)
        self.layer_num = self.swa_layer_nums + self.full_layer_nums
        self.start_layer = 0
        common = {"page_size": page_size, "device": device, "enable_memory_saver": enable_memory_saver,
                  "head_num": head_num, "head_dim": head_dim}
        if full_kv_pool_kwargs is None:
            full_kv_pool_kwargs = {**common, **kwargs}
            for key in ("swa_head_num", "swa_head_dim", "swa_v_head_dim"):
                full_kv_pool_kwargs.pop(key, None)
        if swa_kv_pool_kwargs is None:
            swa_kv_pool_kwargs = {**common, **kwargs}
        self.full_kv_pool = (full_kv_pool_class or token_to_kv_pool_class)(
            size=size, dtype=dtype, layer_num=self.full_layer_nums, **full_kv_pool_kwargs)
        self.swa_kv_pool = (swa_kv_pool_class or token_to_kv_pool_class)(
            size=size_swa, dtype=dtype, layer_num=self.swa_layer_nums, **swa_kv_pool_kwargs)
        self.full_kv_pool.model_layer_ids = tuple(full_ids)
        self.swa_kv_pool.model_layer_ids = tuple(swa_ids)
        # {global layer id: (index inside its sub-pool, is_swa)}
        self.layers_mapping: dict[int, tuple[int, bool]] = {}
        for index, layer_id in enumerate(full_ids):
            self.layers_mapping[layer_id] = (index, False)
        for index, layer_id in enumerate(swa_ids):
            self.layers_mapping[layer_id] = (index, True)
        self.full_to_swa_index_mapping: torch.Tensor | None = None

    def register_mapping(self, full_to_swa_index_mapping: torch.Tensor) -> None:
        """Adopt the allocator's mapping tensor (shared, not copied: allocs show up here at once)."""
        self.full_to_swa_index_mapping = full_to_swa_index_mapping

    def _lookup(self, layer: Any) -> tuple[int, bool]:
        layer_id = layer_id_of(layer)
        try:
            return self.layers_mapping[layer_id]
        except KeyError:
            raise LayerMappingError(
                f"layer {layer_id} is not in this SWAKVPool's layers_mapping (full layers "
                f"{sorted(k for k, v in self.layers_mapping.items() if not v[1])}, sliding layers "
                f"{sorted(k for k, v in self.layers_mapping.items() if v[1])}); pass one of those ids"
            ) from None

    def is_swa_layer(self, layer: Any) -> bool:
        return self._lookup(layer)[1]

    def sub_pool(self, layer: Any) -> tuple[MHATokenToKVPool, int]:
        """The sub-pool holding ``layer`` and the layer's index inside it."""
        index, is_swa = self._lookup(layer)
        return (self.swa_kv_pool if is_swa else self.full_kv_pool), index

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        pool, index = self.sub_pool(layer_id)
        return pool.get_key_buffer(index)

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        pool, index = self.sub_pool(layer_id)
        return pool.get_value_buffer(index)

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        pool, index = self.sub_pool(layer_id)
        return pool.get_kv_buffer(index)

    def get_v_head_dim(self) -> int:
        return (self.full_kv_pool if self.full_layer_nums > 0 else self.swa_kv_pool).get_v_head_dim()

    def translate_loc_from_full_to_swa(self, kv_indices: Any) -> torch.Tensor:
        """SWA-pool slots of full-pool slots: ``full_to_swa_index_mapping[kv_indices]`` (-1 stays -1)."""
        mapping = self.full_to_swa_index_mapping
        if mapping is None:
            raise PoolUsageError("this SWAKVPool has no mapping yet: build its SWATokenToKVPoolAllocator "
                                 "(which calls register_mapping) before translating")
        idx = _as_index(kv_indices, mapping.device)
        bad = idx[(idx < -1) | (idx >= mapping.numel() - 1)]
        if bad.numel():
            raise SlotError(f"translate_loc_from_full_to_swa: full slot {int(bad[0])} is out of range "
                            f"0..{mapping.numel() - 2} (or -1 for 'no slot')")
        return mapping[idx]

    def translate_loc_for_layer(self, layer: Any, loc: Any) -> torch.Tensor:
        """The slots ``layer`` reads for full-pool ids ``loc``: translated for sliding layers, as-is for full ones.

        A token whose SWA slot was freed reads as 0, the dummy slot.
        """
        if self.is_swa_layer(layer):
            return self.translate_loc_from_full_to_swa(loc)
        return _as_index(loc, self.device)

    def set_kv_buffer(self, layer: Any, loc_info: Any, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        """Write one layer's K/V: full layers at ``loc``, sliding layers at the pre-translated ``swa_loc``.

        Pass ``KVWriteLoc(loc, swa_loc=pool.translate_loc_from_full_to_swa(loc))``; a bare
        loc is enough only for full-attention layers.
        """
        loc, swa_loc, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_of(layer)
        pool, index = self.sub_pool(layer_id)
        if pool is self.swa_kv_pool:
            if swa_loc is None:
                raise PoolUsageError(
                    f"set_kv_buffer: layer {layer_id} is a sliding layer, so it writes SWA-pool slots; pass "
                    "KVWriteLoc(loc, swa_loc=pool.translate_loc_from_full_to_swa(loc)) (full ids would land on "
                    "another token's SWA slot)")
            loc = swa_loc
        scale_k = None if k_scale == 1.0 else k_scale
        scale_v = None if v_scale == 1.0 else v_scale
        try:
            pool.set_kv_buffer(None, loc, cache_k, cache_v, scale_k, scale_v, layer_id_override=index)
        except (SlotError, PoolUsageError) as err:
            kind = "sliding" if pool is self.swa_kv_pool else "full"
            raise type(err)(f"global layer {layer_id} ({kind} sub-pool index {index}): {err}") from None


# -- the hybrid allocator ----------------------------------------------------------------------------------------------


class SWATokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Two sub-allocators (full and SWA) and the full->SWA mapping every allocation writes.

    ``alloc`` (page_size 1) and ``alloc_extend`` / ``alloc_decode`` (page_size > 1) return
    full-pool ids and record ``mapping[full] = swa``. ``free_swa`` gives back the SWA side
    only (whole pages when paged) and resets the mapping of those full slots to 0, the dummy.
    ``size`` is the smaller side's, as in SGLang; ``size_full`` / ``size_swa`` name each side.
    """

    def __init__(self, size: int, size_swa: int, page_size: int, dtype: torch.dtype, device: str | torch.device,
                 kvcache: Any, need_sort: bool = False) -> None:
        if not (hasattr(kvcache, "register_mapping") and hasattr(kvcache, "swa_kv_pool")):
            raise PoolUsageError(f"SWATokenToKVPoolAllocator needs an SWA pool (with swa_kv_pool and "
                                 f"register_mapping) as kvcache, got {type(kvcache).__name__}")
        super().__init__(min(size, size_swa), page_size, dtype, device, kvcache, need_sort)
        self._size_full = size
        self._size_swa = size_swa
        full_pool, swa_pool = getattr(kvcache, "full_kv_pool", None), kvcache.swa_kv_pool
        if page_size == 1:
            self.full_attn_allocator = TokenToKVPoolAllocator(size, dtype, device, full_pool, need_sort)
            self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, dtype, device, swa_pool, need_sort)
        else:
            self.full_attn_allocator = PagedTokenToKVPoolAllocator(size, page_size, dtype, device, full_pool,
                                                                   need_sort)
            self.swa_attn_allocator = PagedTokenToKVPoolAllocator(size_swa, page_size, dtype, device, swa_pool,
                                                                  need_sort)
        # Trailing -1: a last_loc of -1 ("no prefix") translates to -1 on the SWA side too.
        self.full_to_swa_index_mapping = torch.cat([
            torch.zeros(size + page_size, dtype=torch.int64, device=device),
            torch.tensor([-1], dtype=torch.int64, device=device),
        ])
        self.clear()
        self._kvcache.register_mapping(self.full_to_swa_index_mapping)

    @property
    def size_full(self) -> int:
        return self._size_full

    @property
    def size_swa(self) -> int:
        return self._size_swa

    def clear(self) -> None:
        self.swa_attn_allocator.clear()
        self.full_attn_allocator.clear()
        self.full_to_swa_index_mapping[:-1].fill_(0)
        self.free_group = None
        self.swa_free_group: list[torch.Tensor] = []
        self.swa_page_ids_group: list[torch.Tensor] = []

    def available_size(self) -> int:
        return min(self.full_available_size(), self.swa_available_size())

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def new_pages_available(self, num_full_pages: int, num_swa_pages: int) -> bool:
        ps = self.page_size
        return (num_full_pages <= self.full_available_size() // ps
                and num_swa_pages <= self.swa_available_size() // ps)

    def translate_loc_from_full_to_swa(self, kv_indices: Any) -> torch.Tensor:
        return self._kvcache.translate_loc_from_full_to_swa(kv_indices)

    def set_full_to_swa_mapping(self, full_indices: torch.Tensor, swa_indices: torch.Tensor) -> None:
        if full_indices.numel() != swa_indices.numel():
            raise PoolUsageError(f"set_full_to_swa_mapping: {full_indices.numel()} full ids but "
                                 f"{swa_indices.numel()} SWA ids")
        self.full_to_swa_index_mapping[full_indices.to(torch.int64)] = swa_indices.to(torch.int64)

    def clear_full_to_swa_mapping(self, full_indices: torch.Tensor) -> None:
        if full_indices.numel():
            self.full_to_swa_index_mapping.index_fill_(0, full_indices.to(torch.int64), 0)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if self.page_size != 1:
            raise PoolUsageError(f"alloc(need_size) is the page_size 1 path; with page_size={self.page_size} use "
                                 "alloc_extend / alloc_decode")
        if need_size > self.full_attn_allocator.available_size() or \
                need_size > self.swa_attn_allocator.available_size():
            return None
        full = self.full_attn_allocator.alloc(need_size)
        swa = self.swa_attn_allocator.alloc(need_size)
        self.set_full_to_swa_mapping(full, swa)
        return full

    def alloc_extend(self, prefix_lens: Any, prefix_lens_cpu: Any, seq_lens: Any, seq_lens_cpu: Any,
                     last_loc: Any, extend_num_tokens: int) -> torch.Tensor | None:
        if self.page_size == 1:
            raise PoolUsageError("alloc_extend is the paged path; with page_size 1 use alloc(extend_num_tokens)")
        num_new_pages = get_num_new_pages(seq_lens_cpu, self.page_size, prefix_lens_cpu)
        if not self.new_pages_available(num_new_pages, num_new_pages):
            return None
        swa_last_loc = self.translate_loc_from_full_to_swa(last_loc)  # before the alloc, as SGLang does
        full = self.full_attn_allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                                                     last_loc, extend_num_tokens, num_new_pages)
        swa = self.swa_attn_allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                                                   swa_last_loc, extend_num_tokens, num_new_pages)
        self.set_full_to_swa_mapping(full, swa)
        return full

    def alloc_decode(self, seq_lens: Any, seq_lens_cpu: Any, last_loc: Any) -> torch.Tensor | None:
        if self.page_size == 1:
            raise PoolUsageError("alloc_decode is the paged path; with page_size 1 use alloc(batch_size)")
        num_new_pages = get_num_new_pages(seq_lens_cpu, self.page_size, decode=True)
        # Checked up front: SGLang allocates the full side first and, when the SWA side then fails,
        # returns None with the full pages already taken (they leak).
        if not self.new_pages_available(num_new_pages, num_new_pages):
            return None
        swa_last_loc = self.translate_loc_from_full_to_swa(last_loc)
        full = self.full_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        swa = self.swa_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, swa_last_loc)
        self.set_full_to_swa_mapping(full, swa)
        return full

    # -- frees -------------------------------------------------------------------------------------------------------
    # Each free checks everything (full slots live, SWA peers mapped and live) before it changes anything;
    # the SWA side's pages are retired in its ledger at once and released now or at the free group's end.

    def _check_full_live(self, free_index: torch.Tensor, what: str) -> None:
        self.full_attn_allocator.ledger.check_slots_live(free_index, what)

    def _expand_to_full_pages(self, indices: torch.Tensor) -> torch.Tensor:
        base = indices // self.page_size * self.page_size
        return (base[:, None] + torch.arange(self.page_size, device=indices.device)).reshape(-1)

    @frees_ids
    def free(self, free_index: torch.Tensor) -> None:
        """Free both sides of full slots whose SWA peers are still live."""
        self.free_swa(free_index)  # SWA first: it reads the mapping
        self.free_full(free_index)

    @frees_ids
    def free_swa(self, free_index: torch.Tensor) -> None:
        """Give back the SWA slots of full slots ``free_index`` (whole pages when paged); keep the full slots."""
        if self.page_size == 1:
            self._free_swa_pages(free_index, start_pos=0, what="free_swa")
            return
        self._check_full_live(free_index, "free_swa")
        expanded = self._expand_to_full_pages(free_index)
        swa = self.full_to_swa_index_mapping[expanded]
        mapped_pages = torch.unique(expanded[swa > 0] // self.page_size)
        asked_pages = torch.unique(free_index // self.page_size)
        missing = asked_pages[~torch.isin(asked_pages, mapped_pages)]
        if missing.numel():
            raise SlotError(f"free_swa: full page {int(missing[0])} has no live SWA slots (freed or evicted "
                            "already); free its full side with free_full")
        swa_pages = torch.unique(swa[swa > 0] // self.page_size)
        self.swa_attn_allocator.ledger.retire(swa_pages, "free_swa (SWA side)")
        self.clear_full_to_swa_mapping(expanded)
        if self.free_group is not None:
            self.swa_free_group.append(swa)
            return
        self._release_swa(swa)

    @frees_ids
    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """``free_swa`` for a page-aligned run ``kv_row[start_pos : start_pos + n]`` of one request."""
        self._free_swa_pages(free_index, start_pos=start_pos, what="free_swa_segment")

    def _free_swa_pages(self, free_index: torch.Tensor, start_pos: int, what: str) -> None:
        ps = self.page_size
        self._check_full_live(free_index, what)
        reps = _segment_page_reps(free_index, start_pos, ps, what)
        swa_tokens = self.full_to_swa_index_mapping[reps]
        unmapped = reps[swa_tokens <= 0]
        if unmapped.numel():
            raise SlotError(f"{what}: full slot {int(unmapped[0])} has no live SWA slot (freed or evicted "
                            "already); free its full side with free_full")
        swa_pages = swa_tokens // ps
        self.swa_attn_allocator.ledger.retire(swa_pages, f"{what} (SWA side)")
        self.clear_full_to_swa_mapping(self._expand_to_full_pages(reps) if ps > 1 else reps)
        if self.free_group is not None:
            self.swa_page_ids_group.append(swa_pages)
            return
        self.swa_attn_allocator.release_page_ids(swa_pages)

    def _release_swa(self, swa_indices: torch.Tensor) -> None:
        if self.page_size > 1:
            swa_indices = swa_indices[swa_indices > 0]  # page expansion picked up never-allocated slots
        self.swa_attn_allocator.release_slots(swa_indices)

    def _check_swa_released(self, free_index: torch.Tensor, what: str, way_out: str) -> None:
        self._check_full_live(free_index, what)
        still = free_index[self.full_to_swa_index_mapping[free_index] != 0]
        if still.numel():
            raise SlotError(f"{what}: full slot {int(still[0])} still holds SWA slot "
                            f"{int(self.full_to_swa_index_mapping[still[0]])}; {way_out}")

    @frees_ids
    def free_full(self, free_index: torch.Tensor) -> None:
        """Free full slots whose SWA peers were already given back (mapping 0)."""
        self._check_swa_released(free_index, "free_full", "use free (both sides) or free_swa first")
        self.full_attn_allocator.free(free_index)

    @frees_ids
    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self.free_swa_segment(free_index, start_pos=start_pos)
        self.full_attn_allocator.free_segment(free_index, start_pos=start_pos)

    @frees_ids
    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self._check_swa_released(free_index, "free_full_segment", "use free_segment")
        self.full_attn_allocator.free_segment(free_index, start_pos=start_pos)

    def free_group_begin(self) -> None:
        super().free_group_begin()
        self.swa_free_group = []
        self.swa_page_ids_group = []
        self.full_attn_allocator.free_group_begin()

    def free_group_end(self) -> None:
        """Release what the group held, in SGLang's order: SWA page ids, then SWA slots, then the full side."""
        super().free_group_end()  # nothing of its own: every free here goes to a sub-allocator
        if self.swa_page_ids_group:
            pages, self.swa_page_ids_group = torch.cat(self.swa_page_ids_group), []
            self.swa_attn_allocator.release_page_ids(pages)
        if self.swa_free_group:
            swa, self.swa_free_group = torch.cat(self.swa_free_group), []
            self._release_swa(swa)
        self.full_attn_allocator.free_group_end()
