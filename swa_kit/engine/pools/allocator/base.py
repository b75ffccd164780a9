"""The base token allocator and the kit's page ledger, mirroring SGLang 0.5.23's ``srt/mem_cache/allocator/base.py``.

:class:`BaseTokenToKVPoolAllocator` holds what every token allocator shares (sizes, the
kvcache it serves, free groups, segment frees). :class:`PageLedger` is the kit's own: the
record of which pages a one-pool allocator has handed out, so that a bad free raises where
SGLang would corrupt its free list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import torch

from swa_kit.errors import PoolUsageError, SlotError
from swa_kit.engine.pools.utils import as_index

_Free = TypeVar("_Free", bound=Callable[..., None])


def frees_ids(method: _Free) -> _Free:
    """A free method's first argument as a 1-D int64 tensor on ``self.device``; an empty one frees nothing."""

    @functools.wraps(method)
    def wrapper(self: Any, ids: Any, *args: Any, **kwargs: Any) -> None:
        ids = as_index(ids, self.device)
        if ids.numel():
            method(self, ids, *args, **kwargs)

    return cast(_Free, wrapper)  # functools.wraps: the method's name and signature, ids made a tensor


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

    The two one-pool allocators (``token.py``, ``paged.py``) keep a :class:`PageLedger`
    (``ledger``) next to their free list; ``release_slots`` / ``release_page_ids`` put pages its
    ``retire`` already checked back on that list. The SWA allocator (``swa.py``) frees through
    those of its two sub-allocators.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, device: str | torch.device,
                 kvcache: Any, need_sort: bool) -> None:
        if size < 0 or page_size < 1:
            raise PoolUsageError(f"allocator size={size}, page_size={page_size}: need size >= 0 and page_size >= 1")
        # Stored as SGLang's base stores them; KVCache.__init__ (memory_pool.py) stores its own the same way.
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

    def free(self, free_index: torch.Tensor) -> None:
        raise NotImplementedError  # each allocator frees its own way (abstract in SGLang's base too)

    def free_full(self, free_index: Any) -> None:
        """Free full-attention slots whose SWA peers are already given back: one pool has none, so a plain free."""
        self.free(free_index)

    def free_segment(self, free_index: Any, *, start_pos: int) -> None:
        """Free one request's ``kv_row[start_pos : start_pos + n]``."""
        self.free(free_index)

    def free_full_segment(self, free_index: Any, *, start_pos: int) -> None:
        """``free_full`` for one request's ``kv_row[start_pos : start_pos + n]``; the start must begin a page."""
        if start_pos % self.page_size:
            raise PoolUsageError(f"free_full_segment: segment start {start_pos} is not a multiple of "
                                 f"page_size={self.page_size}")
        self.free_full(free_index)

    def free_segments(self, segments: Iterable[tuple[Any, int]]) -> None:
        """Free several ``(free_index, start_pos)`` runs of one request's kv row, each as :meth:`free_segment` does.

        SGLang's scheduler frees a finished request's row this way (``free_kv_row_segments`` in
        ``srt/mem_cache/common.py``). Run ``i`` covers pages ``start_pos // page_size`` up to the
        page of its last token; runs come in row order and share no page, so each page is freed
        once. That order is checked for every run before any is freed; a run that
        :meth:`free_segment` then refuses leaves the runs before it freed, as separate calls would.
        """
        for free_index, start_pos in self._page_disjoint(segments, "free_segments"):
            self.free_segment(free_index, start_pos=start_pos)

    def free_full_segments(self, segments: Iterable[tuple[Any, int]]) -> None:
        """:meth:`free_segments` for the full side alone: each run as :meth:`free_full_segment` frees it."""
        for free_index, start_pos in self._page_disjoint(segments, "free_full_segments"):
            self.free_full_segment(free_index, start_pos=start_pos)

    def _page_disjoint(self, segments: Iterable[tuple[Any, int]], what: str) -> list[tuple[torch.Tensor, int]]:
        """The non-empty runs as index tensors, after checking they come in row order and share no page."""
        ps, runs, prev_end = self.page_size, [], None
        for free_index, start_pos in segments:
            free_index = as_index(free_index, self.device)
            if free_index.numel() == 0:
                continue
            if prev_end is not None and start_pos // ps <= (prev_end - 1) // ps:
                raise PoolUsageError(f"{what}: the run starting at position {start_pos} does not begin after "
                                     f"the page of the run ending at position {prev_end} (page_size={ps}); pass "
                                     "the runs in row order, each page in one run")
            prev_end = start_pos + free_index.numel()
            runs.append((free_index, start_pos))
        return runs

    # The release half of a free: put slots (pages) whose ledger entries are already retired back on
    # the free list. The SWA allocator never reaches these: it releases through its sub-allocators.
    def release_slots(self, free_index: torch.Tensor) -> None:
        """Put already-retired slots back on the free list (their pages, for a paged allocator)."""
        raise TypeError(f"{type(self).__name__} keeps no free list of its own to release slots into")

    def release_page_ids(self, page_ids: torch.Tensor) -> None:
        """Put already-retired pages back on the free list."""
        raise TypeError(f"{type(self).__name__} keeps no free list of its own to release pages into")


def segment_page_reps(free_index: torch.Tensor, start_pos: int, page_size: int, what: str) -> torch.Tensor:
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
