"""ipywidgets explorers, one module per topic (``masks``, ``pools``, ...).

Each explorer's callback is a plain module function (inputs -> figure + text) with unit tests over
its range; the widget builder only wires controls to it and imports ipywidgets lazily.

Where new work goes:

* a widget: ``swa_kit/widgets/TOPIC.py``, its callback a plain function tested over its whole range
"""
