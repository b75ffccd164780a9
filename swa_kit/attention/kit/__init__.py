"""The kit's own Triton kernel: the kernel, its launch policy, a teaching kernel, the interpreter child."""
