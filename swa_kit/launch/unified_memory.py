"""``--enable-unified-memory``: SGLang 0.5.23's one byte buffer for the full and SWA pools, sized as SGLang sizes it.

Under unified memory a hybrid-SWA model keeps its full and SWA KV in one ``uint8`` buffer (``UnifiedSWAKVPool``
over a ``UnifiedKVPool``): the full sub-pool grows down from the top, the SWA sub-pool up from the bottom, and the
split between them moves at run time. What start-up fixes, and what this module mirrors:

* the boot split (``model_executor/pool_configurator.py HybridSWAPoolConfigurator``): the full tokens are the
  most pages whose allocation fits the budget (``_max_unified_full_tokens``, a bisection: full tokens x the full
  entry + ``int(full x ratio)`` SWA tokens x the SWA layers, plus a private draft pool over the virtual id span),
  the SWA tokens ``full x ratio``; ``validate_swa_pool_size`` is skipped (``_solve_pool_sizes``). With
  ``--max-running-requests`` and the radix cache off, ``SWARequestCapPoolConfigurator`` fixes the SWA side at its
  cap and bisects only where a private draft pool is priced;
* the buffer (``mem_cache/kv_cache_configurator.py``): ``config_from_budget`` floors the budget to 4096 B
  (``unified_total_bytes``), and ``_init_unified_swa_pools`` gives the whole of it to a launch without speculation,
  the solved bytes (``unified_memory_pool_bytes``) otherwise;
* its entries (``mem_cache/unified_memory_pool.py MHASubPoolSpec.entry_bytes``): one slot's bytes in every layer of
  a sub-pool, rounded up to 32 B, and ``UnifiedKVPool``'s ``max_slots = total_bytes // entry_bytes`` per sub-pool:
  either side could take the whole buffer; ``init_unified_swa_pools`` refuses a buffer below its bs=1 floor (one
  window of SWA KV plus the slot-0 sink);
* the draft: an EAGLE / EAGLE3 draft, or a DFLASH / DSPARK one, is fused into the target's entries
  (``kv_cache_configurator.py _fused_draft_decision``, ``mem_cache/layout/fused_draft.py place_fused_draft``): its
  full-attention layers ride in the ``full`` sub-pool, its window layers in ``swa`` when it runs on triton and its
  window fits the target's (else they fold into ``full`` where the rows match); each sub-pool's entry grows by the
  draft's lanes x its K and V rows. The draft worker then binds ``UnifiedDraftKVPool``, or
  ``UnifiedDraftSWAKVPool`` with window layers (``mem_cache/unified_draft_pool.py _bind_dense``), over those lanes:
  the target's slot ids and page table, no pool of its own. The DFLASH family's draft is one block
  (``draft_kv_profile(num_depths=1)``) on its own draft backend (``draft_worker_common.py
  resolve_draft_worker_attention_backend``), its region in the draft's compute dtype on fa4. An EAGLE draft that
  cannot fuse is refused (``_fused_draft_for_swa_factory``); a DFLASH-family one keeps its private pool, priced
  in the boot split at its own bytes per token (``_draft_pool_bytes_per_token``);
* a model without a hybrid pool is refused when the pools are built (``KVCacheConfigurator._init_pools``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from swa_kit.errors import LaunchRefusedError
from swa_kit.launch.backend import hybrid_swa_memory_off
from swa_kit.launch.inputs import Launch
from swa_kit.launch.parallel import Parallel
from swa_kit.models.configs import LayerKind, ModelLayout, text_fields
from swa_kit.models.drafts import default_draft_layout
from swa_kit.sglang_versions import SGLANG_VERSION

_SRC = f"sglang {SGLANG_VERSION} mem_cache"
#: ``layout/token_major.py``: a slot's entry is rounded to 32 B, a part's offset inside it to 16 B.
ENTRY_ALIGN_BYTES = 32
ROW_ALIGN_BYTES = 16
#: ``arg_groups/kv_cache_hook.py TRANSLATED_MHA_RAILS``: the backends a fused draft reads its rows through.
TRANSLATED_MHA_RAILS = ("triton", "flashinfer", "fa3", "trtllm_mha", "fa4")
#: ``layout/fused_draft.py WINDOW_RAIL_BACKENDS``: the draft backends with a per-step sliding-window rail.
WINDOW_RAIL_BACKENDS = ("triton",)
#: SGLang's words when it refuses a model without a hybrid pool (``kv_cache_configurator.py _init_pools``).
NOT_HYBRID_REASON = ("--enable-unified-memory only supports hybrid Mamba and hybrid sliding-window-attention models "
                     "(DeepSeek-V4 excluded)")


def config_window(model: ModelLayout) -> int | None:
    """``ModelConfig.sliding_window_size``: the text config's ``sliding_window_size``, ``sliding_window`` or
    ``window_size``, the first set (``configs/model_config.py _get_sliding_window_size``)."""
    fields = text_fields(model)
    value = next((fields[key] for key in ("sliding_window_size", "sliding_window", "window_size")
                  if fields.get(key) is not None), None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ceil(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class FusedDraft:
    """Where an EAGLE draft's KV rides in the target's entries: lanes and bytes per slot, per host sub-pool."""

    lanes: dict[str, int]  # "full" / "swa" -> draft layers (lanes) carried in every slot of that sub-pool
    region_bytes: dict[str, int]  # host -> the draft's bytes per slot there (lanes x K and V rows)
    note: str

    @property
    def pool_class(self) -> str:
        """The pool the draft worker binds over its lanes (``unified_draft_pool.py _bind_dense``)."""
        return "UnifiedDraftSWAKVPool" if self.lanes.get("swa") else "UnifiedDraftKVPool"


@dataclass(frozen=True)
class UnifiedPool:
    """The unified buffer of one GPU: its bytes, each sub-pool's entry and the slots it could take alone."""

    total_bytes: int
    entry_bytes: dict[str, int]  # "full" / "swa"
    fused: FusedDraft | None
    how: str

    @property
    def max_slots(self) -> dict[str, int]:
        """``UnifiedKVPool``: each sub-pool could hold ``total_bytes // entry_bytes`` slots if the other held none."""
        return {name: self.total_bytes // entry for name, entry in self.entry_bytes.items()}

    def as_dict(self) -> dict[str, object]:
        """The audit's and the differential's view of the buffer."""
        return {"total_bytes": self.total_bytes, "entry_bytes": dict(self.entry_bytes),
                "max_slots": self.max_slots, "draft_lanes": None if self.fused is None else dict(self.fused.lanes)}


def enabled(launch: Launch) -> bool:
    return launch.server_args.enable_unified_memory


def hybrid_pool(launch: Launch) -> bool:
    """``ModelConfig.is_hybrid_swa``: a hybrid-SWA architecture whose hybrid SWA memory stays on (the user's
    ``--disable-hybrid-swa-memory`` or the architecture's override turns it off)."""
    return launch.model.sglang_hybrid_swa_pool and not hybrid_swa_memory_off(launch)[0]


def check_hybrid(launch: Launch) -> None:
    """Refuse, in SGLang's words, a model whose pools are not hybrid (``_init_pools``, after the model loads)."""
    if enabled(launch) and not hybrid_pool(launch):
        off, by = hybrid_swa_memory_off(launch)
        why = f" (hybrid SWA memory off by {by})" if off and launch.model.sglang_hybrid_swa_pool else ""
        raise LaunchRefusedError(
            f"SGLang refuses this launch when it builds the pools: {NOT_HYBRID_REASON}; the current model "
            f"({launch.model.architecture}{why}) is neither ({_SRC}/kv_cache_configurator.py KVCacheConfigurator."
            "_init_pools); drop --enable-unified-memory for this model")


# -- the fused draft ----------------------------------------------------------------------------------------


def _row_bytes(kind: LayerKind, parallel: Parallel, dtype_bytes: int) -> tuple[int, int]:
    heads = parallel.kv_heads_per_gpu(kind.num_kv_heads)
    return heads * kind.head_dim * dtype_bytes, heads * kind.v_head_dim * dtype_bytes


def _draft_kinds(draft: ModelLayout) -> dict[str, tuple[int, LayerKind]]:
    """``draft_kv_profile``: the draft's full and window layers (window only where its own pool is hybrid-SWA)."""
    window = set(draft.swa_attention_layer_ids) if draft.sglang_hybrid_swa_pool else set()
    out: dict[str, tuple[int, LayerKind]] = {}
    full = [i for i in range(draft.num_layers) if i not in window]
    if full:
        out["full"] = (len(full), draft.layer_kind(full[0]))
    if window:
        out["window"] = (len(window), draft.layer_kind(min(window)))
    return out


def _refuse_draft(reason: str) -> LaunchRefusedError:
    return LaunchRefusedError(
        "SGLang refuses this launch when it builds the pools: --enable-unified-memory + EAGLE/EAGLE3 on a hybrid-SWA "
        f"target needs the draft's KV fused into the target's pages, but this draft cannot fuse ({reason}) "
        f"({_SRC}/kv_cache_configurator.py _fused_draft_for_swa_factory); drop --enable-unified-memory or the draft")


class _Declined(Exception):
    """``FusedDraftDecision(declined=...)``: why the draft cannot fuse."""


def _fuses(launch: Launch) -> bool:
    """Whether ``_fused_draft_decision`` applies: unified memory, a hybrid-SWA host, an EAGLE / EAGLE3 draft or a
    DFLASH-family one."""
    return enabled(launch) and hybrid_pool(launch) and launch.spec_algorithm.traits.unified_fuses_draft


def _mtp_rewrite(launch: Launch) -> ModelLayout | None:
    """A path-less draft's config: the target's rewritten to its MTP architecture (``ModelConfig(...,
    is_draft_model=True)``), where the algorithm takes its draft from the target and the architecture has one."""
    layout, _ = default_draft_layout(launch.model, launch.spec_algorithm.traits.mtp_draft_from_target)
    return None if layout is launch.model else layout


def _draft_config(launch: Launch) -> ModelLayout | None:
    """``spec_aux_config.draft_model_config``: the draft's config read; an EAGLE draft without a path is the
    target's MTP form; a DFLASH-family draft has no such form (``_resolve_dflash_aux_hidden_state``)."""
    if launch.draft_model is not None or launch.spec_algorithm.traits.dflash_family:
        return launch.draft_model
    return _mtp_rewrite(launch)


def unmodelled_draft(launch: Launch) -> str | None:
    """The part of a unified-memory launch with a fusing draft the kit does not model (None: all of it is): a draft
    whose config is not on this machine, the target's own MTP layers as a path-less draft, or the hierarchical
    cache."""
    if not _fuses(launch):
        return None
    name = launch.spec_algorithm.name
    if launch.draft_model is None and launch.server_args.speculative_draft_model_path is not None:
        return f"--enable-unified-memory with the {name} draft, whose config is not read (give --draft-hf-config)"
    if launch.draft_model is None and _draft_config(launch) is None and \
            launch.spec_algorithm.traits.unified_refuses_unfused and \
            isinstance(text_fields(launch.model).get("num_nextn_predict_layers"), int):
        return "--enable-unified-memory with the target's own MTP layers as a path-less EAGLE draft"
    if launch.server_args.enable_hierarchical_cache:
        return f"--enable-unified-memory + {name} with --enable-hierarchical-cache (validate_fused_hicache_draft)"
    return None


@dataclass(frozen=True)
class DraftRails:
    """The backends ``_fused_draft_decision`` reads for the draft, as the target worker resolves them."""

    target: tuple[str, ...]  # the target's resolved prefill and decode backends
    #: ``speculative_draft_attention_backend`` after resolution (swa_kit.launch.drafts published_draft_backend)
    published: str | None = None
    #: the DFLASH family's draft backend (``draft_worker_common.py resolve_draft_worker_attention_backend``; DFLASH's
    #: is published as ``speculative_draft_attention_backend`` by ``_resolve_dflash_draft_attention_backend``); None
    #: for EAGLE, whose draft runs on ``--speculative-draft-attention-backend`` or the target's pair
    dflash: str | None = None
    #: bytes per element of the draft's region: the target's KV dtype, or the DFLASH family's fa4 draft's own
    #: compute dtype (``allow_target_draft_different_cache_dtype``)
    region_dtype_bytes: int | None = None


def fused_decision(launch: Launch, rails: DraftRails, parallel: Parallel,
                   dtype_bytes: int) -> tuple[FusedDraft | None, str | None]:
    """``_fused_draft_decision`` + ``place_fused_draft`` under unified memory: the placement, or why the draft
    cannot fuse (``(None, None)``: fusion does not apply). An EAGLE draft that cannot fuse raises, as
    ``_fused_draft_for_swa_factory`` does; a DFLASH-family one keeps its private pool (``(None, reason)``).

    The DFLASH family's draft is one block (``draft_kv_profile(num_depths=1)``: its config's NEXTN depth count is
    the target's), of ``dflash_draft_num_layers`` layers, on the draft backend ``rails.dflash``.
    """
    if not _fuses(launch) or unmodelled_draft(launch):
        return None, None
    try:
        return _fused(launch, rails, parallel, dtype_bytes), None
    except _Declined as declined:
        if launch.spec_algorithm.traits.unified_refuses_unfused:
            raise _refuse_draft(str(declined)) from None
        return None, str(declined)


def _fused(launch: Launch, rails: DraftRails, parallel: Parallel, dtype_bytes: int) -> FusedDraft | None:
    draft = _draft_config(launch)
    dflash = launch.spec_algorithm.traits.dflash_family
    if draft is None:  # path-less, and no MTP form: draft_kv_num_layers stays unset
        if dflash:
            return None
        raise _Declined("fusion does not apply to it: no draft path, and the target has no MTP draft form nor "
                        "num_nextn_predict_layers")
    depths = text_fields(draft).get("num_nextn_predict_layers")
    if not dflash and isinstance(depths, int) and depths > 1:
        raise _Declined(f"a per-depth draft head ({depths} depths) needs one runner per depth (multi-layer EAGLE)")
    given = rails.published
    explicit = (given,) if given else tuple(sorted(set(rails.target)))  # _draft_attention_backends
    runs_on = (rails.dflash,) if dflash and rails.dflash else explicit
    off = [b for b in runs_on if b not in TRANSLATED_MHA_RAILS]
    if off:
        raise _Declined(f"the draft runs on {', '.join(runs_on)}, off the translated MHA rails "
                        f"({', '.join(sorted(TRANSLATED_MHA_RAILS))})")
    kinds = _draft_kinds(draft)
    region_bytes = rails.region_dtype_bytes or dtype_bytes
    rows = {name: _row_bytes(kind, parallel, region_bytes) for name, (_, kind) in kinds.items()}
    resolved = set(rails.target) | ({given} if given else set())
    _check_rows(kinds, rows, explicit, asymmetric_ok=resolved <= {"triton", "fa3", "fa4"})
    return _place(launch, kinds, rows)


def _check_rows(kinds: dict[str, tuple[int, LayerKind]], rows: dict[str, tuple[int, int]],
                draft_backends: tuple[str, ...], asymmetric_ok: bool) -> None:
    """``place_fused_draft``'s declines before placing: a window layer's rail, asymmetric rows (fine only where
    every backend is one of ``ASYMMETRIC_KV_BACKENDS``), rows off the 16-B part alignment."""
    unrailed = sorted(set(draft_backends) - set(WINDOW_RAIL_BACKENDS))
    for name, (count, kind) in kinds.items():
        if name == "window" and unrailed:
            raise _Declined(f"the draft's {count} sliding-window layer(s): the draft's attention backend "
                            f"{unrailed} carries no per-step sliding-window rail (only ['triton'] does)")
        if kind.head_dim != kind.v_head_dim and not asymmetric_ok:
            raise _Declined("the draft's K/V rows are asymmetric and a resolved attention backend does not carry "
                            "v_head_dim through to the kernel")
        if any(r % ROW_ALIGN_BYTES for r in rows[name]):
            raise _Declined(f"the draft's K/V rows are {rows[name]} B, not a multiple of the {ROW_ALIGN_BYTES}-B "
                            "row alignment a fused entry part needs")


def _window_refused(launch: Launch) -> str | None:
    """``WindowHostKind.admits``: why the draft's window layers cannot ride in the target's 'swa' sub-pool."""
    draft = _draft_config(launch)
    target_window = config_window(launch.model)
    draft_window = None if draft is None else config_window(draft)
    if not isinstance(draft_window, int):
        return "the draft declares no sliding window size"
    if not isinstance(target_window, int):
        return "the target declares no sliding window size"
    if draft_window > target_window:
        return f"its window {draft_window} exceeds the target's window {target_window}"
    return None


def _place(launch: Launch, kinds: dict[str, tuple[int, LayerKind]], rows: dict[str, tuple[int, int]]) -> FusedDraft:
    """Each draft layer kind to its host sub-pool: full to 'full', window to 'swa', or folded into 'full'."""
    lanes: dict[str, int] = {}
    region: dict[str, int] = {}
    note = ""
    for name, (count, _) in kinds.items():
        host = "full" if name == "full" else "swa"
        why = _window_refused(launch) if name == "window" else None
        if why is not None:  # one region holds one row geometry: fold into 'full' only where the rows match
            if "full" in rows and rows["full"] != rows["window"]:
                raise _Declined(f"the draft's {count} sliding-window layer(s) cannot ride in the 'swa' sub-pool: "
                                f"{why}, and its rows differ from its full-attention layers' rows")
            host, note = "full", f"the draft's {count} sliding-window layer(s) ride in the 'full' sub-pool: {why}"
        lanes[host] = lanes.get(host, 0) + count
        region[host] = region.get(host, 0) + count * sum(rows[name])
    return FusedDraft(lanes, region, note)


# -- the boot split and the buffer -----------------------------------------------------------------------------


@dataclass(frozen=True)
class UnifiedCells:
    """Per-token bytes the configurator prices (``HybridSWAPoolConfigurator`` on one GPU's stage)."""

    full_per_token: int  # one full layer's K and V (``_full_per_token``)
    swa_per_token: int
    full_layers: int
    swa_layers: int
    draft_per_token: int  # a private draft pool's bytes per token (``_draft_pool_bytes_per_token``), 0 if fused
    fused: FusedDraft | None

    def _entry(self, host: str, host_bytes: int) -> int:
        """``MHASubPoolSpec.entry_bytes``: host rows, then the draft's region at a 16-B offset, rounded to 32 B."""
        if self.fused is None or host not in self.fused.lanes:
            return _ceil(host_bytes, ENTRY_ALIGN_BYTES)
        return _ceil(_ceil(host_bytes, ROW_ALIGN_BYTES) + self.fused.region_bytes[host], ENTRY_ALIGN_BYTES)

    @property
    def full_entry(self) -> int:
        return self._entry("full", self.full_per_token * self.full_layers)

    @property
    def swa_entry(self) -> int:
        return self._entry("swa", self.swa_per_token * self.swa_layers)

    @property
    def full_bytes_per_token(self) -> int:
        """``_unified_full_bytes_per_token``: the fused entry when the draft rides there, else the target's rows."""
        if self.fused is not None and "full" in self.fused.lanes:
            return self.full_entry
        return self.full_per_token * self.full_layers

    def pool_bytes(self, full: int, swa: int) -> int:
        """``_unified_pool_bytes``: the SWA side at its unaligned rows, as SGLang prices it."""
        return full * self.full_bytes_per_token + swa * self.swa_per_token * self.swa_layers


def max_full_tokens(cells: UnifiedCells, budget: int, page_size: int, ratio: float,
                    fixed_swa: int | None = None) -> int:
    """``_max_unified_full_tokens``: the most page-aligned full tokens whose allocation fits ``budget``."""
    per_token = cells.full_bytes_per_token

    def allocation(full_pages: int) -> int:
        full = full_pages * page_size
        swa = fixed_swa if fixed_swa is not None else int(full * ratio) // page_size * page_size
        target = cells.pool_bytes(full, swa)
        draft_tokens = _ceil(max(target // per_token - 1, 0), page_size) + page_size  # the virtual id span
        return target + draft_tokens * cells.draft_per_token

    pages = range(budget // per_token // page_size + 1)
    return max(bisect_right(pages, budget, key=allocation) - 1, 0) * page_size


def unified_pool(launch: Launch, cells: UnifiedCells, full: int, swa: int, budget: int | None,
                 from_budget: bool, page_size: int, context_len: int) -> UnifiedPool:
    """The buffer ``_init_unified_swa_pools`` builds for the boot split ``full`` / ``swa``, after the bs=1 floor."""
    solved = cells.pool_bytes(full, swa)
    whole = from_budget and budget is not None and launch.spec_algorithm.is_none()
    total = budget - budget % 4096 if whole and budget is not None else solved
    how = ("the whole KV budget floored to 4096 B (config_from_budget; no speculation)" if whole else
           "the boot split's bytes (unified_memory_pool_bytes)")
    entries = {"full": cells.full_entry, "swa": cells.swa_entry}
    window = config_window(launch.model)
    swa_bs1 = min(context_len, window + page_size) if isinstance(window, int) else context_len
    sink = max([max(entries.values())] + [page_size * e for e in entries.values()])
    floor = swa_bs1 * entries["swa"] + sink
    if total < floor:
        raise LaunchRefusedError(
            f"SGLang refuses this launch when it builds the pools: the unified buffer ({total} B) cannot fit one "
            f"worst-case request (bs=1 floor {floor} B = one window of SWA KV {swa_bs1 * entries['swa']} + the "
            f"slot-0 sink {sink}) ({_SRC}/unified_memory_pool.py init_unified_swa_pools); raise "
            "--mem-fraction-static or lower the context length")
    return UnifiedPool(total, entries, cells.fused, f"{_SRC}/kv_cache_configurator.py "
                       f"_init_unified_swa_pools: {how}; entries as unified_memory_pool.py MHASubPoolSpec.entry_bytes")
