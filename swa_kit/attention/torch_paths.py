"""PyTorch attention paths: SDPA with an explicit mask, and FlexAttention with a sliding ``mask_mod``.

Both read exactly what a paged serving kernel reads: the layer's KV buffer through the
batch's slot ids. Like a sliding-window kernel, they gather only the key span some query
of the request can attend (``[first_key(first query), seq_len)``), so slots of keys
that left the window are never read and garbage there (even NaN) cannot leak. Inside
the span the mask is explicit: SDPA gets a boolean ``attn_mask``, FlexAttention a
``BlockMask`` built from a ``mask_mod`` that applies :meth:`Window.attends` (and the
request's tree mask in tree verify).

FlexAttention runs everywhere torch >= 2.5 does. On CPU it runs eagerly (torch's unfused
implementation: correct, not fast; ``torch.compile`` of it costs ~30 s per shape on CPU);
on a GPU it is compiled, which is FlexAttention proper. Each result says which.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import PathUnavailableError
from swa_kit.window import MAX_KEYS, Window, attends, to_keys


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return device.type


def _request_span(batch: AttentionBatch, b: int, window: Window) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For request ``b``: query positions, gathered key positions, and ``[q_len, span]`` allowed mask."""
    q_pos = batch.query_positions(b)
    start = window.first_key(int(q_pos[0]))  # queries ascend, so the first query's window starts earliest
    k_pos = torch.arange(start, int(batch.seq_lens[b]))
    allowed = window.attends(q_pos[:, None], k_pos[None, :])
    if batch.tree_masks is not None:
        allowed = allowed & batch.tree_masks[b].cpu()[:, start:]
    return q_pos, k_pos, allowed


def _gather(batch: AttentionBatch, b: int, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Request ``b``'s queries and the K/V rows of positions ``k_pos``, as ``[1, H, L, D]``."""
    slots = batch.request_slots(b).to(torch.int64)[k_pos.to(batch.device)]
    lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
    q = batch.q[lo:hi].transpose(0, 1).unsqueeze(0)
    k = batch.k_buffer[slots].transpose(0, 1).unsqueeze(0)
    v = batch.v_buffer[slots].transpose(0, 1).unsqueeze(0)
    return q, k, v


def _run_per_request(
    batch: AttentionBatch, keys: int | None, attend: Callable[..., torch.Tensor]
) -> torch.Tensor:
    """Run ``attend(q, k, v, span, batch)`` per request; ``span`` describes the gathered keys."""
    window = Window(keys)
    out = batch.q.new_empty(batch.q.shape[0], batch.q.shape[1], batch.v_buffer.shape[2])
    for b in range(batch.batch_size):
        q_pos, k_pos, allowed = _request_span(batch, b, window)
        q, k, v = _gather(batch, b, k_pos)
        tree = None if batch.tree_masks is None else batch.tree_masks[b][:, int(k_pos[0]):].to(batch.device)
        span = _Span(window, int(q_pos[0]), int(k_pos[0]), allowed.to(batch.device), tree)
        lo, hi = int(batch.qo_indptr[b]), int(batch.qo_indptr[b + 1])
        out[lo:hi] = attend(q, k, v, span, batch).squeeze(0).transpose(0, 1)
    return out


@dataclass(frozen=True)
class _Span:
    """One request's gathered keys: window, first query / first key positions, explicit mask, tree mask."""

    window: Window
    q_start: int
    k_start: int
    allowed: torch.Tensor
    tree: torch.Tensor | None


# -- SDPA -------------------------------------------------------------------------------------


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, span: _Span, batch: AttentionBatch) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=span.allowed[None, None], scale=batch.sm_scale, enable_gqa=q.shape[1] != k.shape[1]
    )


def sdpa_attention(batch: AttentionBatch, window_arg: Any = None) -> AttentionResult:
    """``torch.nn.functional.scaled_dot_product_attention`` per request over its gathered key span.

    ``window_arg`` is the window in keys (the ``hf`` convention; None = no window).
    """
    out = _run_per_request(batch, to_keys("hf", window_arg), _sdpa)
    return AttentionResult(out, path="torch_sdpa", tier="torch", device=_device_name(batch.device),
                           notes=["SDPA with an explicit boolean mask over the gathered key span"])


def sdpa_available() -> tuple[bool, str]:
    return True, f"torch {torch.__version__} SDPA (enable_gqa), any device"


# -- FlexAttention ----------------------------------------------------------------------------


def _flex_module() -> Any:
    try:
        from torch.nn.attention import flex_attention as flex
    except ImportError as error:
        raise PathUnavailableError(
            f"torch {torch.__version__} has no FlexAttention ({error}); install torch >= 2.5 or use torch_sdpa"
        ) from None
    return flex


_COMPILED: dict[str, Callable[..., torch.Tensor]] = {}
EAGER_ON_CPU = "eager (unfused) FlexAttention on CPU"
COMPILED = "torch.compile'd FlexAttention"
EAGER_PAST_LIMIT = ("eager (unfused) FlexAttention: torch.compile reached dynamo's recompile limit for it "
                    "(torch._dynamo.reset() lets it compile again)")
COMPILED_UNCHECKED = (f"torch.compile'd FlexAttention, unless dynamo's recompile limit was reached (torch "
                      f"{torch.__version__} cannot make it raise; past it torch runs eagerly, saying so only in "
                      "its log)")


def _compiles_on(device: torch.device) -> bool:
    return device.type != "cpu"


