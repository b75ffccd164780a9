"""SGLang's runtime, mirrored: pools, eviction, workers, the SWA-pool resolver and the router."""
