"""The kit's model of vLLM 0.34 on ROCm against vLLM's own code, launch by launch (bundled models x flags x env).

vLLM's side, per launch, on this CPU:

* the flags, parsed by vLLM's own parser (``EngineArgs.add_cli_args`` on a ``FlexibleArgumentParser``);
* the backend of each layer kind: every backend class's own ``validate_configuration`` (its rejection reasons), taken
  in the order of ``vllm/platforms/rocm.py``'s own ``_get_backend_priorities``, with the aiter switches answered by
  vLLM's ``rocm_aiter_ops``. The module reads the GPU's architecture at import; ``import_rocm_platform`` answers
  that one query as an MI300X does (gfx942), and the fact that aiter is installed is answered below;
* the block size from the backends' own ``get_preferred_block_size`` / ``supports_block_size``;
* each layer's spec built as ``Attention.get_kv_cache_spec`` builds it, with vLLM's ``SlidingWindowSpec``,
  ``FullAttentionSpec``, ``ChunkedLocalAttentionSpec``, ``_largest_kernel_block_within``, the backend's
  ``customize_spec`` and ``customize_attention_spec``;
* the groups from ``get_kv_cache_groups`` (promotion with the manager off, page unification, the split), the layout
  from ``resolve_kv_cache_layout`` and the pool's bytes per block from ``_get_kv_cache_bytes_per_block``.

What vLLM reads from the model config (layer kinds, heads, head sizes, windows) comes from the kit's layout, which
is checked against transformers' config classes elsewhere. The hybrid manager's automatic rule lives in
``VllmConfig.__post_init__``, which needs a GPU platform to construct: the switch is compared where the flags set
it, and the rule itself is not compared here.
"""

from __future__ import annotations

import inspect
import shlex
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from vllm_support import import_rocm_platform, require_vllm

pytestmark = pytest.mark.vllm

require_vllm("vllm")
rocm = import_rocm_platform()  # vLLM's own ROCm platform module, as on an MI300X (gfx942, CDNA 3)

(torch, arg_utils, argparse_utils, kv, planning, attention, worker_utils, aiter_ops, cache_cfg, backend_utils,
 torch_utils, rocm_attn, rocm_aiter_fa, rocm_aiter_unified, triton_attn, arch, model_hooks, registry) = require_vllm(
    "torch", "vllm.engine.arg_utils", "vllm.utils.argparse_utils", "vllm.v1.kv_cache_interface",
    "vllm.v1.core.kv_cache_planning", "vllm.model_executor.layers.attention.attention", "vllm.v1.worker.utils",
    "vllm._aiter_ops", "vllm.config.cache", "vllm.v1.attention.backends.utils", "vllm.utils.torch_utils",
    "vllm.v1.attention.backends.rocm_attn", "vllm.v1.attention.backends.rocm_aiter_fa",
    "vllm.v1.attention.backends.rocm_aiter_unified_attn", "vllm.v1.attention.backends.triton_attn",
    "vllm.transformers_utils.model_arch_config_convertor", "vllm.model_executor.models.config",
    "vllm.v1.attention.backends.registry")

# The machine's third answer on an MI300X: aiter is installed and supported (the ROCm images ship it), so the
# switches gated by @if_aiter_supported (is_mha_enabled, is_shuffle_kv_cache_enabled) answer from the environment.
aiter_ops.is_aiter_found_and_supported = lambda: True

from swa_kit.errors import UsageError  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.launch.vllm_plan import plan  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402

BACKENDS = {"ROCM_ATTN": rocm_attn.RocmAttentionBackend, "ROCM_AITER_FA": rocm_aiter_fa.AiterFlashAttentionBackend,
            "ROCM_AITER_UNIFIED_ATTN": rocm_aiter_unified.RocmAiterUnifiedAttentionBackend,
            "TRITON_ATTN": triton_attn.TritonAttentionBackend}
