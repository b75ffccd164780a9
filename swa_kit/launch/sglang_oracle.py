"""SGLang's decisions for a launch, computed by SGLang's own code where it imports.

:func:`decide` (``swa_kit.launch.decide``) reproduces SGLang 0.5.23 from the kit's bundled tables.
This module asks the installed SGLang instead, on any machine (a CPU is enough), and says which
version answered:

* **backends, page size, hybrid pool**: SGLang's whole argument resolution
  (``arg_groups/pipeline.py run_resolution_pipeline``: the per-architecture overrides of
  ``arg_groups/model_overrides/``, ``get_default_attn_backend``, ``_page_size_default``) on a
  ``ServerArgs`` built from the launch's arguments and a ``config.json`` holding the launch's
  config, under ``runtime_context.override_platform`` set to the platform the user names (so a
  CPU box answers as ROCm or CUDA would) and with the launch's environment variables set;
  the hybrid pool is ``ModelConfig.is_hybrid_swa`` (``is_hybrid_swa_model`` and
  ``disable_hybrid_swa_memory``);
* **pool sizes**: ``model_executor/pool_configurator.py``'s ``HybridSWAPoolConfigurator`` /
  ``SWARequestCapPoolConfigurator`` run on SGLang's own ``ModelConfig`` with the runtime context
  published from the resolved arguments. The byte budget is the kit's (SGLang measures it by
  profiling a GPU), so the comparison is of what SGLang does *with* a budget;
* **call sites**: the window expressions of the installed ``aiter_backend.py``, read with ``ast``.

Decisions SGLang's code cannot answer off a GPU (per-request minimum, draft pool, resolver,
routes) are copied from :func:`decide` and keep ``how=BUNDLED`` ("bundled 0.5.23 table"): every
:class:`Decided` says which of the two produced it. Without SGLang, :func:`decide_with_sglang`
raises :class:`~swa_kit.errors.SGLangUnavailableError` naming how to install it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import traceback
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from swa_kit.launch.decide import Decided, Decisions, decide
from swa_kit.launch.inputs import Launch
from swa_kit.launch.sglang_import import (INSTALL_HINT, PLATFORM_FACTS, hidden_aiter,  # noqa: F401  (re-exported)
                                          import_sglang, read_from, sglang_version)
from swa_kit.launch.sglang_memory import named_gpu_memory
from swa_kit.launch.sglang_oracle_spec import dflash_draft_cell_size, draft_layers_in_budget
from swa_kit.launch.sglang_unified import configurator, unified_fields
from swa_kit.errors import SGLangUnavailableError, UsageError


# -- the call sites' window expressions ------------------------------------------------------------


@dataclass(frozen=True)
class WindowExpression:
    """One place in the installed ``aiter_backend.py`` that turns ``layer.sliding_window_size`` into a window."""

    method: str
    line: int
    target: str
    expression: str  # as written, e.g. "(layer.sliding_window_size - 1, 0)"


def _mentions_sws(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "sliding_window_size" for n in ast.walk(node))


def window_expressions(source: str | Path | None = None) -> list[WindowExpression]:
    """Every tuple built from ``layer.sliding_window_size`` that SGLang's aiter backend assigns, by method.

    ``source``: the file to read (default: the installed ``sglang/srt/layers/attention/aiter_backend.py``).
    """
    if source is None:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            raise SGLangUnavailableError(
                f"SGLang is not installed, so its aiter backend cannot be read: {INSTALL_HINT}")
        source = Path(spec.submodule_search_locations[0]) / "srt" / "layers" / "attention" / "aiter_backend.py"
    tree = ast.parse(Path(source).read_text())
    found = []
    for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and _mentions_sws(node.value):
                found.append(WindowExpression(func.name, node.lineno, ast.unparse(node.targets[0]),
                                              ast.unparse(node.value)))
    return sorted(set(found), key=lambda e: e.line)


# -- SGLang's argument resolution ------------------------------------------------------------------


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _server_args_kwargs(launch: Launch, model_dir: str) -> dict[str, Any]:
    given = launch.server_args.given()
    given.pop("model_path", None)
    if "speculative_draft_model_path" in given:  # SGLang reads only the draft's config, written beside the target's
        given["speculative_draft_model_path"] = str(Path(model_dir) / "draft") if launch.draft_model else model_dir
    device = "cpu" if launch.platform.name == "cpu" else "cuda"  # ROCm's torch device is "cuda" too
    return {"model_path": model_dir, "skip_tokenizer_init": True, "device": device, **given}


@dataclass(frozen=True)
class Resolved:
    """What SGLang's resolution decided, and the objects the pool configurator needs."""

    attention_backend: str
    prefill_attention_backend: str
    decode_attention_backend: str
    page_size: int
    hybrid_swa: bool
    disable_hybrid_swa_memory: bool
    server_args: Any
    model_config: Any


