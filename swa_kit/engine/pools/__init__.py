"""KV memory pools and slot allocators, mirroring SGLang 0.5.23's ``srt/mem_cache``.

Names, constructor arguments, allocation order and return values follow SGLang, and each
module mirrors one of SGLang's files, so the kit can be read beside them:
``memory_pool.py``, ``swa_memory_pool.py``, ``allocator/{base,token,paged,swa}.py``
(and ``get_num_new_pages`` from ``srt/utils``, here in ``utils.py``).

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
Each one-pool allocator therefore keeps a :class:`PageLedger` (a ``live`` flag per page)
next to SGLang's free list; the SWA allocator frees through its two sub-allocators' ledgers.
"""

from swa_kit.engine.pools.allocator.base import BaseTokenToKVPoolAllocator, PageLedger
from swa_kit.engine.pools.allocator.paged import PagedTokenToKVPoolAllocator
from swa_kit.engine.pools.allocator.swa import SWATokenToKVPoolAllocator
from swa_kit.engine.pools.allocator.token import TokenToKVPoolAllocator
from swa_kit.engine.pools.memory_pool import KVWriteLoc, MHATokenToKVPool, ReqToTokenPool, unwrap_write_loc
from swa_kit.engine.pools.swa_memory_pool import SWAKVPool
from swa_kit.engine.pools.utils import get_num_new_pages, layer_id_of

__all__ = [
    "BaseTokenToKVPoolAllocator",
    "KVWriteLoc",
    "MHATokenToKVPool",
    "PageLedger",
    "PagedTokenToKVPoolAllocator",
    "ReqToTokenPool",
    "SWAKVPool",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
    "get_num_new_pages",
    "layer_id_of",
    "unwrap_write_loc",
]