def _recompile_limit_switch(config: Any = None, exc: Any = None) -> tuple[str, type[Exception]] | None:
    """dynamo's setting that makes its recompile limit raise, and the exception it raises then, by whichever names
    this torch has: "cache limit" became "recompile limit" in the exception (pytorch/pytorch#141542) and the settings
    (#143709, the old name kept as an alias) in turn. None where it has neither (``config``, ``exc``: dynamo's)."""
    config = torch._dynamo.config if config is None else config
    exc = torch._dynamo.exc if exc is None else exc
    setting = next((name for name in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit")
                    if hasattr(config, name)), None)
    error = next((getattr(exc, name) for name in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")
                  if isinstance(getattr(exc, name, None), type)), None)
    return None if setting is None or error is None else (setting, error)


def _flex_on(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, compiled: bool, **kwargs: Any
             ) -> tuple[torch.Tensor, str]:
    """FlexAttention and how it ran: ``compiled`` (on a GPU), or eager (on CPU, where compiling costs ~30 s a shape).

    Each new shape (heads, head dim, queries, padded keys) compiles again; a new window does not. Past dynamo's
    recompile limit torch would run the function eagerly, with a warning in the log; the limit is made to raise here,
    so the result names that run."""
    flex = _flex_module()
    if not compiled:
        return flex.flex_attention(q, k, v, **kwargs), EAGER_ON_CPU
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(flex.flex_attention, dynamic=False)
    switch = _recompile_limit_switch()
    if switch is None:
        return _COMPILED["flex"](q, k, v, **kwargs), COMPILED_UNCHECKED
    setting, limit_hit = switch
    try:
        with torch._dynamo.config.patch(setting, True):
            return _COMPILED["flex"](q, k, v, **kwargs), COMPILED
    except limit_hit:
        return flex.flex_attention(q, k, v, **kwargs), EAGER_PAST_LIMIT


def _sliding_mask_mod(span: _Span, device: torch.device, padded_keys: int) -> Callable[..., torch.Tensor]:
    """``mask_mod(b, h, q_idx, kv_idx)`` over the span's gathered keys, padded to ``padded_keys``: the window rule on
    absolute positions (and the tree, if any). Padded keys lie after the last query, so causality masks them. The span's
    offsets and its window enter as tensors: as ints they would be constants of the compiled kernel, one compile per
    request and per window. No window is a limit no span reaches, so that it shares the compile too."""
    window_keys = span.window.keys if span.window.keys is not None else MAX_KEYS
    q_start, k_start, limit = (torch.tensor(value, device=device)
                               for value in (span.q_start, span.k_start, window_keys))

    def sliding(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return attends(q_idx + q_start, kv_idx + k_start, limit)

    if span.tree is None:
        return sliding
    tree = F.pad(span.tree, (0, padded_keys - span.tree.shape[1]))  # False over the padding

    def sliding_tree(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return sliding(b, h, q_idx, kv_idx) & tree[q_idx, kv_idx]

    return sliding_tree


#: A request's gathered keys are padded to a multiple of this (FlexAttention's default block), so that spans of
#: different lengths share a compile: each new length would compile again (``dynamic=False``) and, past dynamo's
#: recompile limit of 8, run eagerly. On an H200, 16 decode requests of 144-979 keys at a 1,024-key window (6 padded
#: lengths) all ran compiled, the first pass in 18.2 s; unpadded, 8 ran compiled and 8 eagerly, in 31.2 s
#: (benchmarks/flex_compiles.py).
FLEX_KEY_BUCKET = 128


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, span: _Span, batch: AttentionBatch,
          ran: set[str]) -> torch.Tensor:
    """One request's FlexAttention; adds to ``ran`` how it ran (see :func:`_flex_on`)."""
    flex = _flex_module()
    q_len, kv_len = span.allowed.shape
    padded_keys = -(-kv_len // FLEX_KEY_BUCKET) * FLEX_KEY_BUCKET
    k, v = (F.pad(t, (0, 0, 0, padded_keys - kv_len)) for t in (k, v))
    block_mask = flex.create_block_mask(_sliding_mask_mod(span, q.device, padded_keys), None, None, q_len,
                                        padded_keys, device=q.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager path warns on every call that it is unfused
        out, how = _flex_on(q, k, v, _compiles_on(q.device), block_mask=block_mask, scale=batch.sm_scale,
                            enable_gqa=q.shape[1] != k.shape[1])
    ran.add(how)
    return out


def flex_attention(batch: AttentionBatch, window_arg: Any = None) -> AttentionResult:
    """FlexAttention per request with a ``BlockMask`` of the sliding rule over its gathered key span.

    ``window_arg`` is FlexAttention's bound ``W`` in ``q - k < W`` (the ``flex`` convention; None = off).
    """
    keys = to_keys("flex", window_arg)
    if batch.q.shape[2] < 16 or batch.q.shape[2] & (batch.q.shape[2] - 1):
        raise PathUnavailableError(
            f"flex_attention: head_dim {batch.q.shape[2]} must be a power of two >= 16; use torch_sdpa"
        )
    ran: set[str] = set()
    out = _run_per_request(batch, keys, functools.partial(_flex, ran=ran))
    notes = [*sorted(ran), "mask_mod applies the window (and tree) mask over the gathered key span"]
    return AttentionResult(out, path="flex_attention", tier="torch", device=_device_name(batch.device), notes=notes)


def flex_available() -> tuple[bool, str]:
    try:
        _flex_module()
    except PathUnavailableError as error:
        return False, str(error)
    return True, f"torch {torch.__version__} FlexAttention (eager on CPU, compiled on GPU)"
