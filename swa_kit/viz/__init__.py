"""Matplotlib pictures, one module per topic (``masks``, ``pools``, ...); each function returns a ``Figure``.

Figures are built with :class:`matplotlib.figure.Figure`, not pyplot, so they render headless (Agg)
and leave no global state behind; Jupyter displays a returned figure once.
"""