MODELS = ("gemma3-27b", "gemma4-31b", "gpt-oss-20b", "gpt-oss-120b", "llama4-scout")
FLAGS = ("", "--disable-hybrid-kv-cache-manager", "-tp 2", "--tensor-parallel-size 8", "--kv-cache-dtype fp8",
         "--block-size 32", "--block-size 16 --disable-hybrid-kv-cache-manager", "--attention-backend TRITON_ATTN",
         "--attention-backend ROCM_AITER_UNIFIED_ATTN", "--attention-backend ROCM_ATTN",
         "--no-disable-hybrid-kv-cache-manager -tp 4",
         "--max-model-len 32k --gpu-memory-utilization 0.8 --kv-cache-dtype fp8_e4m3")
ENVS = ({}, {"VLLM_ROCM_USE_AITER": "1"}, {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT": "1"})
LAUNCHES = [(m, f, e) for m in MODELS for f in FLAGS for e in ENVS]
GIB = 1 << 30


def _parser():
    parser = argparse_utils.FlexibleArgumentParser()
    arg_utils.EngineArgs.add_cli_args(parser)
    return parser


PARSER = _parser()


@contextmanager
def _environment(env: dict[str, str]):
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        aiter_ops.rocm_aiter_ops.refresh_env_variables()
        try:
            yield
        finally:
            patch.undo()
            aiter_ops.rocm_aiter_ops.refresh_env_variables()


def _priorities(connector: bool) -> list[str]:
    """vLLM's own ``_get_backend_priorities`` (not MLA, not sparse), with its own aiter switches."""
    return [b.name for b in rocm._get_backend_priorities(use_mla=False, use_sparse=False, use_kv_connector=connector)]


def _mm_prefix(model) -> bool:
    hf = SimpleNamespace(**{k: v for k, v in model.hf_config.items() if k in ("model_type", "is_mm_prefix_lm")})
    return arch.ModelArchConfigConvertorBase.is_mm_prefix_lm(SimpleNamespace(hf_config=hf))


def _reasons(name: str, kind, model, args, block: int) -> list[str]:
    return BACKENDS[name].validate_configuration(
        head_size=kind.head_dim, dtype=getattr(torch, model.dtype), kv_cache_dtype=args.kv_cache_dtype,
        block_size=block, use_mla=False, has_sink=model.hf_config.get("model_type") == "gpt_oss",
        use_sparse=False, use_mm_prefix=_mm_prefix(model), use_per_head_quant_scales=False,
        device_capability=None, attn_type="decoder", has_sliding_window=kind.attention == "sliding")


def _backend_name(value) -> str | None:
    """vLLM's parser leaves ``--attention-backend`` a string; ``AttentionConfig`` makes it the enum later."""
    return None if value is None else getattr(value, "name", value)


class _ArchConfig(list):
    """``ModelArchConfig`` as a model-config hook indexes it: per layer, its head size."""

    total_num_hidden_layers: int


def _after_model_hook(model, args) -> str | None:
    """``--attention-backend`` once the architecture's own hook (``MODELS_CONFIG_MAP``) ran, where that hook sets
    the attention backend (Gemma-4's does); the hook reads the fields given here."""
    hook = model_hooks.MODELS_CONFIG_MAP.get(model.architecture)
    named = _backend_name(args.attention_backend)
    if hook is None or "attention_config.backend" not in inspect.getsource(hook.verify_and_update_config):
        return named
    per_layer = _ArchConfig(SimpleNamespace(head_size=model.layer_kind(i).head_dim) for i in range(model.num_layers))
    per_layer.total_num_hidden_layers = model.num_layers
    attention_config = SimpleNamespace(backend=None if named is None else registry.AttentionBackendEnum[named],
                                       flash_attn_version=None)
    hook.verify_and_update_config(SimpleNamespace(
        model_config=SimpleNamespace(model_arch_config=per_layer,
                                     hf_text_config=SimpleNamespace(layer_types=list(model.layer_types))),
        attention_config=attention_config, cache_config=SimpleNamespace(cache_dtype=args.kv_cache_dtype)))
    return _backend_name(attention_config.backend)


def _select(model, args) -> dict[str, tuple[str, dict[str, list[str]]]] | str:
    """Per layer kind: vLLM's backend and the reasons of those rejected first; or why vLLM refuses to start."""
    block = args.block_size or cache_cfg.CacheConfig.DEFAULT_BLOCK_SIZE
    named = _after_model_hook(model, args)
    out = {}
    for name, kind in model.kinds.items():
        if named is not None:
            reasons = _reasons(named, kind, model, args, block)
            if reasons:
                return f"{named}: {reasons}"
            out[name] = (named, {})
            continue
        rejected = {}
        for backend in _priorities(getattr(args, "kv_transfer_config", None) is not None):
            assert backend in BACKENDS, f"{name}: the backends read here reject it; vLLM would try {backend} next"
            reasons = _reasons(backend, kind, model, args, block)
            if not reasons:
                out[name] = (backend, rejected)
                break
            rejected[backend] = reasons
    return out


def _block_size(args, backends: list[str]) -> int:
    """``Platform._preferred_block_size_for_backends`` with the backends' own methods."""
    if args.block_size is not None:
        return args.block_size
    default, classes = cache_cfg.CacheConfig.DEFAULT_BLOCK_SIZE, [BACKENDS[b] for b in dict.fromkeys(backends)]
    if len(classes) == 1:
        return classes[0].get_preferred_block_size(default)
    assert all(c.supports_block_size(default) for c in classes), "a mix the kit refuses; not among these launches"
    return default


def _specs(model, args, selected, block: int) -> dict:
    """``Attention.get_kv_cache_spec`` per layer, then ``customize_attention_spec`` (gpu/attn_utils.py)."""
    tp = args.tensor_parallel_size
    dtype = torch_utils.STR_DTYPE_TO_TORCH_DTYPE.get(args.kv_cache_dtype, getattr(torch, model.dtype))
    mode = kv.get_kv_quant_mode(args.kv_cache_dtype)
    specs = {}
    for i in range(model.num_layers):
        kind = model.layer_kind(i)
        backend = BACKENDS[selected[kind.name][0]]
        common = dict(num_kv_heads=max(1, kind.num_kv_heads // tp), head_size=kind.head_dim,
                      head_size_v=kind.v_head_dim, dtype=dtype, kv_quant_mode=mode)
        if kind.attention == "sliding":
            probe = backend.customize_spec(kv.SlidingWindowSpec(block_size=1, sliding_window=kind.window.keys,
                                                                **common))
            per_token = probe.real_page_size_bytes
            size = attention._largest_kernel_block_within(backend, per_token, per_token * block, block, probe,
                                                          divisor_of=block)
            spec = kv.SlidingWindowSpec(block_size=size, sliding_window=kind.window.keys, **common)
        elif kind.attention == "chunked":
            spec = kv.ChunkedLocalAttentionSpec(block_size=block, attention_chunk_size=kind.chunk_size, **common)
        else:
            spec = kv.FullAttentionSpec(block_size=block, **common)
        specs[f"model.layers.{i}.self_attn.attn"] = worker_utils.customize_attention_spec(backend, spec)
    return specs


def _vllm_answer(model, flags: str, env: dict[str, str], hybrid_disabled: bool | None) -> dict | str:
    with _environment(env):  # the backends' customize_spec reads the shuffle switch at call time
        return _vllm_answer_here(model, flags, hybrid_disabled)


def _vllm_answer_here(model, flags: str, hybrid_disabled: bool | None) -> dict | str:
    args = PARSER.parse_args(["--model", model.name, *shlex.split(flags)])
    selected = _select(model, args)
    if isinstance(selected, str):
        return selected
    block = _block_size(args, [b for b, _ in selected.values()])
    specs = _specs(model, args, selected, block)
    disabled = args.disable_hybrid_kv_cache_manager if args.disable_hybrid_kv_cache_manager is not None \
        else hybrid_disabled  # the automatic rule is VllmConfig's (not runnable here): the kit's value is used
    config = SimpleNamespace(scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=disabled),
                             attention_config=SimpleNamespace(hisparse_config=None),
                             cache_config=SimpleNamespace(kv_cache_layout=None, enable_extensible_kv_cache=True),
                             kv_transfer_config=None,
                             parallel_config=SimpleNamespace(decode_context_parallel_size=1))
    declared = [[layout.name for layout in c.supported_kv_cache_layouts()]
                for c in {BACKENDS[b] for b, _ in selected.values()} if c.supported_kv_cache_layouts()]
    layout = backend_utils.resolve_kv_cache_layout(config, declared or [["LBHNC"]], specs.values())
    config.cache_config = SimpleNamespace(kv_cache_layout=layout.name,
                                          get_resolved_kv_cache_layout=lambda: layout)
    groups = planning.get_kv_cache_groups(config, specs)
    index = {name: i for i, name in enumerate(specs)}
    per_layer = {}
    for group in groups:
        for name in group.layer_names:
            spec = planning._get_per_layer_spec(group, name)
            per_layer[index[name]] = (type(spec).__name__, spec.block_size, spec.page_size_bytes,
                                      specs[name].sliding_window if hasattr(specs[name], "sliding_window") else None)
    return {
        "args": (args.tensor_parallel_size, args.block_size, args.kv_cache_dtype, args.disable_hybrid_kv_cache_manager,
                 _backend_name(args.attention_backend), args.max_model_len,
                 args.gpu_memory_utilization),
        "backends": {k: (b, {n: list(r) for n, r in rej.items()}) for k, (b, rej) in selected.items()},
        "block_size": block, "hybrid_disabled": disabled,
        "layers": [per_layer[i] for i in range(model.num_layers)],
        "groups": [tuple(index[n] for n in g.layer_names) for g in groups],
        "bytes_per_block": planning._get_kv_cache_bytes_per_block(groups, layout),
    }


def _kit_answer(model, flags: str, env: dict[str, str]) -> dict | str:
    try:
        args = parse_vllm_flags(flags)
        p = plan(model, args, env)
    except UsageError as error:
        return f"refused: {error}"
    return {
        "args": (args.tensor_parallel_size, args.block_size, args.kv_cache_dtype, args.disable_hybrid_kv_cache_manager,
                 args.attention_backend, args.max_model_len, args.gpu_memory_utilization),
        "backends": {k.kind.name: (k.selection.backend, k.selection.rejected) for k in p.kinds},
        "block_size": p.block_size, "hybrid_disabled": p.kv.hybrid_disabled,
        "layers": [(s.kind, s.block_size, s.page_size_bytes, s.sliding_window) for s in p.kv.specs],
        "groups": [g.layers for g in p.kv.groups], "bytes_per_block": p.kv.bytes_per_block,
    }


@pytest.mark.parametrize(("name", "flags", "env"), LAUNCHES,
                         ids=[f"{m}|{f or 'defaults'}|{','.join(e) or 'no-env'}" for m, f, e in LAUNCHES])
def test_kit_agrees_with_vllm(name: str, flags: str, env: dict[str, str]) -> None:
    model = load_model(name)
    kit = _kit_answer(model, flags, env)
    hybrid = None if isinstance(kit, str) else kit["hybrid_disabled"]
    theirs = _vllm_answer(model, flags, env, hybrid)
    if isinstance(theirs, str) or isinstance(kit, str):
        assert isinstance(theirs, str) and isinstance(kit, str), f"vLLM: {theirs!r}; kit: {kit!r}"
        backend = theirs.split(":")[0]
        assert backend in kit, f"vLLM refuses for {theirs}; the kit for another reason: {kit}"
        return
    for field in theirs:
        assert kit[field] == theirs[field], f"{field}: kit {kit[field]!r} != vLLM {theirs[field]!r}"


def test_launches_cover_both_switches_and_every_backend() -> None:
    """The launches reach what the kit models: the manager on and off, each backend, refusals, several groups."""
    assert len(LAUNCHES) >= 60
    seen_backends, seen_groups, refusals = set(), set(), 0
    for name, flags, env in LAUNCHES:
        kit = _kit_answer(load_model(name), flags, env)
        if isinstance(kit, str):
            refusals += 1
            continue
        seen_backends |= {b for b, _ in kit["backends"].values()}
        seen_groups.add((kit["hybrid_disabled"], len(kit["groups"]) > 1))
    assert seen_backends == set(BACKENDS)
    assert {(True, False), (False, True)} <= seen_groups
    assert 0 < refusals < len(LAUNCHES) // 2
