"""Tools that measure: the probe, the key gap, the trace, the audit, the benchmark, the doctor."""
