"""Importing SGLang on any machine: the platform facts a CPU answers as, aiter hidden, and one clear error.

The oracles (:mod:`swa_kit.launch.sglang_oracle`, :mod:`swa_kit.launch.sglang_unified`) import SGLang only through
:func:`import_sglang`, under ``runtime_context.override_platform(**PLATFORM_FACTS[platform])``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from swa_kit.errors import SGLangUnavailableError
from swa_kit.sglang_versions import SGLANG_VERSION

INSTALL_HINT = (f"install SGLang's CPU-importable part: pip install --no-deps sglang=={SGLANG_VERSION}, then "
                "pip install -e '.[sglang]' and torch==2.14.1 torchvision==0.29.1 (see .ci/run)")

#: ``runtime_context.override_platform`` facts per platform the kit names (every fact SGLang's
#: backend choice reads is set, so the CPU running this never leaks into the answer). flashinfer is
#: taken as not installed, as the kit's own tables assume.
_OFF = {fact: False for fact in ("is_cuda", "is_hip", "is_npu", "is_xpu", "is_musa", "is_mps", "is_sm90", "is_sm100",
                                  "is_sm100_or_sm110", "is_sm110", "is_sm120", "is_blackwell",
                                  "is_hopper_with_cuda_12_3", "has_amx", "has_flashinfer")}
#: The CUDA entries also set the compute capability (``get_device_sm``), which per-architecture overrides read
#: (e.g. EXAONE-4's ``device_sm >= 80`` -> fa3 in ``arg_groups/model_overrides/exaone.py``).
PLATFORM_FACTS: dict[str, dict[str, Any]] = {
    "rocm-gfx942": {**_OFF, "is_hip": True},
    "rocm-gfx950": {**_OFF, "is_hip": True},
    "cuda-sm90": {**_OFF, "is_cuda": True, "is_sm90": True, "is_hopper_with_cuda_12_3": True, "device_sm": 90,
                  "device_capability": (9, 0)},
    "cuda-sm100": {**_OFF, "is_cuda": True, "is_sm100": True, "is_sm100_or_sm110": True, "is_blackwell": True,
                   "device_sm": 100, "device_capability": (10, 0)},
    "cpu": dict(_OFF),
}


class _HideAiter:
    """``import aiter`` needs ROCm and raises RuntimeError elsewhere: SGLang must see it as absent."""

    @staticmethod
    def find_spec(name: str, path: Any, target: Any = None) -> None:
        if name == "aiter" or name.startswith("aiter."):
            raise ImportError("aiter hidden while SGLang imports (it needs ROCm)")


@contextlib.contextmanager
def hidden_aiter() -> Iterator[None]:
    sys.meta_path.insert(0, _HideAiter)
    try:
        yield
    finally:
        sys.meta_path.remove(_HideAiter)


def sglang_version() -> str | None:
    """The installed SGLang's version, or None."""
    if importlib.util.find_spec("sglang") is None:
        return None
    return importlib.metadata.version("sglang")


def import_sglang(module: str) -> Any:
    """``importlib.import_module`` for an SGLang module, with aiter hidden; a clear error when it fails."""
    if sglang_version() is None:
        raise SGLangUnavailableError(f"SGLang is not installed, so {module} cannot be read: {INSTALL_HINT}")
    try:
        with hidden_aiter(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except Exception as error:  # an SGLang module that does not import here: say which and why
        raise SGLangUnavailableError(f"SGLang {sglang_version()} is installed but {module} does not import "
                                      f"({type(error).__name__}: {error}): {INSTALL_HINT}") from error


def read_from() -> str:
    return f"read from SGLang {sglang_version()}"
