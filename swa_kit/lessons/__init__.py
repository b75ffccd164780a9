"""What the notebooks teach with: the tiny model, serving, the speculative demo, workshop checks, tour.

Where new work goes:

* a lesson: a notebook ``notebooks/NN_topic.py`` (py:percent) and its synced ``.ipynb``, holding prose, calls
  and pictures only; the logic goes in the library, where tests reach it
* a new exercise: its reference solution and its ``check_*`` function in the notebook's module of
  ``swa_kit/lessons/workshop/``,
  checked against an independent computation in ``tests/test_workshop.py``; in the notebook, the check cell,
  and the cell that gives the answer away tagged ``solution`` (``swa_kit/lessons/exercises.py`` strips it from
  the exercise version); its entry in ``docs/workshop.md``
* the tiny model and its drafts: ``swa_kit/lessons/tiny_model.py``, trained by ``scripts/train_tiny_model.py``
"""

#: Tokens the speculative demo (:mod:`swa_kit.lessons.speculative`) generates per prompt: here, torch-free, so that
#: ``swa-kit spec-demo --help`` can show it without importing the demo.
DEMO_NEW_TOKENS = 96
