"""Request rows and per-layer KV buffers, mirroring SGLang 0.5.23's ``srt/mem_cache/memory_pool.py``.

:class:`ReqToTokenPool` maps ``(request row, position)`` to a full-pool slot;
:class:`MHATokenToKVPool` holds each layer's K and V; :class:`KVWriteLoc` says where a
layer's ``set_kv_buffer`` writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from swa_kit.errors import LayerMappingError, PoolUsageError, SlotError
from swa_kit.engine.pools.utils import as_index, layer_id_of


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


class KVCache:
    """What every KV pool records about itself (SGLang's ``KVCache`` base): sizes, dtype, device, its layers."""

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, layer_num: int, device: str | torch.device,
                 start_layer: int | None = None, end_layer: int | None = None) -> None:
        if size < 0 or page_size < 1 or layer_num < 0:
            raise PoolUsageError(f"{type(self).__name__}(size={size}, page_size={page_size}, layer_num={layer_num}): "
                                 "need size >= 0, page_size >= 1, layer_num >= 0")
        # Stored as SGLang's KVCache stores them; the allocator base (allocator/base.py) stores its own alike.
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.store_dtype = dtype
        self.device = device
        self.layer_num = layer_num
        self.start_layer = start_layer or 0
        self.end_layer = end_layer or layer_num - 1


class MHATokenToKVPool(KVCache):
    """Per-layer K and V buffers of ``[size + page_size, head_num, head_dim]`` (row 0 / page 0 is the dummy).

    ``swa_head_num`` / ``swa_head_dim`` / ``swa_v_head_dim`` override the shapes, as in SGLang,
    so an :class:`SWAKVPool` can give its sliding sub-pool other head shapes than its full one.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str | torch.device = "cpu", enable_memory_saver: bool = False,
                 v_head_dim: int | None = None, swa_head_num: int | None = None, swa_head_dim: int | None = None,
                 swa_v_head_dim: int | None = None, start_layer: int | None = None, end_layer: int | None = None,
                 **_unused: Any) -> None:
        super().__init__(size, page_size, dtype, layer_num, device, start_layer, end_layer)
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
        return as_index(loc, self.device)

    def set_kv_buffer(self, layer: Any, loc: Any, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      k_scale: float | None = None, v_scale: float | None = None,
                      layer_id_override: int | None = None) -> None:
        """Write ``cache_k`` / ``cache_v`` ``[n, heads, dim]`` at slots ``loc`` of one layer."""
        loc, _, _ = unwrap_write_loc(loc)
        loc = as_index(loc, self.k_buffer[0].device if self.k_buffer else self.device)
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
