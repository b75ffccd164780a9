"""SGLang's question "how much memory has this GPU?" answered for the GPU the launch names, not this machine's.

``utils/common.py get_device_memory_capacity`` reads torch's own device (and ``rocminfo`` / ``nvidia-smi``), not
SGLang's platform override, so on a CPU it answers None. Its answer sets the chunked prefill size, the decode
CUDA graph's batch and, when ``--mem-fraction-static`` is unset, the fraction itself (``arg_groups/memory_hook.py
handle_gpu_memory_settings``); :func:`swa_kit.launch.sglang_oracle.ask_sglang` answers it with the named GPU's.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any


@contextlib.contextmanager
def named_gpu_memory(common: ModuleType, gpu_memory_bytes: int | None) -> Iterator[None]:
    """``get_device_memory_capacity`` (of SGLang's ``sglang.srt.utils.common``, passed as ``common``) answers
    ``gpu_memory_bytes`` in MiB, in every SGLang module that holds it by name: the hooks import it with ``from
    ... import``, and a hook imported while this runs takes the stand-in, so those are put back too."""
    original = common.get_device_memory_capacity

    def named_gpu(device: str | None = None) -> float | None:
        return None if gpu_memory_bytes is None else gpu_memory_bytes / (1 << 20)

    def swap(old: Any, new: Any) -> None:
        for name, module in list(sys.modules.items()):
            if name.startswith("sglang.") and getattr(module, "get_device_memory_capacity", None) is old:
                setattr(module, "get_device_memory_capacity", new)  # noqa: B010 - a module of SGLang's, patched

    swap(original, named_gpu)
    try:
        yield
    finally:
        swap(named_gpu, original)
