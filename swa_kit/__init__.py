"""swa_kit: sliding-window attention in LLM serving, taught and debugged for real.

The one window unit inside the kit is ``keys``: how many keys a query attends,
counting itself (``None`` = no window). See :mod:`swa_kit.window`.
"""

from swa_kit.window import CONVENTIONS, Window, convert, from_keys, to_keys

__all__ = ["CONVENTIONS", "Window", "convert", "from_keys", "to_keys"]
__version__ = "0.1.0"
