"""The kit's own Triton kernel: ``kernel`` (the tuned kernels), ``policy`` (the launch policy), ``path`` (the host
side and the registered path), ``interpreted`` (Triton's CPU interpreter in a child process)."""
