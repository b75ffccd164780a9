"""The kit's drafter placement and admission gate against vLLM 0.34's own code, on this CPU.

vLLM's side, per launch:

* the groups: vLLM's ``get_kv_cache_groups`` on the target's and the drafter's layer specs, built as vLLM's spec
  classes (``FullAttentionSpec``, ``SlidingWindowSpec``) from the shapes the kit gives each layer (the shapes
  themselves are checked in test_differential_vllm.py), drafter specs marked ``is_draft`` as ``get_kv_cache_spec``
  marks them, drafter layers registered after the target's;
* Gemma-4's aliases: vLLM's ``Gemma4Speculator._setup_gemma4_kv_sharing`` run on stand-in layer objects, then
  ``add_kv_sharing_layers_to_kv_cache_groups`` to join each alias to its target's group;
* admission: vLLM's ``SingleTypeKVCacheManager`` for each group, built by ``get_manager_for_kv_cache_spec`` on a
  ``BlockPool`` of the kit's pool size, asked ``get_num_blocks_to_allocate(..., apply_admission_cap=True)`` as
  ``allocate_slots(full_sequence_must_fit=True)`` asks it. ``before-55800`` is vLLM's own manager built without
  the cap (``max_admission_blocks_per_request=None``) for the drafter's groups.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_support import import_rocm_platform, require_vllm

pytestmark = pytest.mark.vllm

require_vllm("vllm")
import_rocm_platform()  # vLLM's own ROCm platform module, as on an MI300X (gfx942, CDNA 3)

(torch, kv, planning, managers, block_pool, worker_utils, torch_utils, gemma4_speculator, backend_utils, rocm_attn,
 rocm_aiter_fa, rocm_aiter_unified, triton_attn) = require_vllm(
    "torch", "vllm.v1.kv_cache_interface", "vllm.v1.core.kv_cache_planning",
    "vllm.v1.core.single_type_kv_cache_manager", "vllm.v1.core.block_pool", "vllm.v1.worker.utils",
    "vllm.utils.torch_utils", "vllm.v1.worker.gpu.spec_decode.gemma4.speculator", "vllm.v1.attention.backends.utils",
    "vllm.v1.attention.backends.rocm_attn", "vllm.v1.attention.backends.rocm_aiter_fa",
    "vllm.v1.attention.backends.rocm_aiter_unified_attn", "vllm.v1.attention.backends.triton_attn")

from swa_kit.errors import UsageError  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.launch.vllm_backends import DEFAULT_BLOCK_SIZE, block_size, select  # noqa: E402
from swa_kit.launch.vllm_drafter import read_drafter  # noqa: E402
from swa_kit.launch.vllm_plan import _query, drafter_backend, layer_specs, plan  # noqa: E402
from swa_kit.launch.vllm_args import vllm_env  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402

managers.register_all_kvcache_specs(SimpleNamespace())
BACKENDS = {"ROCM_ATTN": rocm_attn.RocmAttentionBackend, "ROCM_AITER_FA": rocm_aiter_fa.AiterFlashAttentionBackend,
            "ROCM_AITER_UNIFIED_ATTN": rocm_aiter_unified.RocmAiterUnifiedAttentionBackend,
            "TRITON_ATTN": triton_attn.TritonAttentionBackend}
DATA = Path(__file__).parent / "data" / "differential"
SPEC = {"eagle3": '{"method": "eagle3", "model": "drafter", "num_speculative_tokens": 3}',
        "dflash": '{"method": "dflash", "model": "drafter", "num_speculative_tokens": 7}',
        "mtp": '{"method": "mtp", "model": "drafter", "num_speculative_tokens": 1}'}
#: (target, drafter config, method): drafters that share the target's groups, span several, or own their own.
PAIRS = (("gpt-oss-20b", "draft-gpt-oss-2l", "dflash"), ("gpt-oss-120b", "draft-gpt-oss-2l", "eagle3"),
         ("gpt-oss-20b", "draft-llama-2l", "eagle3"), ("gemma3-27b", "draft-gemma3-3l", "dflash"),
         ("gemma3-27b", "draft-llama-2l", "eagle3"), ("gemma4-31b", "draft-gemma4-assistant-4l", "mtp"),
         ("gemma4-31b", "draft-gemma3-3l", "dflash"), ("gpt-oss-20b", "draft-dflash-3l", "dflash"))
FLAGS = ("", "--disable-hybrid-kv-cache-manager", "-tp 2", "--kv-cache-dtype fp8", "--block-size 16",
         "--attention-backend TRITON_ATTN")
LAUNCHES = [(t, d, m, f) for t, d, m in PAIRS for f in FLAGS]
VERSIONS = ("0.34.0", "before-50169", "before-55800")


def _drafter(name: str):
    return read_drafter(json.loads((DATA / f"{name}.json").read_text()), name)


def _launch(target: str, drafter: str, method: str, flags: str, version: str = "0.34.0", **extra):
    args = parse_vllm_flags(f"--speculative-config {shlex.quote(SPEC[method])} {flags}")
    return args, plan(load_model(target), args, {}, vllm_version=version, drafter=_drafter(drafter), **extra)


def _vllm_spec(spec, dtype, is_draft: bool):
    common = dict(block_size=spec.block_size, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                  head_size_v=spec.head_size_v, dtype=dtype, is_draft=is_draft)
    if spec.kind == "SlidingWindowSpec":
        return kv.SlidingWindowSpec(sliding_window=spec.sliding_window, **common)
    assert spec.kind == "FullAttentionSpec", spec.kind
    return kv.FullAttentionSpec(**common)


def _unplaced_specs(model, draft_layout, args):
    """The kit's per-layer specs before grouping (target then drafter), as ``plan`` builds them, and the backends."""
    flags = vllm_env({})
    query = args.block_size or DEFAULT_BLOCK_SIZE
    sel = {n: select(_query(model, k, query), flags, args.attention_backend) for n, k in model.kinds.items()}
    block = block_size([s.backend for s in sel.values()], args.block_size)
    target = layer_specs(model, args, sel, block)
    backends = {s.backend for s in sel.values()}
    if draft_layout is None:
        return target, [], backends
    named, how = drafter_backend(args, args.attention_backend, "--attention-backend")  # held to vLLM below
    dsel = {n: select(_query(draft_layout, k, block), flags, named, how) for n, k in draft_layout.kinds.items()}
    return target, layer_specs(draft_layout, args, dsel, block), backends | {s.backend for s in dsel.values()}


