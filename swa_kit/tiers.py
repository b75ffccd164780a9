"""How every result names the way it was computed: the tier vocabulary, in one place.

Each attention path declares one (:mod:`swa_kit.attention.paths`), every result carries
one, and ``swa-kit doctor`` says which of them this machine can run
(:mod:`swa_kit.machine`). Plain Python, so the doctor can report even where torch does
not import. An emulation is never presented as the real thing.
"""

from __future__ import annotations

TIER_NATIVE = "aiter-native"
TIER_TRITON_GPU = "aiter-triton-gpu"
TIER_TRITON_INTERPRETER = "aiter-triton-interpreter"
TIER_EMULATED = "emulated"
TIER_TORCH = "torch"
TIER_KIT_TRITON = "kit-triton"
TIER_REFERENCE = "reference"

TIERS: dict[str, str] = {
    TIER_NATIVE: "aiter's own CK/HIP/asm or Triton op, called as SGLang calls it, on a ROCm GPU",
    TIER_TRITON_GPU: "aiter's own Triton kernel, loaded without ROCm, compiled for this GPU",
    TIER_TRITON_INTERPRETER: "aiter's own Triton kernel run by Triton's CPU interpreter",
    TIER_EMULATED: "the kit's implementation of an aiter op's documented semantics (not aiter's code)",
    TIER_TORCH: "a PyTorch operator (SDPA or FlexAttention)",
    TIER_KIT_TRITON: "the kit's own Triton kernel",
    TIER_REFERENCE: "exact float64 reference in plain torch (the oracle)",
}
