"""Target and draft model-runner stand-ins, wired the way SGLang 0.5.23 wires them.

The attributes carry SGLang's names (``token_to_kv_pool``, ``token_to_kv_pool_allocator``,
``req_to_token_pool``, ``is_draft_worker``, ``spec_algorithm``), so the resolvers in
:mod:`swa_kit.engine.resolver` accept these and SGLang's own runners alike.

How SGLang shares memory between a target and its draft (``alloc_memory_pool`` of the
spec workers passes the target's ``req_to_token_pool`` and allocator to the draft):

* EAGLE, EAGLE3, STANDALONE: the draft shares ``req_to_token_pool`` and the token
  allocator, so its tokens get the *target's full-pool slot ids*; it owns a separate,
  non-SWA ``MHATokenToKVPool`` for its own layers, sized like the target's full pool
  and addressed directly with those full ids.
* FROZEN_KV_MTP (Gemma-4's MTP assistant): the draft also shares both, but its own
  pool is a 64-token dummy (``max_total_num_tokens=64``); it writes no KV and reads
  the target's: its layers borrow the target's last sliding and last full layer
  caches, and each call swaps the draft backend's pool for the target's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from swa_kit.models.configs import ModelLayout
from swa_kit.errors import ModelConfigError, PoolExhaustedError
from swa_kit.engine.eviction import ReqKV, free_swa_out_of_window_slots
from swa_kit.engine.spec_algorithms import FROZEN_KV_DUMMY_POOL_SIZE, SpeculativeAlgorithm, planned
from swa_kit.engine.pools import (
    BaseTokenToKVPoolAllocator,
    MHATokenToKVPool,
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    SWAKVPool,
    SWATokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)


@dataclass(frozen=True)
class WorkerLayout:
    """What the workers need from a model: layer kinds, window, and whether SGLang builds a hybrid pool."""

    name: str
    layer_types: tuple[str, ...]  # "full" or "sliding" per target layer
    window_keys: int | None
    hybrid_pool: bool
    draft_layer_types: tuple[str, ...] = ("sliding",)

    def __post_init__(self) -> None:
        bad = [t for t in self.layer_types + self.draft_layer_types if t not in ("full", "sliding")]
        if bad or not self.layer_types:
            raise ModelConfigError(f"{self.name}: layer types must be 'full' or 'sliding', got {bad or '[]'}")
        if ("sliding" in self.layer_types + self.draft_layer_types) != (self.window_keys is not None):
            raise ModelConfigError(f"{self.name}: window_keys {self.window_keys!r} must be set exactly when a "
                                   "layer is sliding")
        if self.hybrid_pool and "sliding" not in self.layer_types:
            raise ModelConfigError(f"{self.name}: a hybrid pool needs at least one sliding layer")

    @property
    def swa_attention_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "sliding"]

    @property
    def full_attention_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full"]

    @classmethod
    def from_model(cls, spec: ModelLayout) -> "WorkerLayout":
        """A real model's layout (chunked layers sit in the SWA pool, so they count as sliding here)."""
        retained = {k.retained_tokens for k in spec.kinds.values() if k.uses_swa_pool}
        if len(retained) > 1:
            shown = sorted(retained, key=lambda keys: -1 if keys is None else keys)  # None: a kind with no bound
            raise ModelConfigError(f"{spec.name}: the kit's pools take one window, the model has {shown}")
        window = retained.pop() if retained else None
        types = tuple("sliding" if spec.kinds[t].uses_swa_pool else "full" for t in spec.layer_types)
        return cls(spec.name, types, window, spec.sglang_hybrid_swa_pool,
                   draft_layer_types=("sliding",) if window is not None else ("full",))


# The three kinds of model the decision table walks, as tiny layouts.
MODEL_KINDS: dict[str, WorkerLayout] = {
    "hybrid_swa": WorkerLayout("hybrid_swa", ("sliding", "sliding", "full", "sliding", "sliding", "full"), 4, True),
    "windowed_one_pool": WorkerLayout("windowed_one_pool", ("sliding", "sliding", "full", "sliding", "sliding", "full"),
                                      4, False),
    "no_window": WorkerLayout("no_window", ("full",) * 4, None, False, draft_layer_types=("full",)),
}


