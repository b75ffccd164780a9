"""KV-cache bytes per token, and the PER-REQUEST MINIMUM a hybrid full + SWA pool could reach.

One layer stores, per token, ``num_kv_heads * (head_dim + v_head_dim)`` elements
(K and V) of ``dtype`` bytes. A one-pool layout (SGLang's ``MHATokenToKVPool``) keeps
every layer for every token of the context. A hybrid layout (``SWAKVPool``) keeps the
full layers for the whole context and the sliding / chunked layers only for the
tokens a query can still attend.

The assumption behind the savings, stated once: the SWA pool holds exactly the
window per request, ``min(context, keys)`` tokens (for chunked layers the chunk
size), plus ``swa_slack_tokens`` if given. That is the floor a perfect eviction
reaches. SGLang in practice evicts periodically with up to a page of slack, keeps
the tokens of a protected radix prefix, and above all sizes the SWA pool at start-up as
full-pool tokens x ``swa_full_tokens_ratio`` (0.8 by default): what SGLang really
saves is :mod:`swa_kit.launch.pool_sizing` (about 18% for Gemma-4 31B, 10% for
GPT-OSS), and every table that shows these figures labels them as the minimum.
Per-token figures ignore page rounding and the reserved dummy slots.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.models.configs import LayerKind, ModelLayout
from swa_kit.errors import ModelConfigError

CONTEXTS = (8 * 1024, 32 * 1024, 128 * 1024)
GIB = 1 << 30


def layer_bytes_per_token(kind: LayerKind, dtype_bytes: int) -> int:
    """K plus V bytes one token costs in one layer of ``kind``."""
    return kind.num_kv_heads * (kind.head_dim + kind.v_head_dim) * dtype_bytes


def _sum_bytes(spec: ModelLayout, layer_ids: list[int]) -> int:
    return sum(layer_bytes_per_token(spec.layer_kind(i), spec.dtype_bytes) for i in layer_ids)


def full_pool_bytes_per_token(spec: ModelLayout) -> int:
    """Bytes one slot of a hybrid pool's full sub-pool costs (all full-attention layers)."""
    return _sum_bytes(spec, spec.full_attention_layer_ids)


def swa_pool_bytes_per_token(spec: ModelLayout) -> int:
    """Bytes one slot of a hybrid pool's SWA sub-pool costs (all sliding and chunked layers)."""
    return _sum_bytes(spec, spec.swa_attention_layer_ids)


def one_pool_bytes_per_token(spec: ModelLayout) -> int:
    """Bytes one slot costs when every layer lives in one full-size pool."""
    return _sum_bytes(spec, list(range(spec.num_layers)))


def request_bytes(spec: ModelLayout, context: int, hybrid: bool, swa_slack_tokens: int = 0) -> int:
    """KV bytes one request of ``context`` tokens holds, with or without a hybrid pool."""
    if not isinstance(context, int) or isinstance(context, bool) or context < 1:
        raise ModelConfigError(f"context must be a positive number of tokens, got {context!r}")
    if not isinstance(swa_slack_tokens, int) or swa_slack_tokens < 0:
        raise ModelConfigError(f"swa_slack_tokens must be a non-negative int, got {swa_slack_tokens!r}")
    total = 0
    for layer_id in range(spec.num_layers):
        kind = spec.layer_kind(layer_id)
        tokens = context
        if hybrid and kind.uses_swa_pool and kind.retained_tokens is not None:  # None: it keeps the whole context
            tokens = min(context, kind.retained_tokens + swa_slack_tokens)
        total += tokens * layer_bytes_per_token(kind, spec.dtype_bytes)
    return total


@dataclass(frozen=True)
class Savings:
    """One model at one context length: the per-request minimum (SWA layers hold only the window)."""

    model: str
    context: int
    one_pool_bytes: int
    hybrid_bytes: int
    sglang_uses_hybrid: bool

    @property
    def saved_bytes(self) -> int:
        return self.one_pool_bytes - self.hybrid_bytes

    @property
    def saved_gib(self) -> float:
        return self.saved_bytes / GIB

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.one_pool_bytes

    @property
    def sglang_bytes(self) -> int:
        """What SGLang 0.5.23 actually holds: hybrid only where it builds an SWAKVPool."""
        return self.hybrid_bytes if self.sglang_uses_hybrid else self.one_pool_bytes

    def as_row(self) -> dict:
        return {
            "model": self.model, "context": self.context,
            "one_pool_gib": round(self.one_pool_bytes / GIB, 3), "hybrid_gib": round(self.hybrid_bytes / GIB, 3),
            "saved_pct": round(100 * self.saved_fraction, 1), "sglang_hybrid_pool": self.sglang_uses_hybrid,
        }


def savings(spec: ModelLayout, contexts: tuple[int, ...] = CONTEXTS, swa_slack_tokens: int = 0) -> list[Savings]:
    """Per-request KV bytes with one pool vs a hybrid pool at each context length."""
    return [
        Savings(spec.name, c, request_bytes(spec, c, hybrid=False),
                request_bytes(spec, c, hybrid=True, swa_slack_tokens=swa_slack_tokens), spec.sglang_hybrid_swa_pool)
        for c in contexts
    ]


def per_token_summary(spec: ModelLayout) -> dict:
    """Bytes per token of each pool, for tables."""
    return {
        "model": spec.name, "layers": spec.num_layers, "swa_layers": len(spec.swa_attention_layer_ids),
        "full_layers": len(spec.full_attention_layer_ids), "dtype": spec.dtype,
        "one_pool_bytes_per_token": one_pool_bytes_per_token(spec),
        "full_pool_bytes_per_token": full_pool_bytes_per_token(spec),
        "swa_pool_bytes_per_token": swa_pool_bytes_per_token(spec),
        "sglang_hybrid_pool": spec.sglang_hybrid_swa_pool,
    }
