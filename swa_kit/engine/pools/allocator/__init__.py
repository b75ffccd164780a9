"""Token-to-KV-slot allocators, one module per strategy, as in SGLang 0.5.23's ``srt/mem_cache/allocator/``.

Like SGLang's ``allocator/__init__.py`` this names the base, page-size-1 and paged allocators;
the hybrid one is imported from :mod:`swa_kit.engine.pools.allocator.swa` (or from :mod:`swa_kit.engine.pools`).
"""

from swa_kit.engine.pools.allocator.base import BaseTokenToKVPoolAllocator, PageLedger
from swa_kit.engine.pools.allocator.paged import PagedTokenToKVPoolAllocator
from swa_kit.engine.pools.allocator.token import TokenToKVPoolAllocator

__all__ = ["BaseTokenToKVPoolAllocator", "PageLedger", "PagedTokenToKVPoolAllocator", "TokenToKVPoolAllocator"]
