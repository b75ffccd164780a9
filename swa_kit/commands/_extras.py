"""What a command needs beyond the base install, and the one line it stops with when that is missing.

``pip install swa_kit`` serves the CLI and the library; the notebooks, ``swa-kit tour``, ``swa-kit lab`` and the
pictures (``--png``) need the ``[notebooks]`` extra. A command asks before it starts work, so a missing package
stops it with the extra to install, never a traceback halfway through.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

from swa_kit.exit_codes import ExitCode

NOTEBOOKS = "notebooks"
#: The ``[notebooks]`` extra of pyproject.toml, by import name (each is its distribution's name too; a test
#: keeps the two lists equal): JupyterLab and the kernel, headless execution and HTML, the paired .py twins,
#: the widgets and the pictures, and psutil, which ``swa-kit lab`` stops JupyterLab's kernels with.
NOTEBOOK_MODULES = ("jupyterlab", "ipykernel", "ipywidgets", "nbclient", "nbconvert", "nbformat", "jupytext",
                    "matplotlib", "psutil")
PICTURE_MODULES = ("matplotlib",)


def missing(modules: Iterable[str]) -> list[str]:
    """The ``modules`` that cannot be imported here (found without importing them)."""
    return [name for name in modules if _find(name) is None]


def _find(name: str) -> object | None:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent that fails to import; a module without a spec
        return None


def require(command: str, modules: Iterable[str], extra: str = NOTEBOOKS) -> int | None:
    """None when every one of ``modules`` is importable; else print one line naming ``extra`` to stderr and
    return the exit status the command stops with."""
    absent = missing(modules)
    if not absent:
        return None
    print(f"swa-kit {command}: error: needs {', '.join(absent)}, not installed here: "
          f'pip install "swa_kit[{extra}]"', file=sys.stderr)
    return ExitCode.CANNOT_MEASURE
