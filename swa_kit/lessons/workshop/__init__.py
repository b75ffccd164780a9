"""Reference solutions to the exercises of ``docs/workshop.md`` and the checks the notebooks call on a learner's
answer: one module per notebook, each imported by its notebook (``from swa_kit.lessons.workshop import story``).

* :mod:`~swa_kit.lessons.workshop.story`: 00, what a hybrid pool saves; the triage rule
* :mod:`~swa_kit.lessons.workshop.windows`: 01, window conventions, unconverted values, tree masks
* :mod:`~swa_kit.lessons.workshop.pools`: 02, full and SWA pool slots and savings
* :mod:`~swa_kit.lessons.workshop.drafts`: 03, which resolver breaks which draft; triage backwards
* :mod:`~swa_kit.lessons.workshop.dispatch`: 04, the guard and its way out; the call sites one key short
* :mod:`~swa_kit.lessons.workshop.kernels`: 05, what a decode step reads; the headline case's floor
* :mod:`~swa_kit.lessons.workshop.debugging`: 06, a launch's decode window; where one key short shows
* :mod:`~swa_kit.lessons.workshop.engines`: 07, each engine's window argument; a token of context on each
* :mod:`~swa_kit.lessons.workshop.verdict`: the :class:`~swa_kit.lessons.workshop.verdict.Verdict` every check returns

Each solution is a few calls over the kit's own API, the way a participant would write it in a notebook cell;
``tests/test_workshop.py`` checks every answer against an independent computation (hand arithmetic from the model
configs, the window conventions written out by hand, real reads from the pools).
"""
