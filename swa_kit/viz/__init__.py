"""Matplotlib pictures, one module per topic (``masks``, ``pools``, ...); each function returns a ``Figure``.

Figures are built with :class:`matplotlib.figure.Figure`, not pyplot, so they render headless (Agg)
and leave no global state behind; Jupyter displays a returned figure once.

Where new work goes:

* a figure: a function in ``swa_kit/viz/TOPIC.py`` that draws what the library computed; nothing outside
  ``swa_kit/viz/`` and ``swa_kit/widgets/`` imports matplotlib. The README's pictures are redrawn by
  ``python scripts/readme_figures.py``
"""
