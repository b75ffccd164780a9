"""Attention paths: the exact reference, aiter (native / Triton / emulated), torch, the kit's kernel.

Every path declares what it can do (modes, window convention, KV layout, devices, tier) in the registry of
``swa_kit/attention/paths.py``; routing, the probe and the benchmarks read only those declarations.

Where new work goes:

* a kernel the kit can run (an attention path): a module that registers its declaration at import, listed
  in ``_PATH_MODULES`` of ``swa_kit/attention/paths.py``: aiter's ops under ``swa_kit/attention/aiter/``,
  the kit's own kernel under ``swa_kit/attention/kit/``, anything else beside ``swa_kit/attention/torch_paths.py``.
  ``tests/test_paths_vs_reference.py`` then checks it against the float64 reference within what it declares
* what a kernel reads (a new field of a batch): ``swa_kit/attention/batch.py``, the one contract every path
  reads
"""
