"""Copies of the kit's kernel module (an earlier build, or a candidate) loaded beside the current one, for A/Bs.

A variant is a file with the kit kernel's API (``plan_decode``, ``launch_config``, ``_swa_attend_kernel``...). It is
loaded as a module of its own; the table of attention paths (swa_kit/attention/paths.py) names the kit's module, so
the current kernel stays the kit's path whatever copies are loaded.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_variant(path: Path) -> ModuleType:
    """The kernel copy at ``path`` as a module named ``kit_variant_<stem>``; a path that is no file is refused."""
    if not path.is_file():
        raise FileNotFoundError(f"kernel variant {str(path)!r} is not a file; give a copy of "
                                "swa_kit/attention/kit/kernel.py")
    # Triton reads a kernel's source back from its file, so the copy is loaded from where it lies.
    spec = importlib.util.spec_from_file_location(f"kit_variant_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
