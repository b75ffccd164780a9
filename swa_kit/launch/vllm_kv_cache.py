"""vLLM 0.34's KV cache for one launch: each layer's spec, the hybrid manager's switch, the groups and the pool.

Mirrors, in order:

* ``Attention.get_kv_cache_spec`` (vllm/model_executor/layers/attention/attention.py): a sliding layer gets a
  ``SlidingWindowSpec`` whose block size ``_largest_kernel_block_within`` picks from its backend's kernel block
  sizes; any other layer a ``FullAttentionSpec`` (``ChunkedLocalAttentionSpec`` for chunked layers,
  chunked_local_attention.py). KV heads per GPU are ``max(1, heads // tp)``.
* ``VllmConfig.__post_init__`` (vllm/config/vllm.py): the hybrid KV-cache manager's switch.
* ``get_kv_cache_groups`` (vllm/v1/core/kv_cache_planning.py): with the manager off, ``unify_hybrid_kv_cache_specs``
  promotes local specs to full ones (sliding layers then pay for the whole context); then one group when the
  specs merge, one ``UniformTypeKVCacheSpecs`` group when they are all of one type, else the page sizes are
  unified (``unify_kv_cache_spec_page_size``) and the layers split into equal-sized groups
  (``_get_kv_cache_groups_uniform_page_size``).
* ``get_kv_cache_config_from_groups``: every group draws block ids from one pool; a block costs the largest
  group's sum of pages (the ROCm backends' layouts are layer-outer).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from swa_kit.engine.spec_algorithms import VLLM_SPEC_METHODS
from swa_kit.errors import UsageError
from swa_kit.launch.vllm_backends import CAPS
from swa_kit.vllm_versions import VLLM_VERSION, has_fix


@dataclass(frozen=True)
class LayerSpec:
    """One layer's ``KVCacheSpec`` as vLLM builds it (the fields that size and group it)."""

    kind: str  # FullAttentionSpec, SlidingWindowSpec or ChunkedLocalAttentionSpec
    block_size: int
    num_kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    page_size_padded: int | None = None

    @property
    def unpadded_page_size_bytes(self) -> int:
        """``AttentionSpec.unpadded_page_size_bytes``: heads x tokens x (K + V) bytes."""
        return self.num_kv_heads * self.block_size * (self.head_size + self.head_size_v) * self.dtype_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.unpadded_page_size_bytes

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes


_SHAPE = ("block_size", "num_kv_heads", "head_size", "head_size_v", "dtype_bytes", "page_size_padded")


def merge_ok(specs: list[LayerSpec]) -> bool:
    """Whether ``type(specs[0]).merge(specs)`` accepts them in one group: ``KVCacheSpec.merge`` wants equal specs;
    ``FullAttentionSpec.merge`` equal shapes and at most one window or chunk size among them."""
    first = specs[0]
    if first.kind != "FullAttentionSpec":
        return all(s == first for s in specs)
    if any(s.kind != first.kind or any(getattr(s, f) != getattr(first, f) for f in _SHAPE) for s in specs):
        return False
    windows = {s.sliding_window for s in specs} - {None}
    chunks = {s.attention_chunk_size for s in specs} - {None}
    return len(windows) <= 1 and len(chunks) <= 1 and len(windows) + len(chunks) <= 1


def uniform_type(specs: list[LayerSpec]) -> bool:
    """``UniformTypeKVCacheSpecs.is_uniform_type``: one block size, one spec class, and for local specs one
    window (``SlidingWindowSpec``) or chunk size (``ChunkedLocalAttentionSpec``)."""
    return (len({s.kind for s in specs}) == 1 and len({s.block_size for s in specs}) == 1
            and (specs[0].kind == "FullAttentionSpec" or len({(s.sliding_window, s.attention_chunk_size)
                                                               for s in specs}) == 1))


