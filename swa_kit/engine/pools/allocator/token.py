"""The page-size-1 token allocator, mirroring SGLang 0.5.23's ``srt/mem_cache/allocator/token.py``."""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.errors import PoolUsageError
from swa_kit.engine.pools.allocator.base import BaseTokenToKVPoolAllocator, PageLedger, frees_ids


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
        # The same retire-then-hold-or-release steps as PagedTokenToKVPoolAllocator.free_page_ids:
        # SGLang repeats them too.
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
