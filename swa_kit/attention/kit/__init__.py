"""The kit's own Triton kernel: ``teaching`` (the walk alone, read it first), ``kernel`` (the tuned kernels),
``policy`` (the launch policy), ``path`` (the host side and the registered path), ``interpreted`` (Triton's CPU
interpreter in a child process)."""