@dataclass(eq=False)
class ModelRunner:
    """The slice of SGLang's ``ModelRunner`` that KV-pool decisions read."""

    role: str  # "target" or "draft"
    layout: WorkerLayout
    spec_algorithm: SpeculativeAlgorithm
    is_draft_worker: bool
    req_to_token_pool: Any
    token_to_kv_pool_allocator: Any
    token_to_kv_pool: Any
    layer_types: tuple[str, ...]
    kv_source: dict[int, int] = field(default_factory=dict)  # this runner's layer -> target layer whose KV it reads
    target: "ModelRunner | None" = None

    @property
    def writes_kv(self) -> bool:
        return not (self.is_draft_worker and self.spec_algorithm.traits.reads_target_pool)

    @property
    def kv_pool_read(self) -> Any:
        """The pool this runner's attention reads: its own, except a FROZEN_KV draft, which reads the target's."""
        if self.is_draft_worker and self.spec_algorithm.traits.reads_target_pool:
            if self.target is None:
                raise ModelConfigError(f"a FROZEN_KV draft reads its target's pool; this {self.role} has no target")
            return self.target.token_to_kv_pool
        return self.token_to_kv_pool

    def source_layer(self, layer_id: int) -> int:
        """The layer id used to index :attr:`kv_pool_read` for this runner's ``layer_id``."""
        if not 0 <= layer_id < len(self.layer_types):
            raise ModelConfigError(f"{self.role} has layers 0..{len(self.layer_types) - 1}, not {layer_id!r}")
        return self.kv_source.get(layer_id, layer_id)

    def layer_is_sliding(self, layer_id: int) -> bool:
        return self.layer_types[layer_id] == "sliding"


@dataclass(eq=False)
class Workers:
    """A target and (for a speculative algorithm) its draft, sharing memory like SGLang's."""

    target: ModelRunner
    draft: ModelRunner | None

    def runner(self, role: str) -> ModelRunner:
        found = {"target": self.target, "draft": self.draft}.get(role)
        if found is None:
            raise ModelConfigError(f"no {role!r} worker here (algorithm {self.target.spec_algorithm.name}); "
                                   "roles: target, and draft when the algorithm is speculative")
        return found

    def pool_name(self, runner: ModelRunner, pool: Any) -> str:
        """Name a pool as the decision table does: target_swa_pool, target_pool, own_pool (a draft's own), or none."""
        if pool is None:
            return "none"
        if pool is self.target.token_to_kv_pool:
            return "target_swa_pool" if self.target.layout.hybrid_pool else "target_pool"
        if pool is runner.token_to_kv_pool:
            return "own_pool"
        return "unknown_pool"