def resolve(launch: Launch, model_dir: str) -> Resolved:
    """Run SGLang's argument resolution for ``launch`` (config at ``model_dir``) on its platform."""
    server_args_mod = import_sglang("sglang.srt.server_args")
    pipeline = import_sglang("sglang.srt.arg_groups.pipeline")
    base = import_sglang("sglang.srt.arg_groups.model_override_base")
    runtime = import_sglang("sglang.srt.runtime_context")
    try:
        server_args = server_args_mod.ServerArgs(**_server_args_kwargs(launch, model_dir))
        pipeline.run_resolution_pipeline(server_args)
    except (AssertionError, ValueError, NotImplementedError) as error:  # SGLang refuses the launch at start-up
        where = traceback.extract_tb(error.__traceback__)[-1]
        raise UsageError(f"SGLang {sglang_version()} refuses this launch while resolving its arguments "
                         f"({Path(where.filename).name}:{where.lineno} {type(error).__name__}: {error or where.line})"
                         ) from error
    view = base.resolved_view(server_args)
    prefill, decode = base.attention_backends_of(view)
    model_config = base.model_config_of(server_args)
    runtime.publish(server_args, role="test")  # the configurators read the published schedule / memory bags
    return Resolved(view.attention_backend, prefill, decode, view.page_size, bool(model_config.is_hybrid_swa),
                    bool(view.disable_hybrid_swa_memory), server_args, model_config)


def declared_by(resolved: Resolved, field: str) -> str:
    """Which SGLang resolution step set ``field`` last (its own provenance, ``ServerArgs._resolved_overrides``)."""
    steps = [source for source, declared in getattr(resolved.server_args, "_resolved_overrides", ()) or ()
             if field in declared]
    return steps[-1] if steps else "the server arguments as given"


@contextlib.contextmanager
def sglang_session(launch: Launch) -> Iterator[str]:
    """The launch's platform, environment and ``config.json`` in place while SGLang runs; quiet logs."""
    runtime = import_sglang("sglang.srt.runtime_context")
    with tempfile.TemporaryDirectory(prefix="swa-kit-sglang-") as tmp, environment(dict(launch.env)), \
            runtime.override_platform(**PLATFORM_FACTS[launch.platform.name]), hidden_aiter(), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (Path(tmp) / "config.json").write_text(json.dumps(launch.model.hf_config))
        if launch.draft_model is not None:
            (Path(tmp) / "draft").mkdir()
            (Path(tmp) / "draft" / "config.json").write_text(json.dumps(launch.draft_model.hf_config))
        level = logging.getLogger("sglang").level
        logging.getLogger("sglang").setLevel(logging.ERROR)
        try:
            yield tmp
        finally:
            logging.getLogger("sglang").setLevel(level)


# -- pool sizes --------------------------------------------------------------------------------------


def _kv_dtype(resolved: Resolved) -> Any:
    import torch

    name = resolved.server_args.kv_cache_dtype
    if name in (None, "auto"):
        return resolved.model_config.dtype
    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "bf16": torch.bfloat16,
            "bfloat16": torch.bfloat16}[name]


