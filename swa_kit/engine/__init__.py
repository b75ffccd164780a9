"""SGLang's runtime, mirrored: pools, eviction, workers, the SWA-pool resolver, the router, and the one registry
of speculative algorithms (:mod:`~swa_kit.engine.spec_algorithms`)."""
