"""For the vLLM-facing tests: import vLLM's modules, or fail (where vLLM is required) / skip saying why.

A test against vLLM that silently skips compares nothing. CI runs these tests in a venv that holds vLLM 0.34.0
(.ci/run) with ``SWA_KIT_REQUIRE_VLLM=1``: there a module that does not import is a failure, never a skip.
Elsewhere (the README's test command, CI's main venv, which deselects them) they skip with the reason.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

REQUIRE_VLLM = "SWA_KIT_REQUIRE_VLLM"
VLLM_VERSION = "0.34.0"


def _use_cpu_platform() -> None:
    """vLLM picks its platform by probing the machine; on a CPU without its CPU build the probe finds none and
    EngineArgs' DeviceConfig refuses to start. The CPU platform class reads no device at import."""
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()


def require_vllm(*modules: str) -> list[Any]:
    """The imported modules of vLLM 0.34.0; fails under ``SWA_KIT_REQUIRE_VLLM=1`` when one does not import (or
    another vLLM version is installed), else skips."""
    try:
        import vllm

        if vllm.__version__ != VLLM_VERSION:
            raise ImportError(f"vLLM {vllm.__version__} is installed; the kit models {VLLM_VERSION}")
        _use_cpu_platform()
        return [importlib.import_module(name) for name in modules]
    except Exception as error:  # noqa: BLE001 -- any failure to import vLLM means the tests compare nothing
        reason = f"vLLM {VLLM_VERSION} cannot be read here ({type(error).__name__}: {error})"
        if os.environ.get(REQUIRE_VLLM) == "1":
            pytest.fail(f"{REQUIRE_VLLM}=1 but {reason}, so this module would compare nothing", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def import_rocm_platform(arch: str = "gfx942:sramecc+") -> ModuleType:
    """``vllm/platforms/rocm.py`` itself, imported as on an MI300X. It reads the GPU's architecture once, at import
    (``_get_gcn_arch``: amdsmi, which is not installed here, then ``torch.cuda.get_device_properties``); only that
    second query is answered, with ``arch``. Everything else (``on_gfx942``, ``get_cdna_version``,
    ``_get_backend_priorities``) is vLLM's own code."""
    import torch

    sys.modules.pop("vllm.platforms.rocm", None)
    gpu = pytest.MonkeyPatch()
    gpu.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(gcnArchName=arch))
    try:
        return importlib.import_module("vllm.platforms.rocm")
    finally:
        gpu.undo()
