"""Copies of the kit's kernel module (an earlier build, or a candidate) loaded beside the current one, for A/Bs.

A variant is a file with kit_triton.py's API (``plan_decode``, ``launch_config``, ``_swa_attend_kernel``...). It is
loaded as a module of its own and not registered as an attention path, so the current kernel stays the kit's.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType


REGISTRATION = "\nregister(\n"  # kit_triton.py registers its path with this call, at the top level


def load_variant(path: Path) -> ModuleType:
    """The kernel copy at ``path`` as a module named ``kit_variant_<stem>``; a path that is no file is refused, and so
    is a copy whose path registration is not kit_triton.py's one top-level ``register(`` call: loaded as it stands, it
    would replace the kit's registered path, and the kit's results would come from the copy under the kit's name."""
    if not path.is_file():
        raise FileNotFoundError(f"kernel variant {str(path)!r} is not a file; give a copy of "
                                "swa_kit/attention/kit/kernel.py")
    text = path.read_text()
    if text.count(REGISTRATION) != 1 or text.count("register(") != 1:
        raise ValueError(f"kernel variant {str(path)!r}: expected kit_triton.py's one top-level 'register(' call "
                         "(a line of its own) so that the copy is loaded unregistered; keep that call as it is")
    text = text.replace(REGISTRATION, "\n_not_registered = (\n")
    # Triton reads a kernel's source back from its file, so the edited text needs a file of its own.
    copy = Path(tempfile.mkdtemp()) / f"{path.stem}.py"
    copy.write_text(text)
    spec = importlib.util.spec_from_file_location(f"kit_variant_{path.stem}", copy)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