def _config(disabled: bool, backends: set[str], specs) -> SimpleNamespace:
    """The config ``get_kv_cache_groups`` reads, its layout resolved by vLLM from the backends' declared layouts."""
    config = SimpleNamespace(scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=disabled),
                             attention_config=SimpleNamespace(hisparse_config=None),
                             cache_config=SimpleNamespace(kv_cache_layout=None, enable_extensible_kv_cache=True),
                             kv_transfer_config=None, parallel_config=SimpleNamespace(decode_context_parallel_size=1))
    declared = [[layout.name for layout in BACKENDS[b].supported_kv_cache_layouts()]
                for b in sorted(backends) if BACKENDS[b].supported_kv_cache_layouts()]
    layout = backend_utils.resolve_kv_cache_layout(config, declared or [["LBHNC"]], specs)
    config.cache_config = SimpleNamespace(kv_cache_layout=layout.name, get_resolved_kv_cache_layout=lambda: layout)
    return config


def _gemma4_aliases(model, drafter, names: list[str]) -> dict[str, str]:
    """vLLM's ``_setup_gemma4_kv_sharing`` on stand-in drafter layers: drafter layer name -> target layer name."""
    text = dict(model.hf_config.get("text_config", model.hf_config))
    target_types = [f"{model.kinds[t].attention}_attention" for t in model.layer_types]
    target_text = SimpleNamespace(**{**text, "layer_types": target_types})
    raw = json.loads((DATA / "draft-gemma4-assistant-4l.json").read_text())["text_config"]
    draft_text = SimpleNamespace(**raw)
    layers = [SimpleNamespace(self_attn=SimpleNamespace(attn=SimpleNamespace(kv_sharing_target_layer_name=None)))
              for _ in drafter.layout.layer_types]
    me = SimpleNamespace(
        speculative_config=SimpleNamespace(draft_model_config=SimpleNamespace(
            hf_config=SimpleNamespace(get_text_config=lambda: draft_text))),
        vllm_config=SimpleNamespace(model_config=SimpleNamespace(
            hf_config=SimpleNamespace(get_text_config=lambda: target_text)),
            compilation_config=SimpleNamespace(static_forward_context={n: None for n in names})))
    saved = gemma4_speculator._copy_target_kv_scales
    gemma4_speculator._copy_target_kv_scales = lambda attn, target: None  # scales: nothing here to copy
    try:
        gemma4_speculator.Gemma4Speculator._setup_gemma4_kv_sharing(
            me, SimpleNamespace(model=SimpleNamespace(layers=layers)), set(names))
    finally:
        gemma4_speculator._copy_target_kv_scales = saved
    return {f"draft.layers.{i}.self_attn.attn": layer.self_attn.attn.kv_sharing_target_layer_name
            for i, layer in enumerate(layers)}


