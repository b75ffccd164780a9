"""Which SWA KV pool a worker translates slot ids against: three resolvers and their decision table.

A sliding layer of a hybrid model keeps its KV in the small SWA sub-pool, so the
attention backend must turn each full-pool slot id from ``req_to_token`` into an SWA
slot id (``translate_loc_from_full_to_swa``) before reading. The resolver decides
*which* pool's mapping to use, or ``None`` for "no translation":

* :func:`legacy_resolve_swa_kv_pool`: before SGLang PR #38756, the aiter backend
  looked only at the runner's *active* pool. A FROZEN_KV MTP draft's active pool is a
  64-token dummy, so SWA was switched off although the draft reads the target's SWA
  pool: its sliding layers index the SWA buffer with untranslated full-pool ids.
* :func:`naive_resolve_swa_kv_pool`: always the allocator's pool. An EAGLE draft shares
  the target's allocator but owns its own pool addressed by full ids, so translating
  them reads the wrong slots of that pool (SGLang #25103: silent acceptance drop).
* :func:`resolve_swa_kv_pool`: SGLang 0.5.23's fixed rule, as each backend's own copy of
  ``_resolve_swa_kv_pool`` has it (``backend=``). The copies have drifted in what they call an SWA pool
  (:data:`SWA_POOL_CLASS`): aiter and trtllm_mha test the concrete ``SWAKVPool``, FlashInfer the
  ``BaseSWAKVPool`` above it, so a pool that subclasses only the base (``DeepSeekV4TokenToKVPool``)
  resolves on FlashInfer and not on the other two.

A draft whose own architecture is hybrid-SWA (MiMoV2MTP, Step3p5MTP, DeepSeek-V4 NextN, a Gemma-4
standalone draft) owns an SWA pool: :func:`with_hybrid_draft_pool` wires one, and every resolver then
returns it by rule 1 (the active pool is an SWA pool).

A pool of SGLang's own class tree is judged by its classes' names, exactly as the backend's isinstance
would; any other pool (the kit's, a test's) by what it offers: the base's ``translate_loc_from_full_to_swa``,
and the concrete pool's ``swa_layer_nums`` besides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from swa_kit.models.configs import ModelLayout
from swa_kit.errors import SlotError, UsageError
from swa_kit.sglang_versions import SGLANG_VERSION, reverted_fix
from swa_kit.window import Window
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm

if TYPE_CHECKING:  # the resolvers judge pools they are handed; only building and reading pools needs torch
    import torch

    from swa_kit.engine.workers import ModelRunner, Workers


#: The class each backend's ``_resolve_swa_kv_pool`` isinstance-checks (SGLang 0.5.23
#: ``layers/attention/{aiter,trtllm_mha,flashinfer}_backend.py``).
SWA_POOL_CLASS: dict[str, str] = {"aiter": "SWAKVPool", "trtllm_mha": "SWAKVPool", "flashinfer": "BaseSWAKVPool"}
#: Backends whose copy reads ``model_runner.is_draft_worker`` plainly (aiter's reads it with a default of False).
_PLAIN_DRAFT_FLAG = ("trtllm_mha", "flashinfer")


def _backend(backend: str) -> str:
    if backend not in SWA_POOL_CLASS:
        raise UsageError(f"no _resolve_swa_kv_pool of backend {backend!r}; SGLang {SGLANG_VERSION} has one in "
                         f"{', '.join(SWA_POOL_CLASS)}")
    return backend


def is_swa_pool(pool: Any, backend: str = "aiter") -> bool:
    """Whether ``backend``'s ``_resolve_swa_kv_pool`` takes ``pool`` for an SWA pool.

    SGLang's pools by class name (their tree holds ``BaseSWAKVPool``); others by what they offer.
    """
    wanted = SWA_POOL_CLASS[_backend(backend)]
    names = {cls.__name__ for cls in type(pool).__mro__}
    if "BaseSWAKVPool" in names:
        return wanted in names
    translates = callable(getattr(pool, "translate_loc_from_full_to_swa", None))
    return translates and (wanted == "BaseSWAKVPool" or hasattr(pool, "swa_layer_nums"))


def _allocator_swa_pool(model_runner: Any, backend: str = "aiter") -> Any:
    kvcache = model_runner.token_to_kv_pool_allocator.get_kvcache()
    return kvcache if is_swa_pool(kvcache, backend) else None


def resolve_swa_kv_pool(model_runner: Any, backend: str = "aiter") -> Any:
    """The fixed resolver, as ``backend``'s own ``_resolve_swa_kv_pool`` in SGLang 0.5.23 has it.

    1. the active pool is an SWA pool (by ``backend``'s test, :func:`is_swa_pool`): use it;
    2. an EAGLE-family draft (not FROZEN_KV MTP): ``None``, its own pool takes full ids;
    3. otherwise the allocator's pool if it is an SWA pool, else ``None``.

    aiter reads a missing ``is_draft_worker`` as a target; trtllm_mha and FlashInfer read it plainly,
    so a runner without it raises ``AttributeError`` there, as in SGLang.
    """
    active = model_runner.token_to_kv_pool
    if is_swa_pool(active, backend):
        return active
    is_draft = model_runner.is_draft_worker if backend in _PLAIN_DRAFT_FLAG else \
        getattr(model_runner, "is_draft_worker", False)
    if is_draft and not model_runner.spec_algorithm.is_frozen_kv_mtp():
        return None
    return _allocator_swa_pool(model_runner, backend)


def legacy_resolve_swa_kv_pool(model_runner: Any) -> Any:
    """Before the fix: the active pool if it is an SWA pool, else ``None`` (breaks FROZEN_KV MTP)."""
    active = model_runner.token_to_kv_pool
    return active if is_swa_pool(active) else None


def naive_resolve_swa_kv_pool(model_runner: Any) -> Any:
    """Always the allocator's pool (breaks EAGLE-family drafts: SGLang #25103)."""
    return _allocator_swa_pool(model_runner)


def uses_sliding_window_kv_pool(pool: Any) -> bool:
    """The backend's switch: translate (and force unified attention) only for a pool with SWA layers."""
    return pool is not None and pool.swa_layer_nums > 0


def with_hybrid_draft_pool(workers: Workers, draft: ModelLayout | tuple[str, ...], size_swa: int = 16) -> Workers:
    """``workers`` whose draft owns a real SWA pool shaped like ``draft`` (a hybrid-SWA draft architecture).

    ``draft`` is the draft's layout, or its layer types ("sliding" / "full") alone.

    SGLang sizes that pool in the target's configurator (``eagle_draft_swa_num_layers``) and hands it
    to the draft runner as its ``token_to_kv_pool``; the draft still shares ``req_to_token`` and the
    allocator with the target.
    """
    from swa_kit.engine.pools import SWAKVPool
    from swa_kit.engine.workers import Workers

    if workers.draft is None:
        raise UsageError("no draft worker to give an SWA pool: build the workers with a speculative algorithm")
    if isinstance(draft, ModelLayout):
        draft = tuple("sliding" if draft.kinds[t].uses_swa_pool else "full" for t in draft.layer_types)
    full_pool = workers.draft.token_to_kv_pool
    own = SWAKVPool(size=full_pool.size, size_swa=size_swa,
                    swa_attention_layer_ids=[i for i, t in enumerate(draft) if t == "sliding"],
                    full_attention_layer_ids=[i for i, t in enumerate(draft) if t == "full"],
                    page_size=full_pool.page_size, dtype=full_pool.dtype, head_num=full_pool.head_num,
                    head_dim=full_pool.head_dim, device="cpu")
    return Workers(workers.target, replace(workers.draft, token_to_kv_pool=own, layer_types=draft))


RESOLVERS: dict[str, Callable[[Any], Any]] = {
    "legacy": legacy_resolve_swa_kv_pool,
    "naive": naive_resolve_swa_kv_pool,
    "fixed": resolve_swa_kv_pool,
}

#: The rule a backend's ``_resolve_swa_kv_pool`` had before a fix the kit can undo: PR -> (backends, resolver).
#: trtllm_mha's history (SGLang PRs #25103, #26966, #27491): the allocator's pool for every worker; then the
#: active pool only, as Triton's check, which loses a FROZEN_KV draft's SWA pool; then the allocator's pool for
#: every draft again; then 0.5.23's rule with the EAGLE exception.
RESOLVER_BEFORE: dict[int, tuple[tuple[str, ...], str]] = {
    38756: (("aiter", "triton"), "legacy"),
    25103: (("trtllm_mha",), "naive"),
    26966: (("trtllm_mha",), "legacy"),
    27491: (("trtllm_mha",), "naive"),
}


def resolver_for(backend: str, sglang_version: str) -> str:
    """The resolver ``backend`` runs on SGLang ``sglang_version``: the fixed one unless that version undoes it."""
    backends, resolver = RESOLVER_BEFORE.get(reverted_fix(sglang_version) or 0, ((), "fixed"))
    return resolver if backend in backends else "fixed"


def wanted_swa_kv_pool(runner: ModelRunner) -> Any:
    """The pool a runner *should* translate against, derived from what it reads, not from the rules above.

    A runner's sliding layers need the mapping of the pool they actually read: the
    target's SWA pool for the target and for a FROZEN_KV draft (which reads the target's
    KV); nothing for a draft that reads its own non-SWA pool or for a one-pool model.
    """
    pool = runner.kv_pool_read
    return pool if is_swa_pool(pool) and uses_sliding_window_kv_pool(pool) else None


NO_TRANSLATION = ("no translation where needed: sliding layers index the SWA buffer with full-pool slot ids, "
                  "reading wrong slots, or out of bounds once ids exceed size_swa (SGLang #26957)")
WRONG_TRANSLATION = ("translation where none is wanted: the draft's full-pool ids are mapped through the target's "
                     "full->SWA table and read wrong slots of its own pool (SGLang #25103: silent acceptance drop)")


def consequence(returned: Any, wanted: Any) -> str:
    """What goes wrong when a resolver returns ``returned`` but ``wanted`` was right ('' when right)."""
    if returned is wanted:
        return ""
    if wanted is not None and returned is None:
        return NO_TRANSLATION
    if wanted is None:
        return WRONG_TRANSLATION
    return "translation against the wrong SWA pool: slot ids come from another pool's mapping"


def _rows(workers: Workers, runners: tuple, algorithm: SpeculativeAlgorithm, model: str) -> list[dict[str, Any]]:
    rows = []
    for runner in runners:
        wanted = wanted_swa_kv_pool(runner)
        for name, resolver in RESOLVERS.items():
            returned = resolver(runner)
            rows.append({
                "role": runner.role, "algorithm": algorithm.name, "model": model, "resolver": name,
                "returns": workers.pool_name(runner, returned), "wanted": workers.pool_name(runner, wanted),
                "correct": returned is wanted, "consequence": consequence(returned, wanted),
            })
    return rows


def decision_table(**build_kwargs: Any) -> list[dict[str, Any]]:
    """Every resolver over every (role x algorithm the kit mirrors x model kind), on real pools.

    Rows: ``role``, ``algorithm``, ``model``, ``resolver``, ``returns``, ``wanted``,
    ``correct`` and ``consequence`` ('' when correct).
    """
    from swa_kit.engine.workers import MODEL_KINDS, build_workers

    rows = []
    for model in MODEL_KINDS:
        for algorithm in (a for a in SpeculativeAlgorithm if a.traits.kit_plans):
            workers = build_workers(model, algorithm, **build_kwargs)
            rows += _rows(workers, tuple(r for r in (workers.target, workers.draft) if r), algorithm, model)
    return rows


def hybrid_draft_table(**build_kwargs: Any) -> list[dict[str, Any]]:
    """The draft rows for a hybrid-SWA draft (MiMoV2MTP, Step3p5MTP: one sliding layer in an SWA pool of its own).

    Its active pool is an SWA pool, so the legacy and fixed resolvers return it (rule 1); the naive one
    returns the target's pool and maps the draft's ids through the wrong table.
    """
    from swa_kit.engine.workers import build_workers

    rows = []
    for algorithm in (a for a in SpeculativeAlgorithm if a.traits.kit_plans and a.traits.owns_kv_pool):
        workers = with_hybrid_draft_pool(build_workers("hybrid_swa", algorithm, **build_kwargs), ("sliding",))
        rows += _rows(workers, (workers.draft,), algorithm, "hybrid_swa + hybrid-SWA draft")
    return rows


@dataclass(frozen=True)
class SlotRead:
    """The slots one layer of one runner reads for one request under one resolver."""

    resolver: str
    role: str
    layer_id: int
    source_layer: int  # layer id inside the pool read (a FROZEN_KV draft borrows a target layer)
    sliding: bool
    pool: str  # which pool's buffer is read
    buffer_rows: int  # rows of that buffer (size + page_size of the sub-pool)
    translated: bool
    full_ids: torch.Tensor  # req_to_token[req, :seq_len]
    read_ids: torch.Tensor  # what the backend indexes the buffer with
    right_ids: torch.Tensor  # what it should index with
    attended: torch.Tensor  # positions the newest query attends (the window)

    @property
    def in_bounds(self) -> torch.Tensor:
        return (self.read_ids >= 0) & (self.read_ids < self.buffer_rows)

    @property
    def wrong(self) -> torch.Tensor:
        """Attended positions read from a slot other than the right one."""
        return self.attended & (self.read_ids != self.right_ids)

    @property
    def ok(self) -> bool:
        return not bool(self.wrong.any())


def _buffer(pool: Any, layer_id: int) -> torch.Tensor:
    return pool.get_key_buffer(layer_id)


def slots_read(workers: Workers, role: str, resolver: str, layer_id: int, req_pool_idx: int,
               seq_len: int) -> SlotRead:
    """Which slots ``role``'s layer ``layer_id`` reads for a request, as a backend using ``resolver`` would.

    The backend takes full-pool ids from ``req_to_token``; it translates them through
    the resolved pool's mapping only for a sliding layer and only when the resolved pool
    has SWA layers, then indexes the buffer of the pool the runner reads.
    """
    import torch

    if resolver not in RESOLVERS:
        raise UsageError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}")
    runner = workers.runner(role)
    source = runner.source_layer(layer_id)
    sliding = runner.layer_is_sliding(layer_id)
    full_ids = runner.req_to_token_pool.req_to_token[req_pool_idx, :seq_len].to(torch.int64)
    resolved = RESOLVERS[resolver](runner)
    translated = sliding and uses_sliding_window_kv_pool(resolved)
    read_ids = resolved.translate_loc_from_full_to_swa(full_ids).to(torch.int64) if translated else full_ids
    pool = runner.kv_pool_read
    wanted = wanted_swa_kv_pool(runner)
    right_ids = wanted.translate_loc_from_full_to_swa(full_ids).to(torch.int64) if sliding and wanted else full_ids
    positions = torch.arange(seq_len)
    window = Window(runner.layout.window_keys if sliding else None)
    attended = window.attends(seq_len - 1, positions)
    return SlotRead(resolver, role, layer_id, source, sliding, workers.pool_name(runner, pool),
                    _buffer(pool, source).shape[0], translated, full_ids, read_ids, right_ids, attended)


def read_keys(workers: Workers, read: SlotRead) -> torch.Tensor:
    """Gather the K rows ``read`` names from the real buffer, only for attended positions.

    An out-of-bounds id raises :class:`~swa_kit.errors.SlotError` naming it: on a GPU the
    same read is an illegal memory access or silent garbage.
    """
    runner = workers.runner(read.role)
    buffer = _buffer(runner.kv_pool_read, read.source_layer)
    ids = read.read_ids[read.attended]
    bad = ids[(ids < 0) | (ids >= buffer.shape[0])]
    if bad.numel():
        raise SlotError(
            f"{read.role} layer {read.layer_id} under the {read.resolver} resolver reads slot(s) "
            f"{bad.tolist()[:5]} of a {buffer.shape[0]}-row buffer ({read.pool}): out of bounds. "
            "Translate full-pool ids with the target's SWA mapping (resolve_swa_kv_pool)."
        )
    return buffer[ids]