def pool_sizes(launch: Launch, resolved: Resolved, budget_bytes: int | None) -> tuple[str, Any] | None:
    """``(configurator, MemoryPoolConfig)`` from SGLang's hybrid configurators, or None without a hybrid pool.

    ``budget_bytes`` is the KV budget (SGLang profiles it on a GPU; here it is given);
    ``--max-total-tokens`` takes SGLang's constraint path instead.
    """
    if not resolved.hybrid_swa:
        return None
    pc = import_sglang("sglang.srt.model_executor.pool_configurator")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    mc = resolved.model_config
    sws = launch.model.sliding_window_size  # the runner's sliding_window_size (resolve_sliding_window_size)
    if sws is None:
        sws = max(k.chunk_size for k in launch.model.kinds.values() if k.chunk_size)
    # The configurator reads these KVCacheConfigurator fields only; the values come from SGLang's own objects.
    kvc = SimpleNamespace(
        kv_cache_dtype_str=resolved.server_args.kv_cache_dtype, model_config=mc, kv_cache_dtype=_kv_dtype(resolved),
        layer_info=SimpleNamespace(swa_attention_layer_ids=mc.swa_attention_layer_ids,
                                   full_attention_layer_ids=mc.full_attention_layer_ids),
        sliding_window_size=sws, page_size=resolved.page_size, attn_dp_size=1, is_draft_worker=False,
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(launch.server_args.speculative_algorithm),
        spec_aux_config=SimpleNamespace(eagle_draft_num_layers=None), fused_entry_bytes=lambda side: None,
        dflash_draft_cell_size_per_token=None)
    cls = pc.SWARequestCapPoolConfigurator if pc.SWARequestCapPoolConfigurator.is_applicable(kvc) \
        else pc.HybridSWAPoolConfigurator
    configurator = cls(kvc)
    if launch.server_args.max_total_tokens is not None:
        return cls.__name__, configurator.calculate_pool_sizes_from_max_tokens(launch.server_args.max_total_tokens,
                                                                               resolved.page_size)
    if budget_bytes is None:
        return cls.__name__, None
    return cls.__name__, configurator.calculate_pool_sizes(budget_bytes, resolved.page_size)


# -- the decisions -----------------------------------------------------------------------------------

_PIPELINE = "arg_groups/pipeline.py run_resolution_pipeline"
_PC = "model_executor/pool_configurator.py"


def decide_with_sglang(launch: Launch) -> Decisions:
    """:func:`decide`'s decisions, those SGLang's code can answer here computed by the installed SGLang."""
    bundled = decide(launch)
    how = read_from()
    with sglang_session(launch) as model_dir:
        resolved = resolve(launch, model_dir)
        budget = bundled.pools.budget_bytes
        sized = pool_sizes(launch, resolved, budget)
    platform = f"platform {launch.platform.name}"
    hybrid_why = ("configs/model_config.py ModelConfig.is_hybrid_swa (is_hybrid_swa_model and not "
                  f"disable_hybrid_swa_memory={resolved.disable_hybrid_swa_memory})")
    changes: dict[str, Any] = {  # Decisions field -> its Decided
        "attention_backend": Decided(resolved.attention_backend, f"{_PIPELINE} on {platform}: set by "
                                     f"{declared_by(resolved, 'attention_backend')}", how),
        "prefill_attention_backend": Decided(resolved.prefill_attention_backend,
                                             "arg_groups/model_override_base.py attention_backends_of", how),
        "decode_attention_backend": Decided(resolved.decode_attention_backend,
                                            "arg_groups/model_override_base.py attention_backends_of", how),
        "hybrid_swa_memory": Decided(resolved.hybrid_swa, f"{hybrid_why}; disable_hybrid_swa_memory set by "
                                     f"{declared_by(resolved, 'disable_hybrid_swa_memory')}", how),
        "page_size": Decided(resolved.page_size, f"{_PIPELINE}: set by {declared_by(resolved, 'page_size')}", how),
    }
    if sized is not None:
        name, config = sized
        changes["pool_configurator"] = Decided(name, f"{_PC} create_memory_pool_configurator", how)
        if config is not None:
            full, swa = config.full_max_total_num_tokens, config.swa_max_total_num_tokens
            cells = bundled.pools
            changes["full_tokens"] = Decided(full, f"{_PC} {name} (budget: the kit's, {cells.budget_how})", how)
            changes["swa_tokens"] = Decided(swa, f"{_PC} {name}", how)
    return dataclasses.replace(bundled, **changes)


