"""Serve the tiny model over the kit's pools: the serving loop the speculative-decoding runs drive.

:class:`Server` holds the target and its draft wired as SGLang wires them
(:func:`swa_kit.engine.workers.build_workers`): one ``req_to_token`` table, one token allocator, the target's
hybrid pool and the draft's own (EAGLE) or borrowed (FROZEN_KV MTP) one. A forward writes K/V at the allocator's
slots and reads it back per layer in named steps:

1. :meth:`Server.route`: the layer's route from :func:`swa_kit.engine.routing.plan` (path, window argument, page
   table, guard), or a forced call site for the guard experiment;
2. :meth:`Server.swa_kv_pool`: the pool whose full->SWA mapping the layer's slot ids go through, or None,
   as the resolver under test decides;
3. :meth:`Server.check_route`: the resolver and the dispatch must agree on the page table; a guarded route
   raises or is recorded;
4. :meth:`AttentionBatch.from_pools <swa_kit.attention.batch.AttentionBatch.from_pools>`: the batch from
   ``req_to_token`` over the buffer the worker reads;
5. :meth:`Server.run_route`: the route's path computes it, and says which path, tier and device did.

Before a target layer attends, :meth:`Server.write_target_kv` writes its new K/V (a sliding layer's at the
translated SWA slots, as SGLang's forward does).

The network itself (weights, projections, the dense forward) is :mod:`swa_kit.lessons.tiny_model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch

from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.batch import AttentionBatch
from swa_kit.attention.reference import reference_attention
from swa_kit.models.configs import ModelLayout, parse_hf_config
from swa_kit.engine.routing import LayerPlan, Plan, plan
from swa_kit.errors import DispatchGuardError, ModelConfigError, PoolExhaustedError
from swa_kit.engine.eviction import ReqKV, free_swa_out_of_window_slots
from swa_kit.masks import tree_depths, verify_tree_mask
from swa_kit.lessons.tiny_model import Block, TinyConfig, TinyModels
from swa_kit.engine.pools import KVWriteLoc
from swa_kit.engine.resolver import RESOLVERS, uses_sliding_window_kv_pool
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.engine.workers import WorkerLayout, build_workers


def tiny_model_spec(cfg: TinyConfig) -> ModelLayout:
    """The tiny model as a :class:`~swa_kit.models.configs.ModelLayout`, so :func:`swa_kit.engine.routing.plan`
    can route it.

    It goes through the same parser as every Hugging Face config: a ``layer_types``-style config.
    """
    windows = {w for w in cfg.windows if w is not None}
    if len(windows) != 1:
        raise ModelConfigError(
            f"sliding layers have windows {sorted(windows)}; the kit's pools and dispatch take one window per "
            "model (one SWA sub-pool, one eviction boundary): give every sliding layer the same window"
        )
    origin = "swa_kit.lessons.tiny_model.TinyConfig (data/tiny_model/config.json)"
    return parse_hf_config({
        "architectures": ["SwaKitTinyForCausalLM"], "model_type": "swa_kit_tiny", "num_hidden_layers": cfg.n_layers,
        "layer_types": [f"{t}_attention" for t in cfg.layer_types], "sliding_window": windows.pop(),
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
        "dtype": "float32",
    }, where=origin, name="swa-kit-tiny", display_name="swa_kit tiny hybrid-SWA model",
        hf_repo="none (data/tiny_model)", sources={"config": origin})


def tiny_eagle_spec(cfg: TinyConfig) -> ModelLayout:
    """The tiny EAGLE draft: one sliding layer (``eagle_window`` keys) in a full pool of its own."""
    origin = "swa_kit.lessons.tiny_model.TinyConfig.eagle_window (data/tiny_model/config.json)"
    return parse_hf_config({
        "architectures": ["SwaKitTinyEagleForCausalLM"], "model_type": "swa_kit_tiny_eagle", "num_hidden_layers": 1,
        "layer_types": ["sliding_attention"], "sliding_window": cfg.eagle_window, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "dtype": "float32",
    }, where=origin, name="swa-kit-tiny-eagle", display_name="swa_kit tiny EAGLE head", hf_repo="none",
        sources={"config": origin})


@dataclass
class Request:
    """One request's serving state: committed tokens, how far the pools hold its KV, its target hidden states."""

    row: int  # req_pool_idx: its row of req_to_token
    prompt_len: int
    tokens: list[int]  # prompt + generated; the last one has no target KV yet (the "bonus" token)
    kv_len: int = 0  # positions 0..kv_len-1 hold target KV
    draft_kv_len: int = 0  # positions 0..draft_kv_len-1 hold EAGLE-draft KV computed from true features
    evicted_upto: int = 0  # SWA slots of positions < evicted_upto are freed
    hidden: list[torch.Tensor] = field(default_factory=list)  # target last hidden per KV position

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len:]


