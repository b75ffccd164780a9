"""SGLang's runtime, mirrored: pools, eviction, workers, resolver, router, speculative algorithms.

Where new work goes:

* a new SGLang attention backend: its kernel call sites and the window argument each passes in
  ``swa_kit/engine/call_sites.py`` (in ``DECLARED_SITES`` while no registered path runs its kernel), its name in
  ``BACKENDS`` and its route per layer and forward mode in ``swa_kit/engine/routing.py``, the environment
  variables it reads in ``swa_kit/engine/environment.py``; when SGLang picks it at start-up is
  ``swa_kit/launch/backend.py``. Tests: ``tests/test_dispatch.py``, and against SGLang's own source in
  ``tests/test_deploy_sglang.py``
* a KV pool or allocator: ``swa_kit/engine/pools/``, one module per SGLang file and SGLang's names, tested
  against SGLang's own classes in ``tests/test_pools_sglang.py``
* when SWA slots are freed: ``swa_kit/engine/eviction.py``
* how target and draft workers share pools: ``swa_kit/engine/workers.py``
* a speculative algorithm (SGLang's name and what it means for pools and drafts):
  ``swa_kit/engine/spec_algorithms.py``, the one registry every other list derives from
* which pool a worker translates slot ids against: ``swa_kit/engine/resolver.py``, and its decision table
"""
