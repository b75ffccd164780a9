"""Attention paths: the exact reference, aiter (native / Triton / emulated), torch, the kit's kernel.

Every path declares what it can do (modes, window convention, KV layout, devices, tier) in the static table of
``swa_kit/attention/paths.py``; routing, the probe and the benchmarks read only those declarations, and a path's
module is imported only when the path is asked whether it runs here, or runs.

Where new work goes:

* a kernel the kit can run (an attention path): one ``AttentionPath`` row in ``swa_kit/attention/paths.py``
  naming its module's ``available`` and ``run`` functions: aiter's ops under ``swa_kit/attention/aiter/``,
  the kit's own kernel under ``swa_kit/attention/kit/``, anything else beside ``swa_kit/attention/torch_paths.py``.
  ``tests/test_paths_vs_reference.py`` then checks it against the float64 reference within what it declares
* what a kernel reads (a new field of a batch): ``swa_kit/attention/batch.py``, the one contract every path
  reads
"""