class Server:
    """Serve :class:`TinyModels` over real pools: target (+ EAGLE or FROZEN_KV MTP draft) wired as SGLang wires them.

    Every attention call builds an :class:`AttentionBatch` from ``req_to_token`` over the
    buffer the runner reads; sliding layers' slot ids are translated full->SWA exactly when
    the resolver under test (``resolver``: legacy / naive / fixed) says so; the layer's route
    (path, window argument, page table, guard) comes from :func:`swa_kit.engine.routing.plan`, which
    must agree with the resolver about the page table. Paths that honour a window run as the
    float64 reference with the layer's window (the CPU stand-in for the planned kernel); a path
    that declares no window runs itself (its documented semantics), which is what the guard
    experiment needs: ``layer_sites={layer: "decode.paged"}`` forces a target layer onto that call site
    in the modes that reach it. With ``enforce_guards`` a refused route raises
    :class:`~swa_kit.errors.DispatchGuardError`; without, the refusal is recorded in
    :attr:`guards_seen` and the route runs, as SGLang would run it.
    """

    def __init__(self, models: TinyModels, algorithm: str = "none", resolver: str = "fixed", *,
                 max_requests: int = 4, max_context_len: int = 256, size: int | None = None,
                 size_swa: int | None = None, topk: int = 1, env: dict[str, str] | None = None,
                 enforce_guards: bool = True, layer_sites: dict[int, str] | None = None,
                 sglang_windows: bool = False) -> None:
        if resolver not in RESOLVERS:
            raise ModelConfigError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}")
        self.models, self.cfg = models, models.cfg
        self.model_spec = tiny_model_spec(self.cfg)
        self.window = self.cfg.max_window
        self.algorithm, self.resolver, self.topk = algorithm, resolver, topk
        self.env = dict(env or {})
        self.enforce_guards = enforce_guards
        # False: a window-honouring path attends the layer's intended window (the model as trained).
        # True: it attends what SGLang's window argument really makes it attend (the plan's
        # effective_keys; one key short at the unified sites).
        self.sglang_windows = sglang_windows
        self.layer_sites = dict(layer_sites or {})
        self.guards_seen: list[str] = []
        # Every (path, tier, device) that computed an attention call, in first-use order.
        self.computed_by: dict[tuple[str, str, str], None] = {}
        draft_types = ("sliding",) if algorithm != "frozen_kv_mtp" else tuple(
            self.cfg.layer_types[i] for i in self.cfg.mtp_source_layers)
        layout = WorkerLayout("swa-kit-tiny", self.cfg.layer_types, self.window, True, draft_types)
        size = size or max_requests * max_context_len
        self.workers = build_workers(
            layout, SpeculativeAlgorithm.from_string(algorithm), size=size,
            size_swa=size_swa or max_requests * 2 * (self.window + 8), max_requests=max_requests,
            max_context_len=max_context_len, head_num=self.cfg.n_kv_heads, head_dim=self.cfg.head_dim,
            dtype=torch.float64)
        self.req_to_token = self.workers.target.req_to_token_pool.req_to_token
        self._plans: dict[tuple[str, str], Plan] = {}

    # -- one layer's attention, step by step -------------------------------------------------------------

    def plan(self, worker: str, mode: str) -> Plan:
        """The dispatch plan of one worker in one forward mode (cached; guards recorded, not raised here)."""
        key = (worker, mode)
        if key not in self._plans:
            draft = tiny_eagle_spec(self.cfg) if worker == "draft" and self.algorithm == "eagle" else None
            self._plans[key] = plan(self.model_spec, mode, spec=self.algorithm,
                                    topk=self.topk if mode == "verify" else 1, env=self.env, worker=worker,
                                    resolver=self.resolver, strict=False, draft_model=draft)
        return self._plans[key]

    def route(self, worker: str, mode: str, layer_id: int) -> LayerPlan:
        """Step 1: the layer's route: its plan entry, or the forced call site of ``layer_sites``."""
        entry = self.plan(worker, mode).layer(layer_id)
        site = self.layer_sites.get(layer_id) if worker == "target" else None
        if site is None:
            return entry
        # A forced route (the guard experiment): the layer at the call site SGLang picks when unified
        # attention is off (a one-pool model, default env), judged by that site's guard.
        alt = plan(replace(self.model_spec, sglang_hybrid_swa_pool=False), mode, worker=worker, strict=False,
                   env={"SGLANG_USE_AITER_UNIFIED_ATTN": "0"}).layer(layer_id)
        if alt.site != site:  # this mode never reaches that call site (e.g. prefill for decode.paged)
            return entry
        return replace(alt, buffer=entry.buffer, page_table=entry.page_table)

    def swa_kv_pool(self, worker: str, layer_sliding: bool) -> Any:
        """Step 2: the pool whose full->SWA mapping this worker's layer reads through, or None (resolver's call)."""
        resolved = RESOLVERS[self.resolver](self.workers.runner(worker))
        return resolved if layer_sliding and uses_sliding_window_kv_pool(resolved) else None

    def check_route(self, worker: str, layer_id: int, entry: LayerPlan, swa_kv_pool: Any) -> None:
        """Step 3: the resolver and the dispatch agree on the page table; a guarded route raises or is recorded."""
        page_table = "swa" if swa_kv_pool is not None else "full"
        if entry.page_table != page_table:
            raise DispatchGuardError(
                f"{worker} layer {layer_id}: the {self.resolver} resolver says page table {page_table} but "
                f"dispatch planned {entry.page_table!r}")
        if entry.guard:
            if self.enforce_guards:
                raise DispatchGuardError(entry.guard)
            if entry.guard not in self.guards_seen:
                self.guards_seen.append(entry.guard)

    def run_route(self, entry: LayerPlan, batch: AttentionBatch) -> torch.Tensor:
        """Step 5: compute the batch on the route's path and record which path, tier and device did."""
        if get_path(entry.path).honours_window:
            keys = entry.effective_keys if self.sglang_windows else entry.intended_keys
            result = reference_attention(batch, keys if entry.kind == "sliding" else None)
        else:
            result = run_path(entry.path, batch, entry.window_arg)
        self.computed_by.setdefault((result.path, result.tier, result.device))
        return result.out.to(torch.float64)

    def attend(self, worker: str, mode: str, layer_id: int, sliding: bool, kv_pool: Any, q: torch.Tensor,
               reqs: list[Request], q_lens: list[int], seq_lens: list[int],
               tree_masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        """One layer's attention for a batch, reading layer ``layer_id`` of ``kv_pool`` (the steps above)."""
        entry = self.route(worker, mode, layer_id)
        swa_kv_pool = self.swa_kv_pool(worker, sliding)
        self.check_route(worker, layer_id, entry, swa_kv_pool)
        batch = AttentionBatch.from_pools(q, kv_pool, layer_id, self.workers.target.req_to_token_pool,
                                          [r.row for r in reqs], q_lens, seq_lens, swa_kv_pool=swa_kv_pool,
                                          tree_masks=tree_masks)
        return self.run_route(entry, batch)

    def write_target_kv(self, layer_id: int, sliding: bool, loc: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor) -> None:
        """Write the target's K/V at full-pool slots ``loc``; a sliding layer's go to the translated SWA slots."""
        swa = self.swa_kv_pool("target", sliding)
        swa_loc = swa.translate_loc_from_full_to_swa(loc) if swa is not None else None
        self.workers.target.token_to_kv_pool.set_kv_buffer(layer_id, KVWriteLoc(loc, swa_loc=swa_loc), k, v)

    # -- slots -------------------------------------------------------------------------------------------

    def add_request(self, prompt: list[int]) -> Request:
        rows = self.workers.target.req_to_token_pool.alloc_rows(1)
        if rows is None:
            raise PoolExhaustedError("no free req_to_token row: build the Server with a larger max_requests")
        return Request(row=rows[0], prompt_len=len(prompt), tokens=list(prompt))

    def reserve(self, req: Request, start: int, count: int) -> None:
        """Allocate ``count`` slots for positions ``start..`` and record them in ``req_to_token``."""
        if start + count > self.req_to_token.shape[1]:
            raise PoolExhaustedError(f"positions up to {start + count} exceed max_context_len "
                                     f"{self.req_to_token.shape[1]}; build the Server with a larger one")
        ids = self.workers.target.token_to_kv_pool_allocator.alloc(count)
        if ids is None:
            raise PoolExhaustedError(f"the pools cannot serve {count} more slots; build the Server with a larger "
                                     "size / size_swa")
        self.req_to_token[req.row, start:start + count] = ids.to(self.req_to_token.dtype)

    def release(self, req: Request, start: int, end: int) -> None:
        """Free both sides of positions ``start..end-1`` (rejected draft tokens)."""
        if end > start:
            self.workers.target.token_to_kv_pool_allocator.free(self.req_to_token[req.row, start:end].to(torch.int64))

    def evict(self, req: Request) -> None:
        """Out-of-window eviction by the kit's one rule (:mod:`swa_kit.engine.eviction`).

        The oldest query still to come sits at ``kv_len - 1`` (the FROZEN_KV MTP head queries
        at the last KV position), so one position counts as pending.
        """
        state = ReqKV(rid=req.row, req_pool_idx=req.row, kv_allocated_len=req.kv_len,
                      swa_evicted_seqlen=req.evicted_upto)
        free_swa_out_of_window_slots(
            state, req.kv_len, window=self.window, page_size=1, num_draft_tokens=min(1, req.kv_len),
            req_to_token_pool=self.workers.target.req_to_token_pool,
            token_to_kv_pool_allocator=self.workers.target.token_to_kv_pool_allocator,
        )
        req.evicted_upto = state.swa_evicted_seqlen

    # -- forwards ----------------------------------------------------------------------------------------

    def target_forward(self, reqs: list[Request], tokens: list[list[int]], mode: str,
                       tree_parents: list[tuple[int, ...]] | None = None) -> torch.Tensor:
        """Run the target on new tokens at positions ``kv_len..`` of each request; write their KV.

        The slots must be reserved. Returns the last hidden states ``[total_q, d]``. With
        ``tree_parents`` (tree verify) token ``i`` sits at ``kv_len + depth(i)`` and sees its ancestors only.
        """
        target, pool = self.models.target, self.workers.target.token_to_kv_pool
        q_lens = [len(t) for t in tokens]
        seq_lens = [r.kv_len + n for r, n in zip(reqs, q_lens)]
        pos, masks = [], None
        for b, (r, n) in enumerate(zip(reqs, q_lens)):
            depth = tree_depths(tree_parents[b]) if tree_parents else range(n)
            pos.append(r.kv_len + torch.tensor(list(depth)))
        if tree_parents:
            masks = [verify_tree_mask(r.kv_len, p, None) for r, p in zip(reqs, tree_parents)]
        pos_t = torch.cat(pos)
        loc = torch.cat([self.req_to_token[r.row, r.kv_len:n].to(torch.int64) for r, n in zip(reqs, seq_lens)])
        x = target.embed(torch.tensor([t for ts in tokens for t in ts]))
        for i, block in enumerate(cast("list[Block]", target.layers)):  # nn.ModuleList yields untyped modules
            sliding = self.cfg.layer_types[i] == "sliding"
            self.write_target_kv(i, sliding, loc, *block.kv(x, pos_t))
            out = self.attend("target", mode, i, sliding, pool, block.q(x, pos_t), reqs, q_lens, seq_lens, masks)
            x = block.finish(x, out)
        return x

    def eagle_forward(self, reqs: list[Request], starts: list[int], tokens: list[list[int]],
                      features: list[torch.Tensor], mode: str) -> torch.Tensor:
        """The EAGLE draft on tokens at positions ``starts[b]..``: writes its own pool at full ids, reads it back."""
        eagle, runner = self.models.eagle, self.workers.runner("draft")
        q_lens = [len(t) for t in tokens]
        seq_lens = [s + n for s, n in zip(starts, q_lens)]
        pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, q_lens)])
        loc = torch.cat([self.req_to_token[r.row, s:e].to(torch.int64) for r, s, e in zip(reqs, starts, seq_lens)])
        x = eagle.inputs(self.models.target, torch.tensor([t for ts in tokens for t in ts]), torch.cat(features))
        k, v = eagle.layer.kv(x, pos)
        # Its own MHATokenToKVPool takes full ids as they are (SGLang's pool ignores any swa_loc).
        runner.token_to_kv_pool.set_kv_buffer(0, loc, k, v)
        out = self.attend("draft", mode, 0, True, runner.kv_pool_read, eagle.layer.q(x, pos), reqs, q_lens, seq_lens)
        return eagle.layer.finish(x, out)

    def mtp_step(self, reqs: list[Request], tokens: list[int], hidden: torch.Tensor) -> torch.Tensor:
        """One FROZEN_KV MTP step per request: queries at position kv_len-1 over the target's KV; writes none."""
        mtp, runner = self.models.mtp, self.workers.runner("draft")
        seq_lens = [r.kv_len for r in reqs]
        pos = torch.tensor([n - 1 for n in seq_lens])
        x = mtp.inputs(self.models.target, torch.tensor(tokens), hidden)
        for b, (block, source) in enumerate(zip(cast("list[Block]", mtp.blocks), mtp.source_layers)):
            sliding = runner.layer_is_sliding(b)
            out = self.attend("draft", "draft_decode", source, sliding, runner.kv_pool_read, block.q(x, pos), reqs,
                              [1] * len(reqs), seq_lens)
            x = block.finish(x, out)
        return mtp.post_projection(x)
