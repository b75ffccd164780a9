"""The whole-page token allocator, mirroring SGLang 0.5.23's ``srt/mem_cache/allocator/paged.py``.

SGLang's ``alloc_extend`` / ``alloc_decode`` run a Triton kernel (or the torch fallbacks
``alloc_extend_naive`` / ``alloc_decode_naive``); the kit writes the same order out in Python.
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.errors import PoolUsageError, SlotError
from swa_kit.engine.pools.allocator.base import BaseTokenToKVPoolAllocator, PageLedger, frees_ids, segment_page_reps
from swa_kit.engine.pools.utils import get_num_new_pages


def _ints(values: Any) -> list[int]:
    return [int(v) for v in torch.as_tensor(values).reshape(-1).tolist()]


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
        # The same steps as TokenToKVPoolAllocator.free, as SGLang repeats them in token.py and paged.py.
        self.ledger.retire(page_ids, "free_page_ids")
        if self.free_group is not None:
            self.free_page_ids_group.append(page_ids.clone())
        else:
            self.release_page_ids(page_ids)

    @frees_ids
    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free a page-aligned run of one request's row: one representative per page, no unique."""
        reps = segment_page_reps(free_index, start_pos, self.page_size, "free_segment")
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
