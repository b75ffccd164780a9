"""The timed paths of one case, over one set of inputs, and the float64 reference they are checked against.

Decode KV is laid out as SGLang's SWA pool holds it: each request owns randomly permuted
pages for the keys some query can still attend (the window, plus the drafts of a verify),
and every table entry before them points at page 0, the dummy, which holds NaN. So the
kit's and aiter's kernels walk a context of ``L`` keys through real page tables, and a path
that reads one key outside the window returns NaN. Page size 1 uses its own token-level
permutation of the same pool (``kv_indices``), page size 16 a block table.

The torch paths read *contiguous* copies of the same keys: ``sdpa_window`` the window
alone (``[B, Hkv, W, D]``, the ideal layout), ``flex_attention`` / ``sdpa_dense_mask`` /
``sdpa_full`` the whole context (the window's keys at its end, random keys before them),
built only where they are timed (contexts up to :data:`FULL_CONTEXT_LIMIT`). Queries of
the torch paths are ``[B, Hkv, G, D]``: one GQA group per KV head, no repeated K/V.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from swa_kit.measure.bench.cases import DRAFTS, DecodeCase, PrefillCase
from swa_kit.errors import PathUnavailableError
from swa_kit.window import Window, attends, from_keys

PAGE = 16
#: Contiguous whole-context copies (Flex, dense-mask and full SDPA) are built up to this context.
FULL_CONTEXT_LIMIT = 8 * 1024

_FLEX: dict[str, Any] = {}


def flex_functions(fresh: bool = False) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """FlexAttention compiled, and create_block_mask. It recompiles per shape; past dynamo's recompile
    limit (8) it would silently run eager (unfused, ~100x slower), so ``fresh`` resets dynamo first."""
    if fresh:
        torch._dynamo.reset()
        _FLEX.clear()
    if not _FLEX:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        _FLEX["mask"] = create_block_mask
    return _FLEX["fn"], _FLEX["mask"]


Made = tuple[Callable[[], Any], "torch.Tensor | None", dict[str, Any]]  # callable, its output buffer, launch facts


class DecodeInputs:
    """One decode case's KV on the GPU (sized for a verify of up to DRAFTS queries too), its queries,
    every path's callable, and the float64 reference."""

    def __init__(self, case: DecodeCase, device: torch.device, gen: torch.Generator,
                 pages_in_order: bool = False) -> None:
        """``pages_in_order``: each request's pages (and page-size-1 slots) follow each other in the pool,
        as a fresh pool hands them out, instead of a random permutation (the kernel notes' layout A/B)."""
        self.case, self.device, self.gen = case, device, gen
        dtype = getattr(torch, case.dtype)
        b, hkv, d, ctx = case.batch, case.hkv, case.head_dim, case.context
        self.sm_scale = d**-0.5
        self.span = case.keys_attended(DRAFTS)  # the pages a verify twin of this case may read too
        first_page = (ctx - self.span) // PAGE
        own_pages = -(-ctx // PAGE) - first_page
        self.pool_pages = 1 + b * own_pages
        shape = (self.pool_pages * PAGE, hkv, d)
        self.k = torch.randn(shape, device=device, dtype=dtype, generator=gen)
        self.v = torch.randn(shape, device=device, dtype=dtype, generator=gen)
        self.k[:PAGE] = float("nan")  # the dummy page: what every out-of-window table entry points at
        self.v[:PAGE] = float("nan")
        order = torch.arange if pages_in_order else partial(torch.randperm, generator=gen)
        pages = (order(self.pool_pages - 1, device=device) + 1).to(torch.int32)
        self.block_table = torch.zeros(b, -(-ctx // PAGE), dtype=torch.int32, device=device)
        self.block_table[:, first_page:] = pages.view(b, own_pages)
        slots = (order((self.pool_pages - 1) * PAGE, device=device) + PAGE).to(torch.int32)
        token_table = torch.zeros(b, ctx, dtype=torch.int32, device=device)
        token_table[:, first_page * PAGE:] = slots.view(b, own_pages * PAGE)[:, : ctx - first_page * PAGE]
        steps = torch.arange(b, device=device, dtype=torch.int32)
        self.tables = {1: (token_table.flatten(), steps * ctx),
                       PAGE: (self.block_table.flatten(), steps * (ctx // PAGE))}
        self.seq_lens = torch.full((b,), ctx, device=device, dtype=torch.int32)
        self.sinks = torch.randn(case.hq, device=device, generator=gen) * 2 if case.sinks else None
        self._window_kv: tuple[torch.Tensor, torch.Tensor] | None = None
        self._full_kv: tuple[torch.Tensor, torch.Tensor] | None = None
        self._draw_queries(case)

    def _draw_queries(self, case: DecodeCase) -> None:
        self.case = case
        self.q_lens = case.q_lens()
        self.q_start = torch.tensor([0, *torch.tensor(self.q_lens).cumsum(0).tolist()], dtype=torch.int32,
                                    device=self.device)
        self.q = torch.randn(sum(self.q_lens), case.hq, case.head_dim, device=self.device,
                             dtype=getattr(torch, case.dtype), generator=self.gen)

    def with_queries(self, case: DecodeCase) -> DecodeInputs:
        """The same KV with the queries of ``case`` (a verify twin of this decode case, say)."""
        if case.decode_twin() != self.case.decode_twin():
            raise ValueError(f"{case} does not read the KV of {self.case}")
        other = copy.copy(self)
        other._draw_queries(case)
        return other

    # -- the keys each path reads, gathered ------------------------------------------------

    def span_kv(self, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The last ``span`` keys of every request, contiguous ``[B, Hkv, span, D]``, as ``page_size`` maps them."""
        c = self.case
        table = self.tables[page_size][0]
        positions = torch.arange(c.context - self.span, c.context, device=self.device)
        if page_size == 1:
            slots = table.view(c.batch, c.context)[:, positions].to(torch.int64)
        else:
            slots = self.block_table[:, positions // PAGE].to(torch.int64) * PAGE + positions % PAGE
        return self.k[slots].transpose(1, 2), self.v[slots].transpose(1, 2)

    def window_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The window's keys alone, contiguous (what sdpa_window reads)."""
        if self._window_kv is None:
            k, v = self.span_kv(PAGE)
            w = min(self.case.window, self.case.context)
            self._window_kv = (k[:, :, -w:].contiguous(), v[:, :, -w:].contiguous())
        return self._window_kv

    def full_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole context contiguous: random keys, then the last ``span`` keys of the pool (the window's, and those
        a verify's first queries see before it) (Flex and the dense SDPA paths)."""
        c = self.case
        if self._full_kv is not None:
            return self._full_kv
        if c.context > FULL_CONTEXT_LIMIT:
            raise PathUnavailableError(f"contiguous whole-context copies are built up to {FULL_CONTEXT_LIMIT} keys")
        dtype = getattr(torch, c.dtype)
        kc = torch.randn(c.batch, c.hkv, c.context, c.head_dim, device=self.device, dtype=dtype)
        vc = torch.randn_like(kc)
        k, v = self.span_kv(PAGE)
        kc[:, :, -k.shape[2]:] = k
        vc[:, :, -v.shape[2]:] = v
        self._full_kv = (kc, vc)
        return self._full_kv

    def reference(self, page_size: int, with_sinks: bool = True, keys: int | None = None) -> torch.Tensor:
        """float64 attention of every query over its own window (and the sinks, if any), ``[T, Hq, D]``.
        ``keys``: a window of that many keys instead of the case's, as far back as the pages this case holds (the
        keys a verify twin reads, or the whole context); a wider one is refused, as its first query would reach the
        NaN dummy page."""
        c = self.case
        window = c.window if keys is None else keys
        widest = self.span - max(self.q_lens) + 1
        past_held_pages = self.span < c.context and window > widest  # every key held: any window is safe
        if keys is not None and (keys < 1 or past_held_pages):
            raise ValueError(f"keys={keys}: this case holds the last {self.span} keys of each request (its window "
                             f"plus a verify's drafts), so queries of up to {max(self.q_lens)} per request take "
                             f"1..{widest}")
        k_all, v_all = self.span_kv(page_size)
        g = c.hq // c.hkv
        key_pos = torch.arange(c.context - self.span, c.context, device=self.device)
        out = torch.empty(self.q.shape, dtype=torch.float64, device=self.device)
        for b in range(c.batch):
            lo, n = int(self.q_start[b]), self.q_lens[b]
            q = self.q[lo:lo + n].double().view(n, c.hkv, g, c.head_dim)
            s = torch.einsum("nhgd,hsd->nhgs", q, k_all[b].double()) * self.sm_scale
            q_pos = torch.arange(c.context - n, c.context, device=self.device)
            allowed = Window(window).attends(q_pos[:, None], key_pos[None, :])
            s = s.masked_fill(~allowed[:, None, None, :], float("-inf"))
            top = s.amax(-1, keepdim=True)
            weights = torch.exp(s - top)
            denom = weights.sum(-1, keepdim=True)
            if self.sinks is not None and with_sinks:
                denom = denom + torch.exp(self.sinks.double().view(c.hkv, g, 1) - top)
            o = torch.einsum("nhgs,hsd->nhgd", weights / denom, v_all[b].double())
            out[lo:lo + n] = o.reshape(n, c.hq, c.head_dim)
        return out

    # -- the paths ---------------------------------------------------------------------------

    def kit(self, page_size: int, keys: int | None = None, **tuning: Any) -> Made:
        from swa_kit.attention.kit.path import plan_decode

        table, row_start = self.tables[page_size]
        plan = plan_decode(self.k, self.v, table, row_start, self.seq_lens, page_size,
                           self.case.window if keys is None else keys, self.sm_scale, self.case.hq,
                           q_start=self.q_start, max_q_len=max(self.q_lens), sinks=self.sinks,
                           max_seq_len=self.case.context, **tuning)
        out = torch.empty_like(self.q)
        q = self.q
        return (lambda: plan.run(q, out)), out, plan.facts()

    def aiter(self) -> Made:
        from swa_kit.attention.aiter.triton_kernels import unified_attention

        c = self.case
        kp, vp = self.k.view(-1, PAGE, c.hkv, c.head_dim), self.v.view(-1, PAGE, c.hkv, c.head_dim)
        out = torch.empty_like(self.q)
        q, seq_lens, table, sinks, scale = self.q, self.seq_lens, self.block_table, self.sinks, self.sm_scale
        cu_q, max_q, ctx = self.q_start, max(self.q_lens), c.context
        window = from_keys("aiter_unified", c.window)

        def run() -> torch.Tensor:
            unified_attention(q, kp, vp, out, cu_q, max_q, seq_lens, ctx, scale, window, table, sinks=sinks)
            return out

        return run, out, {}

    def queries_per_request(self) -> int:
        """The one q_len of every request, which the torch paths need (their queries are one dense tensor); a ragged
        verify is refused by name."""
        q_len = self.q_lens[0]
        if any(n != q_len for n in self.q_lens):
            raise PathUnavailableError(f"the torch paths take one q_len per batch, not a ragged one ({self.q_lens});"
                                          " time a verify twin with ragged=False on them")
        return q_len

    def _grouped_q(self) -> torch.Tensor:
        """The queries as ``[B, Hkv, q_len x G, D]``, row ``i * G + g`` for query ``i`` and head ``g`` of the group
        (a copy where q_len > 1, made before anything is timed)."""
        c, n = self.case, self.queries_per_request()
        g = c.hq // c.hkv
        return self.q.view(c.batch, n, c.hkv, g, c.head_dim).transpose(1, 2).reshape(c.batch, c.hkv, n * g, c.head_dim)

    def _chain_mask(self, keys: int, first_key: int) -> torch.Tensor | None:
        """``[q_len x G, keys]``: which of ``keys`` contiguous keys from position ``first_key`` on each query row
        attends (None in decode, where every row attends all of the window's)."""
        c, n = self.case, self.queries_per_request()
        if n == 1:
            return None
        q_pos = torch.arange(c.context - n, c.context, device=self.device).repeat_interleave(c.hq // c.hkv)
        key_pos = torch.arange(first_key, first_key + keys, device=self.device)
        return Window(c.window).attends(q_pos[:, None], key_pos[None, :])

    def sdpa_window(self) -> Made:
        """SDPA over the keys some query attends, pre-sliced contiguous: the window in decode, the window and the
        drafts before the last query in a verify, masked per query row (and so run by a kernel that takes a mask)."""
        import torch.nn.functional as F

        c, n = self.case, self.queries_per_request()
        k, v = self.window_kv() if n == 1 else (kv[:, :, -c.keys_attended(n):] for kv in self.span_kv(PAGE))
        k, v = k.contiguous(), v.contiguous()
        mask = self._chain_mask(k.shape[2], c.context - k.shape[2])
        qg, scale = self._grouped_q(), self.sm_scale
        return (lambda: F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale)), None, {"q_len": n}

    def flex(self) -> Made:
        """FlexAttention over the whole contiguous context through a sliding (in a verify: sliding and causal, per
        query row) BlockMask."""
        c, n = self.case, self.queries_per_request()
        flex_attention, create_block_mask = flex_functions(fresh=True)
        kc, vc = self.full_kv()
        window, group = Window(c.window), c.hq // c.hkv
        # tensors, not ints, in the mask: a new window or context is not a new compile
        last_query, keys, first = (torch.tensor(value, device=self.device)
                                   for value in (c.context - n, window.keys, window.first_key(c.context - 1)))

        def chain(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return attends(last_query + q_idx // group, kv_idx, keys)  # row i * G + g: query i, at L - q_len + i

        def decode(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return kv_idx >= first  # the recorded grid's mask: one query at L - 1 sees every key from its first on

        qg, scale = self._grouped_q(), self.sm_scale
        mask = create_block_mask(decode if n == 1 else chain, B=None, H=None, Q_LEN=qg.shape[2], KV_LEN=c.context,
                                 device=self.device)
        return (lambda: flex_attention(qg, kc, vc, block_mask=mask, scale=scale)), None, {"q_len": n}

    def _decode_q(self, path: str) -> torch.Tensor:
        """The grouped queries of a decode batch; a verify is refused by name (the path's mask is decode's)."""
        if self.queries_per_request() != 1:
            raise PathUnavailableError(f"{path} is timed for decode only (one query per request)")
        return self._grouped_q()

    def sdpa_dense_mask(self) -> Made:
        import torch.nn.functional as F

        c = self.case
        qg = self._decode_q("sdpa_dense_mask")
        kc, vc = self.full_kv()
        mask = torch.zeros(1, 1, 1, c.context, dtype=torch.bool, device=self.device)
        mask[..., Window(c.window).first_key(c.context - 1):] = True
        scale = self.sm_scale
        return (lambda: F.scaled_dot_product_attention(qg, kc, vc, attn_mask=mask, scale=scale)), None, {}

    def sdpa_full(self) -> Made:
        import torch.nn.functional as F

        qg, scale = self._decode_q("sdpa_full"), self.sm_scale
        kc, vc = self.full_kv()
        return (lambda: F.scaled_dot_product_attention(qg, kc, vc, scale=scale)), None, {}


def as_tokens(out: torch.Tensor, q_len: int = 1) -> torch.Tensor:
    """Torch-path output ``[B, Hkv, q_len x G, D]`` (row ``i * G + g``) as the kit's ``[B x q_len, Hq, D]``."""
    b, hkv, rows, d = out.shape
    return out.view(b, hkv, q_len, rows // q_len, d).transpose(1, 2).reshape(b * q_len, -1, d)


# -- prefill ----------------------------------------------------------------------------------


def prefill_inputs(case: PrefillCase, device: torch.device) -> dict[str, Any]:
    dtype = getattr(torch, case.dtype)
    t, g = case.tokens, case.hq // case.hkv
    q = torch.randn(1, case.hq, t, case.head_dim, device=device, dtype=dtype)
    k = torch.randn(1, case.hkv, t, case.head_dim, device=device, dtype=dtype)
    v = torch.randn(1, case.hkv, t, case.head_dim, device=device, dtype=dtype)
    return {"q": q, "k": k, "v": v, "ke": k.repeat_interleave(g, dim=1), "ve": v.repeat_interleave(g, dim=1)}


def prefill_paths(case: PrefillCase, data: dict[str, Any], device: torch.device) -> dict[str, Callable[[], Any]]:
    """The prefill callables (output ``[1, Hq, T, D]`` for torch paths, ``[T, Hq, D]`` for aiter)."""
    import torch.nn.functional as F

    q, k, v, ke, ve = data["q"], data["k"], data["v"], data["ke"], data["ve"]
    t, w, scale = case.tokens, case.window, case.head_dim**-0.5
    flex_attention, create_block_mask = flex_functions(fresh=True)
    width = torch.tensor(w, device=device)

    def causal_window(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx <= q_idx) & (q_idx - kv_idx < width)

    block_mask = create_block_mask(causal_window, B=None, H=None, Q_LEN=t, KV_LEN=t, device=device)
    pos = torch.arange(t, device=device)
    dense = Window(w).attends(pos[:, None], pos[None, :])
    paths: dict[str, Callable[[], Any]] = {
        "flex_attention": lambda: flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True),
        "sdpa_dense_mask": lambda: F.scaled_dot_product_attention(q, ke, ve, attn_mask=dense, scale=scale),
        "sdpa_full": lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True, scale=scale),
    }
    try:
        from swa_kit.attention.aiter.triton_kernels import unified_attention

        qt = q[0].transpose(0, 1).contiguous()  # [T, Hq, D]
        kp = k[0].transpose(0, 1).contiguous().view(-1, PAGE, case.hkv, case.head_dim)
        vp = v[0].transpose(0, 1).contiguous().view(-1, PAGE, case.hkv, case.head_dim)
        out = torch.empty_like(qt)
        cu_q = torch.tensor([0, t], device=device, dtype=torch.int32)
        seq = torch.tensor([t], device=device, dtype=torch.int32)
        table = torch.arange(t // PAGE, device=device, dtype=torch.int32)[None]
        window = from_keys("aiter_unified", w)

        def aiter() -> torch.Tensor:
            unified_attention(qt, kp, vp, out, cu_q, t, seq, t, scale, window, table)
            return out

        paths["aiter_triton_unified"] = aiter
    except (ImportError, PathUnavailableError) as error:
        reason = f"aiter_triton_unified cannot run here: {error}"

        def unavailable() -> Any:  # timed like the others, so the row records why instead of vanishing
            raise PathUnavailableError(reason)

        paths["aiter_triton_unified"] = unavailable
    return paths
