"""Helpers the pools and allocators share: layer ids, slot-id tensors, pages a batch needs.

``get_num_new_pages`` is SGLang 0.5.23's helper of that name (``srt/utils``); the other two are the kit's.
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.errors import LayerMappingError, SlotError


def layer_id_of(layer: Any) -> int:
    """A layer id from an int or from any object with ``layer_id`` (SGLang's ``RadixAttention``)."""
    layer_id = getattr(layer, "layer_id", layer)
    if isinstance(layer_id, bool) or not isinstance(layer_id, int):
        raise LayerMappingError(f"layer {layer!r}: pass an int layer id or an object with an int `layer_id`")
    return layer_id


def as_index(ids: Any, device: Any) -> torch.Tensor:
    """Slot ids as a 1-D int64 tensor on ``device`` (ints, lists and tensors accepted)."""
    t = torch.as_tensor(ids, device=device)
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise SlotError(f"slot ids must be integers, got dtype {t.dtype}")
    return t.reshape(-1).to(torch.int64)


def get_num_new_pages(seq_lens: Any, page_size: int, prefix_lens: Any = None, decode: bool = False) -> int:
    """Pages a batch needs beyond the ones its requests already hold (SGLang's helper of that name)."""
    seq = torch.as_tensor(seq_lens).to(torch.int64).cpu()
    if prefix_lens is None or decode:
        return int((seq % page_size == 1).sum())  # a decode step opens a page when it lands at offset 0
    pre = torch.as_tensor(prefix_lens).to(torch.int64).cpu()
    return int(((seq + page_size - 1) // page_size - (pre + page_size - 1) // page_size).sum())