# -- the raw launch, asked of SGLang whole ----------------------------------------------------------

#: The text model SGLang's multimodal wrapper builds for its language layers (the wrapper also builds a vision
#: tower, which needs a vision config the kit's text-only configs do not hold).
TEXT_CLASS = {"Gemma4ForConditionalGeneration": "Gemma4ForCausalLM", "Gemma3ForConditionalGeneration":
              "Gemma3ForCausalLM", "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
              "Gemma3nForConditionalGeneration": "Gemma3nForCausalLM"}


@dataclass(frozen=True)
class Answer:
    """SGLang's own answer for a raw launch: a refusal, or what start-up resolves and sizes."""

    refused: str | None  # "ExceptionType at file:line": SGLang's start-up refusal
    fields: dict[str, Any]
    server_args: Any = None  # SGLang's resolved ServerArgs and ModelConfig, for callers that drive its backends
    model_config: Any = None


def _refusal(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__} at {Path(where.filename).name}:{where.lineno}: {str(error)[:200]}"


def _one_rank_groups() -> None:
    """A one-rank gloo world and SGLang's model-parallel groups of width 1 (once per process: the groups stay, so
    this process cannot then publish another TP width; :func:`layer_windows_apart` runs it in a child)."""
    import torch.distributed

    ps = import_sglang("sglang.srt.distributed.parallel_state")
    if torch.distributed.is_initialized():
        return
    port = 20000 + os.getpid() % 20000
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                    distributed_init_method=f"tcp://127.0.0.1:{port}")
    ps.initialize_model_parallel(backend="gloo")


@dataclass(frozen=True)
class BuiltModel:
    """What SGLang's model class sets when built: each layer's window, and the runner's ``sliding_window_size``."""

    layer_windows: dict[int, int]  # RadixAttention.sliding_window_size by layer id
    sliding_window_size: int | None  # load_model_utils.resolve_sliding_window_size(model, model_config)


def built_models_apart(model_dirs: list[str]) -> dict[str, BuiltModel | str]:
    """:func:`built_model` for each config directory, in one child process (its process groups stay there);
    a config SGLang's model class does not build for is answered with the reason, ``"not built: ..."``."""
    import subprocess

    code = ("import json, sys, dataclasses; from swa_kit.launch.sglang_oracle import built_model, _refusal\n"
            "def one(d):\n try: return dataclasses.asdict(built_model(d))\n"
            " except Exception as e: return 'not built: ' + _refusal(e)\n"
            "print('WINDOWS ' + json.dumps({d: one(d) for d in sys.argv[1:]}))")
    run = subprocess.run([sys.executable, "-c", code, *model_dirs], capture_output=True, text=True, check=False)
    line = next((x for x in run.stdout.splitlines() if x.startswith("WINDOWS ")), None)
    if run.returncode or line is None:
        raise SGLangUnavailableError(f"SGLang's model classes did not build on the meta device (exit "
                                     f"{run.returncode}): {run.stderr[-600:]}")
    return {d: b if isinstance(b, str) else
            BuiltModel({int(k): v for k, v in b["layer_windows"].items()}, b["sliding_window_size"])
            for d, b in json.loads(line[8:]).items()}


def layer_windows_apart(model_dirs: list[str]) -> dict[str, dict[int, int] | str]:
    """Each config's per-layer windows (:func:`built_models_apart`), or why its model class did not build."""
    return {d: b if isinstance(b, str) else b.layer_windows for d, b in built_models_apart(model_dirs).items()}


_BUILT: dict[str, BuiltModel] = {}


