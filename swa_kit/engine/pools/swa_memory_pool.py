"""The hybrid full + SWA KV pool, mirroring SGLang 0.5.23's ``srt/mem_cache/swa_memory_pool.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from swa_kit.errors import LayerMappingError, PoolUsageError, SlotError
from swa_kit.engine.pools.memory_pool import KVCache, MHATokenToKVPool, unwrap_write_loc
from swa_kit.engine.pools.utils import as_index, layer_id_of


class SWAKVPool(KVCache):
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
        super().__init__(size, page_size, dtype, len(both), device)
        self.size_swa = size_swa
        self.head_num = head_num
        self.head_dim = head_dim
        self.swa_layer_nums = len(swa_ids)
        self.full_layer_nums = len(full_ids)
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
        idx = as_index(kv_indices, mapping.device)
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
        return as_index(loc, self.device)

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