def _vllm_groups(model, drafter, args, disabled: bool):
    """vLLM's groups for the launch's target and drafter layers, with Gemma-4's aliases joined in."""
    target, draft, backends = _unplaced_specs(model, None if drafter.kv_shared else drafter.layout, args)
    dtype = torch_utils.STR_DTYPE_TO_TORCH_DTYPE.get(args.kv_cache_dtype, getattr(torch, model.dtype))
    names = [f"model.layers.{i}.self_attn.attn" for i in range(len(target))]
    specs = {n: _vllm_spec(s, dtype, False) for n, s in zip(names, target)}
    specs |= {f"draft.layers.{i}.self_attn.attn": _vllm_spec(s, dtype, True) for i, s in enumerate(draft)}
    groups = planning.get_kv_cache_groups(_config(disabled, backends, specs.values()), specs)
    if drafter.kv_shared:
        worker_utils.add_kv_sharing_layers_to_kv_cache_groups(_gemma4_aliases(model, drafter, names), groups)
    return groups


def _kit_id(name: str, p) -> int | None:
    """The kit's layer id for a vLLM layer name (drafter layers after the target's; None for an alias)."""
    index = int(name.split(".")[2])
    if not name.startswith("draft"):
        return index
    return None if p.drafter.layers[index].layer_id is None else p.model.num_layers + index


def _group_of(groups) -> dict[str, int]:
    return {name: g for g, group in enumerate(groups) for name in group.layer_names}


@pytest.mark.parametrize(("target", "drafter", "method", "flags"), LAUNCHES,
                         ids=[f"{t}+{d}|{m}|{f or 'defaults'}" for t, d, m, f in LAUNCHES])
def test_drafter_layers_land_where_vllm_puts_them(target: str, drafter: str, method: str, flags: str) -> None:
    try:
        args, p = _launch(target, drafter, method, flags)
    except UsageError as error:  # a launch vLLM refuses: its backend validation, checked in the differential
        pytest.skip(f"the kit refuses this launch: {error}")
    assert p.drafter is not None
    groups = _vllm_groups(p.model, _drafter(drafter), args, p.kv.hybrid_disabled)
    where = _group_of(groups)
    # Every group as vLLM makes it, drafter layers that own KV among them (aliases own none: the kit's groups list
    # the layers that own pages).
    assert [sorted(i for n in g.layer_names if (i := _kit_id(n, p)) is not None) for g in groups] \
        == [sorted(g.layers) for g in p.kv.groups]
    for layer in p.drafter.layers:
        name = f"draft.layers.{layer.index}.self_attn.attn"
        assert where[name] == layer.group, f"drafter layer {layer.index}: kit {layer.group}, vLLM {where[name]}"
        spec = planning._get_per_layer_spec(groups[where[name]], name) if layer.layer_id is not None else None
        if spec is not None:
            assert (type(spec).__name__, spec.block_size) == (layer.spec, layer.block_size)
        if layer.shares_kv_with is not None:
            alias = _gemma4_aliases(p.model, _drafter(drafter), [f"model.layers.{i}.self_attn.attn"
                                                                  for i in range(p.model.num_layers)])[name]
            assert alias == f"model.layers.{layer.shares_kv_with}.self_attn.attn"
    shared = sorted(g for g, group in enumerate(groups) if any(n.startswith("model") for n in group.layer_names)
                    and any(n.startswith("draft") for n in group.layer_names))
    assert list(p.drafter.groups_shared_with_target) == shared


def _vllm_charges(p, drafter, tokens: int) -> list[int]:
    """vLLM's managers, one per group, asked what a cold request of ``tokens`` needs at admission."""
    gate = p.admission
    groups = _vllm_groups(p.model, drafter, p.args, p.kv.hybrid_disabled)
    pool = block_pool.BlockPool(gate.pool_blocks, False, groups[0].kv_cache_spec.block_size)
    charges = []
    for g, group in enumerate(groups):
        manager = managers.get_manager_for_kv_cache_spec(
            group.kv_cache_spec, gate.max_in_flight_tokens, gate.max_model_len, block_pool=pool,
            enable_caching=False, kv_cache_group_id=g, scheduler_block_size=group.kv_cache_spec.block_size)
        tokens = min(tokens, gate.max_model_len)
        charges.append(manager.get_num_blocks_to_allocate("r", tokens, [], 0, 0, tokens, apply_admission_cap=True))
    return charges