def built_model(model_dir: str, platform: str = "rocm-gfx942") -> BuiltModel:
    """SGLang's model class for the config at ``model_dir``, built on the meta device: each layer's
    ``RadixAttention.sliding_window_size`` and the window the model runner
    sizes the SWA pool with (``resolve_sliding_window_size``: the model's ``get_attention_sliding_window_size``,
    which is ``sliding_window - 1`` for Gemma and GPT-OSS, else the config's). Built once per config at TP 1 (the
    window does not depend on TP).
    """
    key = (Path(model_dir) / "config.json").read_text()
    if key in _BUILT:
        return _BUILT[key]
    import torch

    server_args_mod = import_sglang("sglang.srt.server_args")
    pipeline = import_sglang("sglang.srt.arg_groups.pipeline")
    base = import_sglang("sglang.srt.arg_groups.model_override_base")
    runtime = import_sglang("sglang.srt.runtime_context")
    radix = import_sglang("sglang.srt.layers.radix_attention")
    registry = import_sglang("sglang.srt.models.registry")
    sa = server_args_mod.prepare_server_args(["--model-path", model_dir, "--skip-tokenizer-init", "--device",
                                              "cpu" if platform == "cpu" else "cuda"])
    pipeline.run_resolution_pipeline(sa)
    mc = base.model_config_of(sa)
    runtime.publish(sa, role="scheduler", ranks=runtime.SpawnRanks(world_rank=0, gpu_id=0))
    arch = mc.hf_config.architectures[0]
    cls = registry.ModelRegistry.resolve_model_cls([TEXT_CLASS.get(arch, arch)])[0]
    config = _spelled_for_the_model_class(mc.hf_text_config if arch in TEXT_CLASS else mc.hf_config, arch)
    # The HIP/CUDA rotary kernels are picked at import from the real machine; on a CPU SGLang reaches for vLLM's
    # op, which the meta build never calls: a placeholder module lets the constructor finish.
    placeholder = types.ModuleType("vllm._custom_ops")
    placeholder.rotary_embedding = None  # type: ignore[attr-defined]  # never called on the meta device
    package = types.ModuleType("vllm")
    package._custom_ops = placeholder  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("vllm", "vllm._custom_ops")}
    sys.modules.setdefault("vllm", package)
    sys.modules["vllm._custom_ops"] = placeholder
    try:
        _one_rank_groups()
        with torch.device("meta"), hidden_aiter():
            model = cls(config, quant_config=None)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    _BUILT[key] = BuiltModel(_windows_by_layer(model, radix.RadixAttention), _runner_window(model, arch, mc))
    return _BUILT[key]


def _windows_by_layer(model: Any, attention: Any) -> dict[int, int]:
    """Each decoder layer's ``RadixAttention.sliding_window_size``, by the layer's place in ``layers`` (not by the
    attention's ``layer_id``: Gemma-3n's KV-shared layers reuse an earlier layer's id, ``models/gemma3n_causal.py``
    ``Gemma3nAttention``)."""
    windows: dict[int, int] = {}
    for name, module in model.named_modules():
        found = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
        if isinstance(module, attention) and found:
            layer = int(found.group(1))
            if windows.get(layer, module.sliding_window_size) != module.sliding_window_size:
                raise UsageError(f"layer {layer} holds attentions of windows {windows[layer]} and "
                                 f"{module.sliding_window_size}: one window per layer cannot be read")
            windows[layer] = module.sliding_window_size
    return windows


def _spelled_for_the_model_class(config: Any, arch: str) -> Any:
    """The config with the field spellings SGLang 0.5.23's model classes read, where transformers 5.19 (its pinned
    version) saves or standardises them differently; none of them touches a window:

    * ``hidden_act`` (``models/gemma2.py Gemma2DecoderLayer``) and ``layernorm_epsilon`` (``models/mimo_v2.py``):
      transformers' ``Gemma2Config`` / ``MiMoV2FlashConfig`` hold only ``hidden_activation`` / ``rms_norm_eps``
      (the published checkpoints carry the older names);
    * ``rope_scaling`` (MiMo-V2 only; Gemma-3n reads the per-type dict itself): ``MiMoV2FlashConfig`` standardises
      it into one dict per layer type, which ``models/mimo_v2.py`` hands whole to ``get_rope`` (an unhashable
      cache key); the published checkpoint's flat ``rope_theta`` / ``swa_rope_theta`` with no scaling is what the
      class reads instead.
    """
    for read, saved in (("hidden_act", "hidden_activation"), ("layernorm_epsilon", "rms_norm_eps")):
        if not hasattr(config, read) and hasattr(config, saved):
            setattr(config, read, getattr(config, saved))
    rope = getattr(config, "rope_parameters", None)
    if arch.startswith("MiMoV2") and isinstance(rope, dict) and rope and all(isinstance(v, dict)
                                                                               for v in rope.values()):
        full, swa = rope.get("full_attention", {}), rope.get("sliding_attention", {})
        config.rope_scaling = None
        for name, value in (("rope_theta", full.get("rope_theta")), ("swa_rope_theta", swa.get("rope_theta")),
                            ("partial_rotary_factor", full.get("partial_rotary_factor"))):
            if value is not None:
                setattr(config, name, value)
    return config


