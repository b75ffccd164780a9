"""The hybrid full + SWA token allocator, mirroring SGLang 0.5.23's ``srt/mem_cache/allocator/swa.py``."""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.errors import PoolExhaustedError, PoolUsageError, SlotError
from swa_kit.engine.pools.allocator.base import BaseTokenToKVPoolAllocator, frees_ids, segment_page_reps
from swa_kit.engine.pools.allocator.paged import PagedTokenToKVPoolAllocator
from swa_kit.engine.pools.allocator.token import TokenToKVPoolAllocator
from swa_kit.engine.pools.utils import get_num_new_pages


def _allocated(ids: torch.Tensor | None) -> torch.Tensor:
    """A sub-allocator's ids, where its free count (checked first) said it had room."""
    if ids is None:
        raise PoolExhaustedError("an SWA sub-allocator refused an allocation its free count allowed")
    return ids


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
        self.full_attn_allocator: TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator
        self.swa_attn_allocator: TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator
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
        self.set_full_to_swa_mapping(_allocated(full), _allocated(swa))
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
        self.set_full_to_swa_mapping(_allocated(full), _allocated(swa))
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
        self.set_full_to_swa_mapping(_allocated(full), _allocated(swa))
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
        reps = segment_page_reps(free_index, start_pos, ps, what)
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
