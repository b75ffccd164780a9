"""ipywidgets explorers, one module per topic (``masks``, ``pools``, ...).

Each explorer's callback is a plain module function (inputs -> figure + text) with unit tests over
its range; the widget builder only wires controls to it and imports ipywidgets lazily. Observers hand each
value to a ``_coalesce.Coalescer``, so that a fast drag draws its newest value, not every value it passed.

Where new work goes:

* a widget: ``swa_kit/widgets/TOPIC.py``, its callback a plain function tested over its whole range
"""