def _runner_window(model: Any, arch: str, mc: Any) -> int | None:
    """``resolve_sliding_window_size`` on the model the runner holds: for a multimodal wrapper (built here as its
    text model), the wrapper's own ``get_attention_sliding_window_size`` over its config and language model."""
    registry = import_sglang("sglang.srt.models.registry")
    utils = import_sglang("sglang.srt.model_executor.model_runner_components.load_model_utils")
    if arch in TEXT_CLASS:
        wrapper = registry.ModelRegistry.resolve_model_cls([arch])[0]
        holder = SimpleNamespace(config=mc.hf_config, language_model=model)
        if hasattr(wrapper, "get_attention_sliding_window_size"):
            holder.get_attention_sliding_window_size = types.MethodType(
                wrapper.get_attention_sliding_window_size, holder)
        model = holder
    return utils.resolve_sliding_window_size(model, mc)


def _spec_aux(sa: Any, mc: Any) -> Any:
    aux = import_sglang("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    algorithm = spec_info.SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    return algorithm, aux.resolve_spec_aux_hidden_state_config(server_args=sa, model_config=mc,
                                                               spec_algorithm=algorithm, is_draft_worker=False)


def _sizes(sa: Any, view: Any, mc: Any, algorithm: Any, spec_aux: Any, budget: int | None, hybrid: bool,
           sws: int | None) -> dict[str, Any]:
    """Pool sizes from ``create_memory_pool_configurator`` + ``calculate_pool_sizes`` on SGLang's own objects."""
    pc = import_sglang("sglang.srt.model_executor.pool_configurator")
    layer_setup = import_sglang("sglang.srt.model_executor.model_runner_components.layer_setup")
    resolved = Resolved(view.attention_backend, "", "", view.page_size, hybrid, False, sa, mc)
    n = mc.num_hidden_layers
    info = layer_setup.ModelLayerInfo(start_layer=0, end_layer=n, num_effective_layers=n,
                                      swa_attention_layer_ids=mc.swa_attention_layer_ids if hybrid else None,
                                      full_attention_layer_ids=mc.full_attention_layer_ids if hybrid else None)
    kvc = SimpleNamespace(
        kv_cache_dtype_str=sa.kv_cache_dtype, model_config=mc, kv_cache_dtype=_kv_dtype(resolved),
        model_dtype=mc.dtype, layer_info=info, sliding_window_size=sws, page_size=view.page_size, attn_dp_size=1,
        pp_size=1, is_draft_worker=False, spec_algorithm=algorithm, spec_aux_config=spec_aux, mambaish_config=None,
        fused_entry_bytes=lambda side: None, is_hybrid_swa=hybrid, use_mla_backend=False, server_args=sa,
        dflash_draft_cell_size_per_token=dflash_draft_cell_size(import_sglang, spec_aux, algorithm), device="cpu")
    configurator = pc.create_memory_pool_configurator(kvc)
    out: dict[str, Any] = {"pool_configurator": type(configurator).__name__}
    if hybrid and sws is not None and not isinstance(configurator, pc.SWARequestCapPoolConfigurator):
        out["swa_pool_floor"] = sws + view.page_size  # validate_swa_pool_size, which the request-cap solve skips
    if budget is not None:
        config = configurator.calculate_pool_sizes(budget, view.page_size)
        out["full_tokens"] = config.full_max_total_num_tokens if hybrid else config.max_total_num_tokens
        out["swa_tokens"] = config.swa_max_total_num_tokens if hybrid else None
    return out


