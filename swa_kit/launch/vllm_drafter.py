"""Where vLLM 0.34 puts a drafter's layers: their KV-cache groups, Gemma-4's KV-sharing aliases, and the block table
each layer's KV writes go through.

Mirrors, in order:

* ``Speculator.load_model`` (vllm/v1/worker/gpu/spec_decode/speculator.py): the drafter's attention layers are the
  ones registered after the target's, marked ``is_draft_layer``; ``get_kv_cache_spec`` (vllm/v1/worker/gpu/
  attn_utils.py) builds their specs as it builds the target's and sets ``is_draft``, which ``KVCacheSpec`` leaves
  out of equality ("never affects grouping"). So ``get_kv_cache_groups`` groups drafter and target layers by spec
  alone, drafter layers last (vllm/v1/core/kv_cache_planning.py).
* A layer with ``kv_sharing_target_layer_name`` owns no spec (``get_kv_cache_spec`` skips it), and
  ``add_kv_sharing_layers_to_kv_cache_groups`` (vllm/v1/worker/utils.py) appends it to its target layer's group.
  Gemma-4's MTP drafter (a ``gemma4_assistant`` config, rewritten to ``gemma4_mtp`` by ``SpeculativeConfig``) is
  Q-only: ``Gemma4Speculator._setup_gemma4_kv_sharing`` (spec_decode/gemma4/speculator.py) aliases each drafter
  layer to the last non-KV-shared target layer of its type.
* Where the KV writes go. EAGLE, EAGLE3 and MTP drafter layers write through attention, with the slot mapping of
  their own group (``build_slot_mappings_by_layer``). DFlash also writes the context KV outside attention
  (``DFlashSpeculator._precompute_context_kv``, spec_decode/dflash/speculator.py): per layer through its own
  group's slot mapping when the drafter model declares ``get_draft_kv_cache_layer_names`` (qwen3_dflash.py does;
  laguna_dflash.py does not), else every layer through the first drafter group's. ``before-50169`` undoes that
  per-layer mapping (:mod:`swa_kit.vllm_versions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swa_kit.engine.spec_algorithms import VLLM_CONTEXT_KV_WRITERS, VLLM_NO_DRAFT_MODEL
from swa_kit.errors import UsageError
from swa_kit.launch.vllm_kv_cache import Group
from swa_kit.models.configs import ModelLayout, parse_hf_config
from swa_kit.vllm_versions import has_fix

NO_DRAFT_MODEL = VLLM_NO_DRAFT_MODEL
#: Drafter configs vLLM rewrites to its Gemma-4 MTP model (``SpeculativeConfig``: ``gemma4_assistant`` ->
#: ``gemma4_mtp``; every decoder layer Q-only, reading the target's KV).
GEMMA4_ASSISTANTS = ("gemma4_assistant", "gemma4_unified_assistant")
#: vLLM's DFlash drafter classes by config architecture (vllm/model_executor/models/registry.py), and whether the
#: class declares ``get_draft_kv_cache_layer_names`` (the per-layer context slot mapping).
DFLASH_ARCHITECTURES = {"DFlashDraftModel": True, "DFlashLagunaForCausalLM": False}
_DFLASH_PER_LAYER = ("DFlashSpeculator._precompute_context_kv: the drafter declares get_draft_kv_cache_layer_names "
                     "(qwen3_dflash.py), so each layer's context KV goes through its own group's slot mapping")


@dataclass(frozen=True)
class Drafter:
    """The drafter's own config, as vLLM reads it (``--draft-hf-config``: what the speculative config's ``model``
    points at)."""

    layout: ModelLayout
    kv_shared: bool  # Gemma-4's assistant: every layer reads the target's KV
    origin: str
    per_layer_writes: bool = True  # its class declares get_draft_kv_cache_layer_names (DFlash's context writes)


def dflash_windows(raw: dict[str, Any], where: str) -> list[int | None]:
    """``_resolve_layer_attention`` (vllm/model_executor/models/qwen3_dflash.py): each DFlash layer's window, from
    ``dflash_config.use_swa`` / ``swa_window_size``, ``layer_types`` and ``sliding_window``."""
    extra = raw.get("dflash_config") or {}
    types = raw.get("layer_types")
    count = raw.get("num_hidden_layers")
    if not isinstance(count, int) or count < 1 or (types is not None and len(types) != count):
        raise UsageError(f"{where}: num_hidden_layers {count!r} must be a positive count matching layer_types")
    use_swa = bool(extra.get("use_swa", False))
    any_sliding = types is not None and "sliding_attention" in types
    windows: list[int | None] = []
    for i in range(count):
        sliding = use_swa if types is None or (use_swa and not any_sliding) else types[i] == "sliding_attention"
        window = extra.get("swa_window_size", raw.get("sliding_window")) if sliding else None
        if sliding and not (isinstance(window, int) and window > 0):
            raise UsageError(f"{where}: DFlash sliding attention needs a window (dflash_config.swa_window_size or "
                             "sliding_window); vLLM refuses the drafter at start-up")
        windows.append(window)
    return windows


def _dflash_layout(raw: dict[str, Any], where: str) -> ModelLayout:
    """A DFlash drafter's layers as a layout: its windows resolved as vLLM resolves them, its heads as its config
    gives them (read through Gemma-3's text config, which carries per-layer types and one window)."""
    windows = dflash_windows(raw, where)
    heads = raw.get("num_attention_heads")
    shape: dict[str, Any] = {k: raw[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim",
                                                 "hidden_size", "dtype", "torch_dtype", "max_position_embeddings")
                             if k in raw}
    if "head_dim" not in shape and isinstance(heads, int) and isinstance(raw.get("hidden_size"), int):
        shape["head_dim"] = raw["hidden_size"] // heads  # Qwen3Config's default
    # One value serves every sliding layer; with none, Gemma-3's config still wants a window no layer reads.
    window = next((w for w in windows if w is not None), 4096)
    stand_in: dict[str, Any] = {
        **shape, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "num_hidden_layers": len(windows), "sliding_window": window,
        "layer_types": ["full_attention" if w is None else "sliding_attention" for w in windows]}
    return parse_hf_config(stand_in, where=where, name="dflash-drafter")


def read_drafter(raw: Any, where: str) -> Drafter:
    """The drafter's layout from its ``config.json`` fields; a Gemma-4 assistant reads through its text config, as
    vLLM's ``SpeculativeConfig`` rewrites it to ``Gemma4MTPModel``."""
    if isinstance(raw, dict) and raw.get("model_type") in GEMMA4_ASSISTANTS:
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise UsageError(f"{where}: a {raw['model_type']} config holds its layers under text_config; none here")
        layout = parse_hf_config({**text, "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text"},
                                 where=f"{where} text_config", name="gemma4-assistant")
        return Drafter(layout, True, f"{where}: {raw['model_type']} (vLLM's Gemma4MTPModel: every layer Q-only)")
    architecture = (raw.get("architectures") or [None])[0] if isinstance(raw, dict) else None
    if architecture in DFLASH_ARCHITECTURES:
        return Drafter(_dflash_layout(raw, where), False, f"{where} ({architecture}: windows by _resolve_layer_"
                       "attention)", DFLASH_ARCHITECTURES[architecture])
    layout = parse_hf_config(raw, where=where, name="drafter")
    return Drafter(layout, False, f"{where} ({layout.architecture})")


@dataclass(frozen=True)
class DrafterLayer:
    """One drafter layer: its kind, the group it lands in, whose KV it holds or reads, and where its KV writes go."""

    index: int  # the drafter's own layer index
    attention: str  # full | sliding | chunked
    window: int | None  # keys (W) of a sliding layer
    layer_id: int | None  # its place among the launch's KV layers (target layers first); None: it owns no KV
    shares_kv_with: int | None  # the target layer whose cache it reads (kv_sharing_target_layer_name)
    group: int
    writes_group: int | None  # the group whose block table its KV writes resolve through; None: it writes none
    spec: str  # its spec class, or "none (reads layer N's)"
    block_size: int

    @property
    def misrouted(self) -> bool:
        """Its KV writes go through another group's block table than its own group's."""
        return self.writes_group is not None and self.writes_group != self.group


@dataclass(frozen=True)
class DrafterPlan:
    method: str
    origin: str
    layers: tuple[DrafterLayer, ...]
    writes: str  # how the drafter's KV writes pick their slot mapping, and the source
    groups_shared_with_target: tuple[int, ...]  # drafter groups that also hold target layers

    @property
    def groups(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(layer.group for layer in self.layers))


def gemma4_aliases(target: ModelLayout, drafter: ModelLayout) -> list[int]:
    """``_setup_gemma4_kv_sharing``: per drafter layer, the last non-KV-shared target layer of its type."""
    text = target.hf_config.get("text_config", target.hf_config)
    shared = int(text.get("num_kv_shared_layers") or 0)
    owners = target.layer_types[:target.num_layers - shared]
    aliases = []
    for index, name in enumerate(drafter.layer_types):
        attention = drafter.kinds[name].attention
        candidates = [i for i, t in enumerate(owners) if target.kinds[t].attention == attention]
        if not candidates:  # vLLM logs a warning and leaves the layer without a cache to read
            raise UsageError(f"drafter layer {index} is {attention} attention, and the target has no {attention} "
                             "layer that owns KV: vLLM leaves it unshared with nothing writing its cache "
                             "(Gemma4Speculator._setup_gemma4_kv_sharing), which the kit does not model")
        aliases.append(candidates[-1])
    return aliases


def _writes(method: str, version: str, declares: bool) -> tuple[bool, str]:
    """Whether each layer's KV writes use its own group's slot mapping, and the source that says so."""
    if method in VLLM_CONTEXT_KV_WRITERS:
        if not declares:
            return False, ("DFlashSpeculator._precompute_context_kv: the drafter class declares no "
                           "get_draft_kv_cache_layer_names (laguna_dflash.py), so every layer's context KV goes "
                           "through the first drafter group's slot mapping")
        if has_fix(version, 50169):
            return True, _DFLASH_PER_LAYER
        return False, ("DFlashSpeculator._precompute_context_kv without the per-layer mapping (before-50169): "
                       "every layer's context KV goes through the first drafter group's slot mapping")
    return True, "attention writes each layer's KV with its own group's slot mapping (build_slot_mappings_by_layer)"


def place(method: str, drafter: Drafter, target: ModelLayout, groups: list[Group], version: str) -> DrafterPlan:
    """The drafter's layers in the launch's groups (drafter layers owning KV are ids ``target.num_layers`` on)."""
    group_of = {layer: g for g, group in enumerate(groups) for layer in group.layers}
    spec_of = {layer: spec for group in groups for layer, spec in zip(group.layers, group.specs)}
    aliases = gemma4_aliases(target, drafter.layout) if drafter.kv_shared else None
    per_layer, writes = _writes(method, version, drafter.per_layer_writes)
    own = [target.num_layers + i for i in range(drafter.layout.num_layers)]
    first = min((group_of[i] for i in own), default=None) if aliases is None else None
    layers = []
    for index, name in enumerate(drafter.layout.layer_types):
        kind = drafter.layout.kinds[name]
        window = kind.window.keys if kind.attention == "sliding" else None
        if aliases is not None:
            target_layer = aliases[index]
            group = group_of[target_layer]
            layers.append(DrafterLayer(index, kind.attention, window, None, target_layer, group, None,
                                       f"none (reads layer {target_layer}'s)", spec_of[target_layer].block_size))
            continue
        layer_id = own[index]
        group = group_of[layer_id]
        layers.append(DrafterLayer(index, kind.attention, window, layer_id, None, group,
                                   group if per_layer else first, spec_of[layer_id].kind,
                                   spec_of[layer_id].block_size))
    if aliases is not None:
        writes = "none: every layer reads its target layer's KV (kv_sharing_target_layer_name)"
    drafter_groups = {layer.group for layer in layers}
    shared = tuple(sorted(g for g in drafter_groups if any(i < target.num_layers for i in groups[g].layers)))
    return DrafterPlan(method, drafter.origin, tuple(layers), writes, shared)


def owned_layouts(drafter: Drafter | None) -> ModelLayout | None:
    """The drafter layers that own KV (None when it owns none): their specs join the target's before grouping."""
    return None if drafter is None or drafter.kv_shared else drafter.layout


def read_drafter_file(path: str | Path) -> Drafter:
    """``--draft-hf-config``: the drafter's ``config.json`` (or a directory holding one), read bounded."""
    from swa_kit.files import parse_json, read_text
    from swa_kit.models.configs import MAX_CONFIG_BYTES

    file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    return read_drafter(parse_json(read_text(file, "--draft-hf-config", MAX_CONFIG_BYTES),
                                   f"--draft-hf-config {file}"), str(file))
