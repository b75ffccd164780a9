"""What the benchmark times: decode / verify / prefill cases, their byte and FLOP counts, and the grids.

Pure host-side arithmetic (no GPU): the recorded-run readers on CPU use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


K = 1024

#: The headline configuration of the first targets (issue #6, section 3).
HEADLINE: dict[str, Any] = {"batch": 32, "hq": 32, "hkv": 8, "head_dim": 128, "window": 4096, "dtype": "bfloat16"}

#: Head shapes of the grid: (Hq, Hkv, head_dim, attention sinks). GPT-OSS carries one sink logit per query head.
HEAD_SHAPES = {
    "llama-like 32/8/128": (32, 8, 128, False),
    "gemma sliding 32/16/256": (32, 16, 256, False),
    "gpt-oss 64/8/64 + sinks": (64, 8, 64, True),
}


@dataclass(frozen=True)
class DecodeCase:
    """One decode shape; ``drafts`` > 0 makes it a chain verify of 2..``drafts`` queries per request (ragged), or of
    ``drafts`` queries in every request with ``ragged=False`` (as SGLang's target verify runs: each request brings
    ``speculative_num_draft_tokens``)."""

    batch: int
    hq: int
    hkv: int
    head_dim: int
    context: int
    window: int
    dtype: str = "bfloat16"
    sinks: bool = False
    drafts: int = 0
    ragged: bool = True

    def __post_init__(self) -> None:
        if self.drafts == 1 or self.drafts < 0:
            raise ValueError(f"drafts={self.drafts}: give 0 (decode) or 2 and more (a verify's longest chain)")

    @property
    def itemsize(self) -> int:
        return torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()

    def kv_bytes(self, keys: int | None) -> int:
        """K and V bytes of ``keys`` positions (None: the whole context) for every request and KV head."""
        n = self.context if keys is None else min(keys, self.context)
        return 2 * self.batch * self.hkv * n * self.head_dim * self.itemsize

    @property
    def window_bytes(self) -> int:
        return self.kv_bytes(self.window)

    def q_lens(self) -> list[int]:
        """Queries per request: 1 in decode; in verify 2..drafts, cycling, so every batch is ragged (or ``drafts``
        in every request, not ragged)."""
        if not self.drafts:
            return [1] * self.batch
        if not self.ragged:
            return [self.drafts] * self.batch
        return [2 + b % (self.drafts - 1) for b in range(self.batch)]

    def keys_attended(self, q_len: int) -> int:
        """Keys some query of a request with ``q_len`` queries attends: the window, plus the drafts before its last
        query (the whole context, if shorter)."""
        return min(self.context, self.window + q_len - 1)

    @property
    def least_bytes(self) -> int:
        """Bytes any kernel must move (the page table's few aside): K and V of every key some query of each request
        attends, read once per KV head, its queries read and its outputs written."""
        keys = sum(self.keys_attended(q_len) for q_len in self.q_lens())
        rows = sum(self.q_lens()) * self.hq
        return 2 * (keys * self.hkv + rows) * self.head_dim * self.itemsize

    def decode_twin(self) -> DecodeCase:
        """The decode case over the same KV (what a verify is compared with)."""
        return DecodeCase(self.batch, self.hq, self.hkv, self.head_dim, self.context, self.window, self.dtype,
                          self.sinks)


@dataclass(frozen=True)
class PrefillCase:
    tokens: int
    hq: int
    hkv: int
    head_dim: int
    window: int
    dtype: str = "bfloat16"

    def flops(self, keys: int | None) -> int:
        """Matmul FLOPs (QK and PV, 2 each per multiply-add) over the attended (query, key) pairs."""
        t = self.tokens
        if keys is None or keys >= t:
            pairs = t * (t + 1) // 2
        else:  # the first `keys` queries see 1..keys keys, the rest see `keys` each
            pairs = keys * (keys + 1) // 2 + (t - keys) * keys
        return 4 * self.hq * self.head_dim * pairs


DRAFTS = 8  # verify: 2..8 queries per request (speculative decoding's draft chains)


def decode_grid(quick: bool) -> list[DecodeCase]:
    """The decode cases: quick = the headline shape at two contexts and two windows; else issue #14's grid (+ B 1)."""
    if quick:
        return [DecodeCase(32, 32, 8, 128, ctx, w) for ctx in (8 * K, 128 * K) for w in (1024, 4096)]
    return [
        DecodeCase(b, hq, hkv, d, ctx, w, sinks=sinks)
        for hq, hkv, d, sinks in HEAD_SHAPES.values()
        for b in (1, 8, 32, 128)
        for ctx in (8 * K, 128 * K)
        for w in (128, 1024, 4096)
    ]


def verify_twin(case: DecodeCase, ragged: bool = True) -> DecodeCase:
    """The chain-verify case of a decode case: the same KV, 2..DRAFTS queries per request (DRAFTS in each, not
    ``ragged``)."""
    return DecodeCase(case.batch, case.hq, case.hkv, case.head_dim, case.context, case.window, case.dtype,
                      case.sinks, DRAFTS, ragged)


def prefill_grid(quick: bool) -> list[PrefillCase]:
    if quick:
        return [PrefillCase(8 * K, 32, 8, 128, 1024)]
    return [PrefillCase(t, 32, 8, 128, w) for t in (8 * K, 32 * K) for w in (1024, 4096)]


def is_headline_family(case: DecodeCase) -> bool:
    """The headline's batch and heads: where the extra pictures' paths (no window, dense mask) are timed."""
    return (case.batch, case.hq, case.hkv, case.head_dim) == (
        HEADLINE["batch"], HEADLINE["hq"], HEADLINE["hkv"], HEADLINE["head_dim"])


