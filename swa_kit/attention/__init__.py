"""Attention paths: the exact reference, aiter (native / Triton / emulated), torch, the kit's kernel."""