def sliding_block_size(backend: str, per_token: int, block_size: int) -> int:
    """``_largest_kernel_block_within(backend, per_token, per_token * block_size, ..., divisor_of=block_size)``."""
    caps = CAPS[backend]
    if caps.multiple_of:
        candidates = [max(caps.block_sizes[0], block_size // caps.block_sizes[0] * caps.block_sizes[0])]
        extra = range(caps.block_sizes[0], block_size + 1, caps.block_sizes[0])
    else:
        candidates, extra = list(caps.block_sizes), range(0)
    fitting = [b for b in candidates if b <= block_size]
    dividing = [b for b in fitting if block_size % b == 0] + [b for b in extra if block_size % b == 0]
    if dividing:
        return max(dividing)
    return max(fitting) if fitting else min(candidates)


def hybrid_manager_disabled(flag: bool | None, chunked: bool, spec_method: str | None,
                            allow_chunked_env: bool, connector: tuple[str, bool] | None = None,
                            version: str = VLLM_VERSION) -> tuple[bool, str]:
    """The switch and the rule that set it (``VllmConfig.__post_init__``, ROCm: ``support_hybrid_kv_cache``).

    ``connector``: the ``--kv-transfer-config`` connector and whether it supports the manager
    (:meth:`~swa_kit.launch.vllm_args.VllmArgs.kv_connector_hma`); read only when the flag leaves it to vLLM.
    ``before-41847`` turns the manager off for every connector."""
    need, why = False, "no rule turns it off (ROCm supports it: RocmPlatform.support_hybrid_kv_cache)"
    if chunked and spec_method is not None and VLLM_SPEC_METHODS[spec_method]:
        need, why = True, f"chunked local attention with a drafter on target hidden states ({spec_method})"
    elif chunked and not allow_chunked_env:
        need, why = True, "chunked local attention and VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0"
    if flag is None and connector is not None and not (connector[1] and has_fix(version, 41847)):
        need, why = True, (f"--kv-transfer-config selects {connector[0]}, which does not support it "
                           "(KVConnectorFactory.supports_hma_config)" if not connector[1] else
                           f"--kv-transfer-config is set ({connector[0]}): before PR #41847 any KV connector "
                           "turned it off")
    if flag is None:
        return need, why
    if flag is False and connector is not None and not connector[1]:
        raise UsageError(f"vLLM refuses --no-disable-hybrid-kv-cache-manager with {connector[0]} at start-up "
                         "(KVConnectorFactory.create_connector: the connector 'does not support HMA but HMA is "
                         "enabled'); way out: drop the flag (vLLM then turns the manager off), or a connector that "
                         "supports it")
    if flag is False and need:
        raise UsageError("vLLM refuses --no-disable-hybrid-kv-cache-manager here at start-up (VllmConfig: 'Hybrid "
                         f"KV cache manager was explicitly enabled but is not supported'): {why}; way out: drop "
                         "the flag")
    return flag, ("--disable-hybrid-kv-cache-manager" if flag else "--no-disable-hybrid-kv-cache-manager")


def promote(specs: list[LayerSpec]) -> list[LayerSpec]:
    """``_promote_local_kv_cache_specs``: with full layers present, local specs become full-attention ones
    (keeping their window for compute) at the full layers' block size."""
    kinds = {s.kind for s in specs}
    if len(kinds) == 1 or "FullAttentionSpec" not in kinds:
        return specs
    full_sizes = {s.block_size for s in specs if s.kind == "FullAttentionSpec"}
    out = []
    for s in specs:
        if s.kind == "FullAttentionSpec":
            out.append(s)
            continue
        size = next(iter(full_sizes)) if len(full_sizes) == 1 else s.block_size
        out.append(replace(s, kind="FullAttentionSpec", block_size=size))
    return out


@dataclass(frozen=True)
class Group:
    layers: tuple[int, ...]  # layer ids (a short last group stands for vLLM's "padding" layers)
    specs: tuple[LayerSpec, ...]  # the spec of each real layer, in order

    @property
    def kind(self) -> str:
        kinds = {s.kind for s in self.specs}
        return kinds.pop() if len(kinds) == 1 else "UniformTypeKVCacheSpecs"

    @property
    def bytes_per_block(self) -> int:
        return sum(s.page_size_bytes for s in self.specs)


def unify_page_sizes(specs: list[LayerSpec]) -> list[LayerSpec]:
    """``unify_kv_cache_spec_page_size``: smaller pages grow their block size by an integer ratio, else pad."""
    largest = max(s.page_size_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_size_bytes == largest:
            out.append(s)
        elif largest % s.page_size_bytes == 0:
            out.append(replace(s, block_size=s.block_size * (largest // s.page_size_bytes)))
        else:
            out.append(replace(s, page_size_padded=largest))
    return out


def _buckets(specs: list[LayerSpec]) -> list[list[int]]:
    """Equal specs together, then buckets whose specs merge (``_get_kv_cache_groups_uniform_page_size``)."""
    same: dict[LayerSpec, list[int]] = {}
    for i, s in enumerate(specs):
        same.setdefault(s, []).append(i)
    buckets: list[tuple[list[int], list[LayerSpec]]] = []
    for spec, ids in same.items():
        for names, members in buckets:
            if merge_ok([*members, spec]):
                names.extend(ids)
                members.append(spec)
                break
        else:
            buckets.append((list(ids), [spec]))
    return [ids for ids, _ in buckets]


def _split(buckets: list[list[int]]) -> list[list[int]]:
    """Equal group sizes: the smallest bucket's size, or the largest when it is under 1.5x the smallest."""
    smallest, largest = min(map(len, buckets)), max(map(len, buckets))
    size = largest if largest < smallest * 1.5 else smallest
    out = []
    for ids in buckets:
        count = -(-len(ids) // size)
        out += [ids[i::count] for i in range(count)]
    return out


@dataclass(frozen=True)
class KvCachePlan:
    specs: tuple[LayerSpec, ...]  # per layer, after promotion and page unification
    groups: tuple[Group, ...]
    hybrid_disabled: bool
    hybrid_rule: str
    how_grouped: str
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes_per_block(self) -> int:
        """``_get_kv_cache_bytes_per_block`` (layer-outer layouts): the largest group's sum of pages."""
        return max(g.bytes_per_block for g in self.groups)

    def num_blocks(self, available_bytes: int) -> int:
        return available_bytes // self.bytes_per_block


def group_layers(specs: list[LayerSpec], hybrid_disabled: bool) -> tuple[list[LayerSpec], list[Group], str]:
    """``get_kv_cache_groups`` for dense attention specs: the final specs, the groups and which branch made them."""
    if hybrid_disabled:
        specs = promote(specs)
    if merge_ok(specs):
        return specs, [Group(tuple(range(len(specs))), tuple(specs))], "uniform spec: one group"
    if uniform_type(specs):
        return specs, [Group(tuple(range(len(specs))), tuple(specs))], "uniform type: one UniformTypeKVCacheSpecs group"
    specs = unify_page_sizes(specs)
    groups = [Group(tuple(ids), tuple(specs[i] for i in ids)) for ids in _split(_buckets(specs))]
    return specs, groups, "uniform page size: groups of equal layer count"