def ask_sglang(argv: list[str], platform: str, gpu_memory_bytes: int | None, weights_bytes: int = 0,
               built: BuiltModel | None = None) -> Answer:
    """SGLang's own answer for the raw command line ``argv`` (``--model-path`` and any draft path included).

    SGLang's argument parser reads ``argv`` as given; ``run_resolution_pipeline`` resolves it under the named
    platform; any raise on the way is SGLang's start-up refusal. The KV budget is the kit's formula (GPU memory x
    the fraction SGLang resolved - weights), the one input SGLang would measure on a GPU. ``built``: the target's
    model class built on the meta device (:func:`built_models_apart`), built here in a child when not given.
    """
    server_args_mod = import_sglang("sglang.srt.server_args")
    pipeline = import_sglang("sglang.srt.arg_groups.pipeline")
    base = import_sglang("sglang.srt.arg_groups.model_override_base")
    runtime = import_sglang("sglang.srt.runtime_context")
    device = ["--device", "cpu" if platform == "cpu" else "cuda"]
    with runtime.override_platform(**PLATFORM_FACTS[platform]), hidden_aiter(), warnings.catch_warnings(), \
            named_gpu_memory(import_sglang("sglang.srt.utils.common"), gpu_memory_bytes), \
            contextlib.redirect_stderr(open(os.devnull, "w")):  # noqa: SIM115 - closed with the process
        warnings.simplefilter("ignore")
        logging.getLogger("sglang").setLevel(logging.ERROR)
        try:
            sa = server_args_mod.prepare_server_args([*argv, "--skip-tokenizer-init", *device])
            pipeline.run_resolution_pipeline(sa)
            view = base.resolved_view(sa)
            prefill, decode = base.attention_backends_of(view)
            mc = base.model_config_of(sa)
            runtime.publish(sa, role="scheduler", ranks=runtime.SpawnRanks(world_rank=0, gpu_id=0))
            algorithm, spec_aux = _spec_aux(sa, mc)
        except (Exception, SystemExit) as error:  # argparse exits; every other raise is a start-up refusal
            return Answer(_refusal(error), {})
        hybrid = bool(mc.is_hybrid_swa)
        if built is None:
            answer = built_models_apart([sa.model_path])[sa.model_path]
            if isinstance(answer, str):
                raise SGLangUnavailableError(f"{sa.model_path}: SGLang's model class {answer}")
            built = answer
        fraction = view.mem_fraction_static
        budget = None if gpu_memory_bytes is None else int(gpu_memory_bytes * fraction) - weights_bytes
        fields: dict[str, Any] = {
            "attention_backend": view.attention_backend, "prefill_attention_backend": prefill,
            "decode_attention_backend": decode, "page_size": view.page_size, "hybrid_swa_memory": hybrid,
            "mem_fraction_static": round(fraction, 6), "budget_bytes": budget,
            "draft_layers": draft_layers_in_budget(spec_aux),
            "kv_heads_per_gpu": {"full": mc.get_num_kv_heads(view.tp_size),
                                 "swa": mc.get_swa_num_kv_heads(view.tp_size)}}
        try:
            sws = built.sliding_window_size
            fields.update(_sizes(sa, view, mc, algorithm, spec_aux, budget, hybrid, sws))
            if budget is not None:  # one pool of every layer, as the same launch without the hybrid pool sizes it
                fields["one_pool_tokens"] = _sizes(sa, view, mc, algorithm, spec_aux, budget, False, sws)["full_tokens"]
            fields["unified_pool"] = None
            # its boot split, buffer, fused draft and refusals (sglang_unified), the DFLASH family's draft included
            if sa.enable_unified_memory:
                kv_dtype = _kv_dtype(Resolved(view.attention_backend, "", "", view.page_size, hybrid, False, sa, mc))
                fields.update(unified_fields(configurator(sa, mc, view, algorithm, spec_aux, hybrid, sws, kv_dtype),
                                             budget))
        except Exception as error:  # the configurator's own refusal (a pool under its floor, a negative pool)
            return Answer(_refusal(error), fields)
    return Answer(None, fields, sa, mc)
