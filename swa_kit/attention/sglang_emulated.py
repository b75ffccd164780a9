"""SGLang's own Triton ``extend_attention_fwd``, which aiter's legacy target verify calls, emulated.

Declared like every other path (:mod:`swa_kit.attention.paths`) so that dispatch reads its capabilities
(no window) from the table: the guards refuse a sliding layer routed here. The kit implements the
documented semantics (causal plus the custom tree mask, no window); every result says "emulated".
"""

from __future__ import annotations

from typing import Any

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.attention.reference import reference_attention


def extend_attention_fwd(batch: AttentionBatch, window_arg: Any = None) -> AttentionResult:
    """SGLang's Triton ``extend_attention_fwd`` as aiter's verify calls it: custom mask, no window."""
    result = reference_attention(batch, None)
    return AttentionResult(result.out, path="sglang_extend_attention", tier="emulated", device=result.device,
                           notes=["emulation of SGLang's extend_attention_fwd semantics: causal + custom mask, "
                                  "no window (aiter's verify passes none)"])


def available() -> tuple[bool, str]:
    return True, "plain torch emulation, any device"