def build_workers(
    layout: WorkerLayout | ModelLayout | str = "hybrid_swa",
    algorithm: SpeculativeAlgorithm | str = SpeculativeAlgorithm.NONE,
    *,
    size: int = 64,
    size_swa: int = 16,
    page_size: int = 1,
    max_requests: int = 4,
    max_context_len: int = 64,
    head_num: int = 2,
    head_dim: int = 8,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Workers:
    """Build a target (and its draft) with real pools, wired as SGLang wires them.

    ``layout`` is a :data:`MODEL_KINDS` name, a :class:`WorkerLayout`, or a
    :class:`~swa_kit.models.configs.ModelLayout` (its layer layout, with tiny heads so it fits on a CPU).
    An algorithm whose workers the kit does not mirror (NGRAM, DFLASH) raises :class:`ModelConfigError`.
    """
    if isinstance(layout, ModelLayout):
        layout = WorkerLayout.from_model(layout)
    elif isinstance(layout, str):
        if layout not in MODEL_KINDS:
            raise ModelConfigError(f"unknown model kind {layout!r}; known: {', '.join(MODEL_KINDS)}")
        layout = MODEL_KINDS[layout]
    algorithm = planned(algorithm)

    req_to_token_pool = ReqToTokenPool(size=max_requests, max_context_len=max_context_len, device=device)
    pool_args: dict[str, Any] = dict(page_size=page_size, dtype=dtype, head_num=head_num, head_dim=head_dim,
                                     device=device)
    target_pool: SWAKVPool | MHATokenToKVPool
    allocator: BaseTokenToKVPoolAllocator
    if layout.hybrid_pool:
        target_pool = SWAKVPool(size=size, size_swa=size_swa, swa_attention_layer_ids=layout.swa_attention_layer_ids,
                                full_attention_layer_ids=layout.full_attention_layer_ids, **pool_args)
        allocator = SWATokenToKVPoolAllocator(size, size_swa, page_size, dtype, device, target_pool, need_sort=False)
    else:
        target_pool = MHATokenToKVPool(size=size, layer_num=len(layout.layer_types), **pool_args)
        if page_size == 1:
            allocator = TokenToKVPoolAllocator(size, dtype, device, target_pool, need_sort=False)
        else:
            allocator = PagedTokenToKVPoolAllocator(size, page_size, dtype, device, target_pool, need_sort=False)

    target = ModelRunner("target", layout, algorithm, False, req_to_token_pool, allocator, target_pool,
                         layout.layer_types)
    if algorithm.is_none():
        return Workers(target, None)

    if algorithm.traits.reads_target_pool:  # FROZEN_KV_MTP
        # The dummy pool exists because the runner machinery wants one; nothing is written to it.
        dummy = MHATokenToKVPool(size=FROZEN_KV_DUMMY_POOL_SIZE, layer_num=len(layout.draft_layer_types), **pool_args)
        last = {kind: max(i for i, t in enumerate(layout.layer_types) if t == kind)
                for kind in set(layout.layer_types)}
        missing = set(layout.draft_layer_types) - set(last)
        if missing:
            raise ModelConfigError(f"{layout.name}: a FROZEN_KV draft layer of kind {sorted(missing)} has no target "
                                   "layer of that kind to borrow KV from")
        kv_source = {i: last[t] for i, t in enumerate(layout.draft_layer_types)}
        draft = ModelRunner("draft", layout, algorithm, True, req_to_token_pool, allocator, dummy,
                            layout.draft_layer_types, kv_source, target)
    else:
        # Full-pool slot ids index this pool directly, so it spans the target's full id space.
        own = MHATokenToKVPool(size=size, layer_num=len(layout.draft_layer_types), **pool_args)
        draft = ModelRunner("draft", layout, algorithm, True, req_to_token_pool, allocator, own,
                            layout.draft_layer_types, {}, target)
    return Workers(target, draft)


FREE, DUMMY = -1, -2  # slot states in a snapshot; request slots carry the request's index


@dataclass(frozen=True)
class PoolSnapshot:
    """Who owns each slot of the target's pools at one moment.

    ``full_owner[slot]`` / ``swa_owner[slot]``: the request index, :data:`FREE`, or
    :data:`DUMMY` (slot 0, reserved for padding and for evicted tokens' mapping).
    ``swa_ids[req]`` is the full->SWA mapping of each token (0 once its SWA slot is freed).
    """

    step: int
    full_owner: torch.Tensor
    swa_owner: torch.Tensor | None
    full_ids: dict[int, torch.Tensor]
    swa_ids: dict[int, torch.Tensor]

    def counts(self, req: int) -> dict[str, int]:
        """Slots of one request: full live, SWA live, tokens whose SWA slot was freed (full slot kept)."""
        swa = self.swa_ids.get(req)
        evicted = int((swa == 0).sum()) if swa is not None else 0
        return {"full_live": int((self.full_owner == req).sum()),
                "swa_live": int((self.swa_owner == req).sum()) if self.swa_owner is not None else 0,
                "swa_freed": evicted}


def snapshot(workers: Workers, seq_lens: dict[int, int], step: int = 0) -> PoolSnapshot:
    """Read the target's pools: which request owns which full and SWA slot (``seq_lens``: req index -> tokens)."""
    target = workers.target
    hybrid = target.layout.hybrid_pool
    full_pool = target.token_to_kv_pool.full_kv_pool if hybrid else target.token_to_kv_pool
    rows = full_pool.get_key_buffer(0).shape[0]
    full_owner = torch.full((rows,), FREE, dtype=torch.int64)
    full_owner[0] = DUMMY
    swa_owner = None
    if hybrid:
        swa_rows = target.token_to_kv_pool.swa_kv_pool.get_key_buffer(0).shape[0]
        swa_owner = torch.full((swa_rows,), FREE, dtype=torch.int64)
        swa_owner[0] = DUMMY
    full_ids, swa_ids = {}, {}
    for req, seq_len in seq_lens.items():
        ids = target.req_to_token_pool.req_to_token[req, :seq_len].to(torch.int64)
        full_ids[req] = ids
        full_owner[ids] = req
        if swa_owner is not None:  # hybrid
            mapped = target.token_to_kv_pool.translate_loc_from_full_to_swa(ids).to(torch.int64)
            swa_ids[req] = mapped
            swa_owner[mapped[mapped > 0]] = req
    return PoolSnapshot(step, full_owner, swa_owner, full_ids, swa_ids)


def _alloc(workers: Workers, n: int) -> torch.Tensor:
    ids = workers.target.token_to_kv_pool_allocator.alloc(n)
    if ids is None:
        raise PoolExhaustedError(f"the target's pools cannot serve {n} more token(s); build the workers with a "
                                 "larger size / size_swa or run fewer steps")
    return ids


def run_decode(workers: Workers, prompt_len: int, decode_steps: int, req: int = 0) -> list[PoolSnapshot]:
    """Prefill ``prompt_len`` tokens for request ``req``, then decode ``decode_steps`` tokens one at a time.

    After each step the SWA slots of tokens that left the window are freed (their full
    slots stay, their mapping drops to the dummy slot 0). Returns one snapshot after the
    prefill and one after every decode step.
    """
    if prompt_len < 1 or decode_steps < 0:
        raise ModelConfigError(f"prompt_len must be >= 1 and decode_steps >= 0, got {prompt_len}, {decode_steps}")
    target = workers.target
    max_len = target.req_to_token_pool.req_to_token.shape[1]
    if prompt_len + decode_steps > max_len:
        raise ModelConfigError(f"{prompt_len} + {decode_steps} tokens exceed max_context_len {max_len}")
    window = target.layout.window_keys if target.layout.hybrid_pool else None
    req_to_token = target.req_to_token_pool.req_to_token
    req_to_token[req, :prompt_len] = _alloc(workers, prompt_len).to(req_to_token.dtype)
    seq_len = prompt_len
    state = ReqKV(rid=req, req_pool_idx=req, kv_allocated_len=seq_len)
    snapshots = []
    for step in range(decode_steps + 1):
        if step:
            req_to_token[req, seq_len] = _alloc(workers, 1).to(req_to_token.dtype)[0]
            seq_len += 1
            state.kv_allocated_len = seq_len
        if window is not None:
            # The snapshot shows the step's own query (the token just added): it reads its window.
            allocator = target.token_to_kv_pool_allocator
            free_swa_out_of_window_slots(state, seq_len, window=window, page_size=allocator.page_size,
                                         num_draft_tokens=1, req_to_token_pool=target.req_to_token_pool,
                                         token_to_kv_pool_allocator=allocator)
        snapshots.append(snapshot(workers, {req: seq_len}, step))
    return snapshots


def request_ids_past_swa_buffer(algorithm: SpeculativeAlgorithm | str) -> tuple[Workers, torch.Tensor]:
    """A hybrid target (and its draft) where request 1's full-pool slot ids run past the end of the SWA buffer.

    The pools hold 64 full and 16 SWA slots (17 SWA rows with the dummy). Request 0 takes 14 slots and its
    first 10 leave the window, which frees their SWA slots; request 1's 10 tokens then get full ids past 16
    but recycled SWA slots. Untranslated, the ids of its window index past the SWA buffer; translated, they
    land inside it. Returns the workers and request 1's full ids (row 1 of ``req_to_token``).
    """
    workers = build_workers("hybrid_swa", algorithm, size=64, size_swa=16)
    first = _alloc(workers, 14)
    workers.target.token_to_kv_pool_allocator.free_swa(first[:10])  # request 0 leaves its window
    ids = _alloc(workers, 10)
    req_to_token = workers.target.req_to_token_pool.req_to_token
    req_to_token[1, : ids.numel()] = ids.to(req_to_token.dtype)
    return workers, ids
