"""Where the kit's shipped files live: found through importlib.resources, so a checkout and an installed wheel agree.

``data/``, ``notebooks/`` and ``docs/`` stay at the top of the repository; ``swa_kit/data``, ``swa_kit/notebooks``
and ``swa_kit/docs`` link to them, so a source checkout, an editable install and an installed wheel (where
setuptools copies the files in) all read the same files under one package. Inside the package they keep the
repository's layout, so a notebook's ``../docs/glossary.md`` and ``../data/...`` resolve in both.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE = "swa_kit"
DATA_PACKAGE = "swa_kit.data"
#: The notebooks' folder under ``swa_kit/``: package data, not a package (no ``__init__.py``).
NOTEBOOKS = "notebooks"


def _on_disk(package: str) -> Path:
    """The folder ``package`` is imported from: callers glob, ``torch.load`` and name these paths in messages, so
    they need a real file, not a ``Traversable``. pip installs unpack wheels; a zip import would have no such path."""
    root = files(package)
    if not isinstance(root, Path):
        raise FileNotFoundError(f"{package} is imported from {root!r}, not from a folder: install swa_kit with "
                                "pip (which unpacks it) instead of importing it from a zip archive")
    return root


def data_path(*parts: str) -> Path:
    """The on-disk path of ``parts`` inside the shipped data, e.g. ``data_path("models")``."""
    return _on_disk(DATA_PACKAGE).joinpath(*parts).resolve()


def notebooks_path(*parts: str) -> Path:
    """The on-disk path of ``parts`` inside the shipped notebooks (``notebooks/`` of a checkout)."""
    return _on_disk(PACKAGE).joinpath(NOTEBOOKS, *parts).resolve()

