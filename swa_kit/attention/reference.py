"""The oracle: exact paged attention in float64, plain torch, one request at a time.

It reads exactly what a serving kernel reads (the layer's KV buffer through the
slot ids of :class:`~swa_kit.attention.batch.AttentionBatch`) and applies the window
rule of :class:`~swa_kit.window.Window`. Only the keys some query attends are ever
gathered, so freed slots holding garbage (even NaN) cannot leak into the result,
which is what a correct kernel must also guarantee.
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.window import Window


def attended_mask(batch: AttentionBatch, b: int, window: Window) -> torch.Tensor:
    """``[q_len, seq_len]`` bool: which keys each query of request ``b`` attends."""
    q_pos = batch.query_positions(b)[:, None]
    k_pos = torch.arange(int(batch.seq_lens[b]))[None, :]
    allowed = window.attends(q_pos, k_pos)
    if batch.tree_masks is not None:
        allowed = allowed & batch.tree_masks[b].cpu()
    return allowed


def reference_attention(batch: AttentionBatch, keys: Any = None) -> AttentionResult:
    """Attention of every query over the keys its window allows, in float64.

    ``keys`` is the window in the kit's unit (keys attended, counting the query; None =
    no window). Returns ``[total_q, Hq, Dv]`` float64 on the batch's device.
    """
    window = Window(keys)
    hq, hkv = batch.q.shape[1], batch.k_buffer.shape[1]
    group = hq // hkv
    out = torch.empty(batch.q.shape[0], hq, batch.v_buffer.shape[2], dtype=torch.float64, device=batch.device)
    for b in range(batch.batch_size):
        allowed = attended_mask(batch, b, window).to(batch.device)
        needed = allowed.any(dim=0).nonzero().flatten()  # never touch keys no query attends
        slots = batch.request_slots(b).to(torch.int64)[needed]
        k = batch.k_buffer[slots].double().repeat_interleave(group, dim=1)  # [n, Hq, D]
        v = batch.v_buffer[slots].double().repeat_interleave(group, dim=1)
        lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
        q = batch.q[lo:hi].double()  # [q_len, Hq, D]
        scores = torch.einsum("qhd,khd->hqk", q, k) * batch.sm_scale
        scores = scores.masked_fill(~allowed[:, needed][None], float("-inf"))
        out[lo:hi] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)
    return AttentionResult(out, path="reference", tier="reference", device=str(batch.device))


def available() -> tuple[bool, str]:
    return True, "plain torch, any device"
