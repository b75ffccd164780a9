"""Attention sinks (GPT-OSS): one learned logit per query head that joins every softmax with a zero value row.

With sink logit ``s_h`` for query head ``h``, a query's output is the windowed attention
output times ``Z / (Z + exp(s_h))``, where ``Z`` is the sum of ``exp(score)`` over the keys it
attends: the sink takes a share of the probability mass and returns nothing. Scores and
sinks are on the same scale (logits after ``sm_scale``), as aiter's ``unified_attention``
takes them (``sinks``: ``[num_query_heads]``; its kernel starts the running max at the sink).
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.attention.batch import AttentionBatch
from swa_kit.attention.reference import attended_mask, reference_attention
from swa_kit.errors import UsageError
from swa_kit.window import Window


def log_normalizers(batch: AttentionBatch, keys: Any = None) -> torch.Tensor:
    """``[total_q, Hq]`` float64 ``log Z``: the log-sum-exp of each query's attended scores."""
    window = Window(keys)
    group = batch.q.shape[1] // batch.k_buffer.shape[1]
    out = torch.empty(batch.q.shape[:2], dtype=torch.float64, device=batch.device)
    for b in range(batch.batch_size):
        allowed = attended_mask(batch, b, window).to(batch.device)
        needed = allowed.any(dim=0).nonzero().flatten()
        k = batch.k_buffer[batch.request_slots(b).to(torch.int64)[needed]].double().repeat_interleave(group, dim=1)
        lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
        scores = torch.einsum("qhd,khd->qhk", batch.q[lo:hi].double(), k) * batch.sm_scale
        out[lo:hi] = scores.masked_fill(~allowed[:, needed][:, None], float("-inf")).logsumexp(-1)
    return out


def reference_with_sinks(batch: AttentionBatch, keys: Any, sinks: torch.Tensor) -> torch.Tensor:
    """float64 ``[total_q, Hq, D]``: the reference attention with per-head sink logits ``sinks`` ``[Hq]``."""
    if tuple(sinks.shape) != (batch.q.shape[1],):
        raise UsageError(f"sinks of shape {tuple(sinks.shape)}: one logit per query head ({batch.q.shape[1]},)")
    log_z = log_normalizers(batch, keys)
    share = torch.sigmoid(log_z - sinks.to(device=batch.device, dtype=torch.float64)[None, :])  # Z / (Z + e^s)
    return reference_attention(batch, keys).out * share[..., None]
