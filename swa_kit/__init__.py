"""swa_kit: sliding-window attention in LLM serving, taught and debugged for real.

The one window unit inside the kit is ``keys``: how many keys a query attends,
counting itself (``None`` = no window). See :mod:`swa_kit.window`.

The modules at the top of the package are the rules every layer below shares; they import nothing else of
the kit's but each other.

Where new work goes:

* a window convention, or reading a window value as an API writes it: ``swa_kit/window.py``, a converter
  tested both ways in ``tests/test_window.py``; nowhere else writes ``- 1`` / ``+ 1`` window arithmetic
* which keys a query attends in a forward mode: ``swa_kit/masks.py``, against a brute-force mask in
  ``tests/test_masks.py``
* an error the kit raises on purpose: ``swa_kit/errors.py``, a subclass of the builtin a caller would catch,
  its message naming the value and the way out
* an exit status, a tier name, a text table: ``swa_kit/exit_codes.py``, ``swa_kit/tiers.py``,
  ``swa_kit/tables.py`` (one place each)
* a bound on work that grows with its input: an estimate from the shapes, checked by ``swa_kit/budget.py``
  before anything is allocated
"""

from swa_kit.window import CONVENTIONS, Window, convert, from_keys, to_keys

__all__ = ["CONVENTIONS", "Window", "convert", "from_keys", "to_keys"]
__version__ = "0.1.0"