def _vllm_startup_blocks(p, drafter, window_only: frozenset[int]) -> int:
    """``_max_memory_usage_bytes_from_groups`` / bytes per block: each group's ``max_memory_usage_bytes`` in pages;
    a group in ``window_only`` sized by its spec's own cap with no in-flight tokens (the before-55800 drift)."""
    gate = p.admission
    config = SimpleNamespace(max_in_flight_tokens=gate.max_in_flight_tokens,
                             model_config=SimpleNamespace(max_model_len=gate.max_model_len),
                             parallel_config=SimpleNamespace(decode_context_parallel_size=1))
    total = 0
    for g, group in enumerate(_vllm_groups(p.model, drafter, p.args, p.kv.hybrid_disabled)):
        spec = group.kv_cache_spec
        if g in window_only and isinstance(spec, kv.SlidingWindowSpec):
            total += spec.max_admission_blocks_per_request(0, gate.max_model_len)
        else:
            total += -(-spec.max_memory_usage_bytes(config) // spec.page_size_bytes)
    return total


ADMISSIONS = [(t, d, m, f, v) for t, d, m in PAIRS[:5] for f in ("", "--max-model-len 65536 --max-num-batched-tokens "
                                                                   "4096 --no-async-scheduling") for v in VERSIONS]


@pytest.mark.parametrize(("target", "drafter", "method", "flags", "version"), ADMISSIONS,
                         ids=[f"{t}+{d}|{m}|{f or 'defaults'}|{v}" for t, d, m, f, v in ADMISSIONS])
def test_admission_charges_what_vllm_managers_charge(target, drafter, method, flags, version) -> None:
    args, p = _launch(target, drafter, method, f"{flags} --gpu-memory-utilization 0.02", version)
    gate, config = p.admission, _drafter(drafter)
    assert gate is not None
    for tokens in (1, 127, 128, 129, 4096, 33000, gate.largest_prompt, gate.largest_prompt + 1, gate.max_model_len):
        assert [c.blocks for c in gate.charges(tokens)] == _vllm_charges(p, config, tokens), f"{tokens} tokens"
    # The longest prompt admitted: vLLM's charge fits the pool there, and not one token later.
    longest = gate.largest_prompt
    assert sum(_vllm_charges(p, config, longest)) <= gate.pool_blocks
    if longest < gate.max_model_len:
        assert sum(_vllm_charges(p, config, longest + 1)) > gate.pool_blocks
    assert gate.startup_blocks == _vllm_startup_blocks(p, config, gate.sized_for_window)
    if version == "0.34.0":  # one rule: a launch that starts admits max_model_len
        assert gate.startup_blocks == sum(_vllm_charges(p, config, gate.max_model_len))


def test_launches_reach_every_placement_and_both_admission_outcomes() -> None:
    """The pairs reach what the kit models: a drafter sharing the target's groups, one in groups of its own, one
    spread over several groups, Gemma-4's aliases, and pools that admit max_model_len or stop short of it."""
    seen = set()
    for target, drafter, method, flags in LAUNCHES:
        try:
            _, p = _launch(target, drafter, method, flags)
        except UsageError:
            continue
        d = p.drafter
        seen |= {"aliases"} if any(layer.shares_kv_with is not None for layer in d.layers) else set()
        seen |= {"shared"} if d.groups_shared_with_target else set()
        seen |= {"own group"} if set(d.groups) - set(d.groups_shared_with_target) else set()
        seen |= {"several groups"} if len(d.groups) > 1 else set()
    assert seen == {"aliases", "shared", "own group", "several groups"}
    short = [p.admission.largest_prompt < p.admission.max_model_len
             for t, d, m, f, v in ADMISSIONS if v == "0.34.0"
             for _, p in [_launch(t, d, m, f"{f} --gpu-memory-utilization 0.02", v)]]
    assert any(short) and not all(short)


@pytest.mark.parametrize("name", ["gemma3-27b", "gemma4-31b", "gpt-oss-20b", "gpt-oss-120b", "llama4-scout"])
def test_max_model_len_is_vllms_derived_length(name: str) -> None:
    """``_get_and_verify_max_len`` on the config transformers builds (defaults and all), against the kit's reading."""
    import transformers

    from swa_kit.launch.vllm_plan import derived_max_model_len

    arch = require_vllm("vllm.transformers_utils.model_arch_config_convertor")[0]
    model_config = require_vllm("vllm.config.model")[0]
    raw = dict(load_model(name).hf_config)
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    text = config.get_text_config()
    derived = arch.ModelArchConfigConvertorBase(config, text).derive_max_model_len_and_key()
    theirs = model_config._get_and_verify_max_len(text, SimpleNamespace(derived_max_model_len_and_key=derived), None,
                                                  None, False, None)
    assert derived_max_model_len(load_model(name))[0] == theirs


DFLASH_CONFIGS = [
    {"num_hidden_layers": 3, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
     "sliding_window": 128},
    {"num_hidden_layers": 2, "dflash_config": {"use_swa": True, "swa_window_size": 2048}},
    {"num_hidden_layers": 2, "dflash_config": {"use_swa": False}, "sliding_window": 4096},
    {"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2, "dflash_config": {"use_swa": True},
     "sliding_window": 512},
    {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64,
     "dflash_config": {"use_swa": True, "swa_window_size": 256}},
    {"num_hidden_layers": 1, "dflash_config": {"use_swa": True}},
]


@pytest.mark.parametrize("config", DFLASH_CONFIGS, ids=range(len(DFLASH_CONFIGS)))
def test_dflash_windows_are_vllms(config) -> None:
    from swa_kit.launch.vllm_drafter import dflash_windows

    qwen3_dflash = require_vllm("vllm.model_executor.models.qwen3_dflash")[0]
    ns = SimpleNamespace(**{"layer_types": None, "dflash_config": None, "sliding_window": None, **config})
    try:
        theirs = [qwen3_dflash._resolve_layer_attention(ns, i)[0] for i in range(config["num_hidden_layers"])]
    except ValueError as error:
        with pytest.raises(UsageError, match="window"):
            dflash_windows(config, "d.json")
        assert "window size" in str(error)
        return
    assert dflash_windows(config, "d.json") == theirs


def test_dflash_classes_and_their_per_layer_mapping_are_vllms() -> None:
    """vLLM's registry maps each DFlash architecture the kit names to the class whose source declares (or not)
    ``get_draft_kv_cache_layer_names``."""
    import ast
    import importlib.util

    from swa_kit.launch.vllm_drafter import DFLASH_ARCHITECTURES

    registry = require_vllm("vllm.model_executor.models.registry")[0]
    for architecture, declares in DFLASH_ARCHITECTURES.items():
        module, cls = registry._SPECULATIVE_DECODING_MODELS[architecture]
        spec = importlib.util.find_spec(f"vllm.model_executor.models.{module}")
        tree = ast.parse(Path(spec.origin).read_text())
        [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
        methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        assert ("get_draft_kv_cache_layer_names" in methods) == declares, architecture


@pytest.mark.parametrize("target", [None, "ROCM_ATTN", "TRITON_ATTN"])
@pytest.mark.parametrize("draft", [None, "auto", "triton_attn", "ROCM_AITER_UNIFIED_ATTN"])
def test_the_drafter_keeps_or_overrides_the_targets_backend_as_vllm_does(target, draft) -> None:
    """``SpeculativeConfig.apply_draft_overrides`` on the target's attention config."""
    import dataclasses
    from typing import Any

    speculative = require_vllm("vllm.config.speculative")[0]

    @dataclasses.dataclass
    class AttentionConfig:
        backend: Any = None

    @dataclasses.dataclass
    class Config:
        attention_config: Any = None

    theirs = speculative.SpeculativeConfig.apply_draft_overrides(
        SimpleNamespace(attention_backend=speculative.SpeculativeConfig._parse_attention_backend(draft),
                        moe_backend=None, kv_cache_dtype=None), Config(AttentionConfig(target))).attention_config
    spec = {"method": "eagle3", "num_speculative_tokens": 3, **({} if draft is None else {"attention_backend": draft})}
    args = parse_vllm_flags(f"--speculative-config {shlex.quote(json.dumps(spec))}")
    name = getattr(theirs.backend, "name", theirs.backend)
    assert drafter_backend(args, target, "--attention-backend")[0] == name
