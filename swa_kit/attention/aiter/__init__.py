"""aiter's attention ops: native on ROCm, its Triton kernels anywhere, emulations of the rest."""
