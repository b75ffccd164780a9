"""Where the kit's shipped data lives: the package data of ``swa_kit.data``, found through importlib.resources.

``data/`` stays at the top of the repository; ``swa_kit/data`` is a link to it, so a source checkout,
an editable install and an installed wheel (where setuptools copies the files in) all read the same
files under one package name.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DATA_PACKAGE = "swa_kit.data"


def data_path(*parts: str) -> Path:
    """The on-disk path of ``parts`` inside the shipped data, e.g. ``data_path("models")``.

    Callers glob, ``torch.load`` and name these paths in messages, so they need a real file, not
    a ``Traversable``: pip installs unpack wheels, and a zip import would have no such path.
    """
    root = files(DATA_PACKAGE)
    if not isinstance(root, Path):
        raise FileNotFoundError(f"{DATA_PACKAGE} is imported from {root!r}, not from a folder: install swa_kit with "
                                "pip (which unpacks it) instead of importing it from a zip archive")
    return root.joinpath(*parts).resolve()
