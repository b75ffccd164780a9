"""Start-up refusals SGLang 0.5.23 makes for an attention-backend choice, each one line with its source and way out.

* Names its parser accepts: ``arg_groups/choices.py ATTENTION_BACKEND_CHOICES`` (and
  ``DRAFT_ATTENTION_BACKEND_CHOICES`` for the draft): any other name is refused before anything runs.
* trtllm_mha needs SM90, SM100 or SM120 (``arg_groups/attention_hook.py``): refused on ROCm.
* Gemma-4's allow-list (``arg_groups/model_hook.py``): trtllm_mha, triton, fa4, ascend, intel_xpu, intel_amx,
  aiter; so fa3 or flashinfer is refused. SGLang PR #38758 added aiter to it: at ``before-38758`` aiter is refused
  too; at ``before-25547`` (the PR that added the list) there is none, and Gemma-4's default backend replaces the
  user's instead.
* Llama-4's allow-list (``arg_groups/model_hook.py``, off the CPU device): fa3, aiter, triton, ascend, trtllm_mha,
  intel_xpu, checked on ``attention_backend`` alone (not the prefill / decode split); so flashinfer is refused. SGLang
  PR #12003 added trtllm_mha to it: at ``before-12003`` trtllm_mha is refused too.
* GPT-OSS's allow-list (``arg_groups/model_hook.py``, on prefill and decode): triton, trtllm_mha, fa3, fa4, ascend,
  intel_amx, intel_xpu, aiter; so flashinfer is refused.
* EXAONE-4's allow-list (``arg_groups/model_hook.py``, when the config sets ``sliding_window_pattern``; the kit: when
  the model has sliding layers): fa3, triton, trtllm_mha, checked on ``attention_backend``; so aiter is refused.
* A text-only Gemma-4 config (``Gemma4ForCausalLM`` at the top) whose layers differ in KV heads or head size:
  ``utils/hf_transformers/config.py get_config`` asks ``hasattr`` of each text-config field on the config itself,
  and transformers 5.19 (the version SGLang 0.5.23 pins) raises ``AmbiguousGlobalPerLayerAttributeError`` for
  such a per-layer field, so the launch fails before any backend is chosen.
* MXFP4 on ROCm needs gfx95 (``layers/quantization/mxfp4.py Mxfp4Config.from_config`` raises ValueError on any
  other HIP GPU, e.g. gfx942): the quantization is ``--quantization`` or the config's ``quantization_config``.
* ``--context-length`` above the model's own length (``configs/model_config.py ModelConfig._derive_context_length``
  raises ValueError unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set).

And for the SWA surface :mod:`swa_kit.launch.surface` names (``check_surface`` applies them, in SGLang's order):

* ``--enable-unified-memory``: the page-major layout's backends first (``kv_cache_hook.py
  handle_page_major_kv_layout``), then ``handle_unified_memory_pool``'s algorithms, linear chain, hybrid target
  and per-algorithm backends; a non-hybrid model when the pools are built, in SGLang's words
  (``kv_cache_configurator.py KVCacheConfigurator._init_pools``, :func:`swa_kit.launch.unified_memory.check_hybrid`).
* The draft sink size without a window, or negative; a negative ``--swa-prefix-tails``.
* DSPARK's draft without ``markov_rank > 0`` (``spec_aux_hidden_state.py``), read from the draft's config.
* An algorithm's devices, UNO's rules (``_handle_uno``: no draft path, a LoRA path, a verify width, TP=PP=1,
  fa3 for prefill and decode), and the DFLASH family's (``_handle_dflash``, ``_handle_dspark``: one pipeline stage;
  DFLASH's draft path, and its draft window no smaller than its block).
"""

from __future__ import annotations

from typing import Any

from swa_kit.engine.environment import env_flag
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.errors import LaunchRefusedError, UsageError
from swa_kit.launch.backend import BackendChoice, choose_backend
from swa_kit.launch.inputs import Launch
from swa_kit.launch.memory_fraction import derived_context_length
from swa_kit.launch.parallel import parallel_of
from swa_kit.launch.unified_memory import check_hybrid, hybrid_pool
from swa_kit.sglang_versions import SGLANG_VERSION, has_fix

ATTENTION_BACKEND_CHOICES = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer",
    "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu")
DRAFT_ATTENTION_BACKEND_CHOICES = ("flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu")
GEMMA4_BACKENDS = ("trtllm_mha", "triton", "fa4", "ascend", "intel_xpu", "intel_amx", "aiter")
GEMMA4_ARCHITECTURES = ("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4UnifiedForConditionalGeneration")
LLAMA4_BACKENDS = ("fa3", "aiter", "triton", "ascend", "trtllm_mha", "intel_xpu")
EXAONE_BACKENDS = ("fa3", "triton", "trtllm_mha")
GPT_OSS_BACKENDS = ("triton", "trtllm_mha", "fa3", "fa4", "ascend", "intel_amx", "intel_xpu", "aiter")
EXAONE_ARCHITECTURES = ("Exaone4ForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM")
LLAMA4_ARCHITECTURES = ("Llama4ForConditionalGeneration", "Llama4ForCausalLM")
TRTLLM_MHA_PLATFORMS = ("cuda-sm90", "cuda-sm100")


def check_backend_names(launch: Launch) -> None:
    """Refuse (exit 2) a backend name SGLang's own argument parser rejects."""
    args = launch.server_args
    for flag, value, choices in (("--attention-backend", args.attention_backend, ATTENTION_BACKEND_CHOICES),
                                 ("--prefill-attention-backend", args.prefill_attention_backend,
                                  ATTENTION_BACKEND_CHOICES),
                                 ("--decode-attention-backend", args.decode_attention_backend,
                                  ATTENTION_BACKEND_CHOICES),
                                 ("--speculative-draft-attention-backend", args.speculative_draft_attention_backend,
                                  DRAFT_ATTENTION_BACKEND_CHOICES)):
        if value is not None and value not in choices:
            raise UsageError(f"{flag} {value[:200]!r}: SGLang's parser accepts only {', '.join(choices)} "
                             "(sglang 0.5.23 arg_groups/choices.py)")


def check_startup(launch: Launch, choice: BackendChoice) -> None:
    """Raise :class:`LaunchRefusedError` where SGLang's start-up checks refuse the resolved backends."""
    used = (choice.prefill_attention_backend, choice.decode_attention_backend)
    if "trtllm_mha" in used and launch.platform.name not in TRTLLM_MHA_PLATFORMS:
        raise LaunchRefusedError(
            f"SGLang refuses this launch: trtllm_mha needs an SM90, SM100 or SM120 GPU, not {launch.platform.name} "
            "(sglang 0.5.23 arg_groups/attention_hook.py); use --attention-backend "
            f"{'aiter' if launch.platform.is_hip else 'triton'}")
    allowed = gemma4_backends(launch.sglang_version)
    if launch.model.architecture in GEMMA4_ARCHITECTURES and has_fix(launch.sglang_version, 25547) and \
            any(b not in allowed for b in used):
        raise LaunchRefusedError(
            f"SGLang refuses this launch: Gemma-4 runs only on {', '.join(allowed)}, got prefill "
            f"{used[0]}, decode {used[1]} (sglang 0.5.23 arg_groups/model_hook.py"
            f"{'' if allowed == GEMMA4_BACKENDS else ' without PR #38758, which adds aiter'}); use "
            "--attention-backend triton")
    if launch.model.architecture == "GptOssForCausalLM" and any(b not in GPT_OSS_BACKENDS for b in used):
        raise LaunchRefusedError(
            f"SGLang refuses this launch: GPT-OSS runs only on {', '.join(GPT_OSS_BACKENDS)}, got prefill {used[0]}, "
            f"decode {used[1]} (sglang 0.5.23 arg_groups/model_hook.py); use --attention-backend "
            f"{'aiter' if launch.platform.is_hip else 'triton'}")
    sliding = any(k.attention == "sliding" for k in launch.model.kinds.values())
    exaone = launch.model.architecture in EXAONE_ARCHITECTURES
    if exaone and sliding and choice.attention_backend not in EXAONE_BACKENDS:
        raise LaunchRefusedError(
            f"SGLang refuses this launch: EXAONE-4 with sliding layers runs only on {', '.join(EXAONE_BACKENDS)}, got "
            f"attention_backend {choice.attention_backend} (sglang 0.5.23 arg_groups/model_hook.py); use "
            f"--attention-backend {'fa3' if launch.platform.name == 'cuda-sm90' else 'triton'}")
    allowed = llama4_backends(launch.sglang_version)
    if launch.model.architecture in LLAMA4_ARCHITECTURES and launch.platform.name != "cpu" and \
            choice.attention_backend not in allowed:
        raise LaunchRefusedError(
            f"SGLang refuses this launch: Llama-4 runs only on {', '.join(allowed)}, got attention_backend "
            f"{choice.attention_backend} (sglang 0.5.23 arg_groups/model_hook.py"
            f"{'' if allowed == LLAMA4_BACKENDS else ' without PR #12003, which adds trtllm_mha'}); use "
            f"--attention-backend {llama4_way_out(launch.platform.name, allowed)}")


def check_config_reading(launch: Launch) -> None:
    """Raise :class:`LaunchRefusedError` where SGLang cannot read the config at all (a text-only Gemma-4 config
    whose layers differ in shape, read with the transformers SGLang pins)."""
    model = launch.model
    shapes = {(k.num_kv_heads, k.head_dim) for k in model.kinds.values()}
    if model.architecture == "Gemma4ForCausalLM" and len(shapes) > 1:
        raise LaunchRefusedError(
            "SGLang refuses this launch: it cannot read a text-only Gemma-4 config whose layers differ in KV heads "
            "or head size (sglang 0.5.23 utils/hf_transformers/config.py get_config asks hasattr of per-layer "
            "fields, which transformers 5.19 refuses); serve the multimodal checkpoint "
            "(Gemma4ForConditionalGeneration), as Google publishes it")


def llama4_backends(sglang_version: str) -> tuple[str, ...]:
    """Llama-4's backend allow-list at ``sglang_version``: trtllm_mha joined it in SGLang PR #12003."""
    return LLAMA4_BACKENDS if has_fix(sglang_version, 12003) else tuple(b for b in LLAMA4_BACKENDS if b != "trtllm_mha")


def llama4_way_out(platform: str, allowed: tuple[str, ...]) -> str:
    """The allowed backend that runs on ``platform``: fa3 on Hopper, aiter on ROCm, trtllm_mha on Blackwell."""
    pick = {"cuda-sm90": "fa3", "cuda-sm100": "trtllm_mha"}.get(platform, "aiter" if platform.startswith("rocm")
                                                                 else "triton")
    return pick if pick in allowed else "triton"


def gemma4_backends(sglang_version: str) -> tuple[str, ...]:
    """Gemma-4's backend allow-list at ``sglang_version``: aiter joined it in SGLang PR #38758."""
    return GEMMA4_BACKENDS if has_fix(sglang_version, 38758) else tuple(b for b in GEMMA4_BACKENDS if b != "aiter")


def quantization(launch: Launch) -> str | None:
    """``--quantization``, else the config's ``quantization_config.quant_method`` (what ``ModelConfig`` resolves)."""
    if launch.server_args.quantization is not None:
        return launch.server_args.quantization
    config = launch.model.hf_config.get("quantization_config")
    method = config.get("quant_method") if isinstance(config, dict) else None
    return method if isinstance(method, str) else None


def check_quantization(launch: Launch) -> None:
    """Raise :class:`LaunchRefusedError` where SGLang refuses the quantization on this platform at model load."""
    if quantization(launch) == "mxfp4" and launch.platform.is_hip and launch.platform.name != "rocm-gfx950":
        raise LaunchRefusedError(
            f"SGLang refuses this launch: MXFP4 on {launch.platform.name} raises 'Current platform ... not support "
            "mxfp4 computation' at model load (sglang 0.5.23 layers/quantization/mxfp4.py Mxfp4Config.from_config: "
            "HIP needs gfx95); serve it on rocm-gfx950, or a bf16 checkpoint of the model")


def check_context_length(launch: Launch) -> None:
    """Raise :class:`LaunchRefusedError` where ``--context-length`` exceeds the model's own length, as
    ``ModelConfig._derive_context_length`` does unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is on."""
    given, derived = launch.server_args.context_length, derived_context_length(launch.model)
    if given is not None and given > derived and \
            not env_flag(launch.env, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        raise LaunchRefusedError(
            f"SGLang refuses this launch: --context-length {given} is above the model's own {derived} "
            "(sglang 0.5.23 configs/model_config.py ModelConfig._derive_context_length); use --context-length "
            f"{derived} or less, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 if the model holds it")


# -- the SWA surface (swa_kit.launch.surface names each; check_surface applies these) -----------------------

_HOOK = f"sglang {SGLANG_VERSION} arg_groups"
#: kv_cache_hook.py handle_page_major_kv_layout: the backends of the page-major layout (MHA models; MLA not read)
PAGE_MAJOR_BACKENDS = ("triton", "fa3", "fa4", "flashinfer", "trtllm_mha")
#: ... and of a model whose K and V rows differ in width (ASYMMETRIC_KV_BACKENDS)
ASYMMETRIC_KV_BACKENDS = ("triton", "fa3", "fa4")
#: kv_cache_hook.py: the backends a fused draft runs on (the translated MHA rails without fa4).
_DRAFT_BACKENDS: tuple[str, ...] = SpeculativeAlgorithm.EAGLE.traits.unified_memory_backends or ()


def _refuse(rule: str, source: str, way_out: str) -> LaunchRefusedError:
    return LaunchRefusedError(f"SGLang refuses this launch: {rule} ({source}); {way_out}")


def _int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"--{name.replace('_', '-')} {str(value)[:200]!r}: SGLang reads an integer") from None


def unified_memory_backends(algorithm: SpeculativeAlgorithm, sglang_version: str) -> tuple[str, ...] | None:
    """The backends ``--enable-unified-memory`` runs ``algorithm`` on (None: it refuses the algorithm); SGLang PR
    #33974 admitted DSPARK, so ``before-33974`` refuses it."""
    if algorithm is SpeculativeAlgorithm.DSPARK and not has_fix(sglang_version, 33974):
        return None
    return algorithm.traits.unified_memory_backends


def check_unified_memory(launch: Launch) -> None:
    """Raise where SGLang refuses ``--enable-unified-memory`` at start-up (the page-major gate, then its hook)."""
    args, algorithm, version = launch.server_args, launch.spec_algorithm, launch.sglang_version
    source = f"{_HOOK}/kv_cache_hook.py handle_unified_memory_pool"
    choice = choose_backend(launch)
    used = {choice.prefill_attention_backend, choice.decode_attention_backend}
    # SGLang's pipeline runs this gate first: unified memory implies the page-major layout (handle_page_major_kv_layout)
    asymmetric = any(k.head_dim != k.v_head_dim for k in launch.model.kinds.values())
    page_major = ASYMMETRIC_KV_BACKENDS if asymmetric else PAGE_MAJOR_BACKENDS
    if used - set(page_major):
        raise _refuse(f"--enable-unified-memory implies the page-major KV layout, which runs only on "
                      f"{', '.join(page_major)}{' (K and V rows differ in width)' if asymmetric else ''}, got "
                      f"{', '.join(sorted(used - set(page_major)))}",
                      f"{_HOOK}/kv_cache_hook.py handle_page_major_kv_layout",
                      f"--attention-backend {page_major[0]}, or drop --enable-unified-memory")
    allowed = unified_memory_backends(algorithm, version)
    if allowed is None:
        takes = ", ".join(a.name for a in SpeculativeAlgorithm if a.is_some() and unified_memory_backends(a, version))
        undone = "" if has_fix(version, 33974) else " (without PR #33974, which admits DSPARK)"
        raise _refuse(f"--enable-unified-memory takes --speculative-algorithm {takes} only, got "
                      f"{algorithm.name}{undone}", source, "drop --enable-unified-memory or the algorithm")
    if args.speculative_eagle_topk not in (None, 1):
        raise _refuse(f"--enable-unified-memory drafts a linear chain only, got --speculative-eagle-topk "
                      f"{args.speculative_eagle_topk}", source, "use --speculative-eagle-topk 1")
    fused = algorithm.traits.unified_refuses_unfused  # EAGLE's checks alone: the hook skips the DFLASH family's
    if fused and not hybrid_pool(launch):  # ModelConfig.is_hybrid_swa: --disable-hybrid-swa-memory turns it off
        raise _refuse(f"--enable-unified-memory + {algorithm.name} needs a hybrid-SWA (or Mamba-hybrid) target, and "
                      f"{launch.model.architecture} is not", source, "drop --enable-unified-memory")
    if allowed:
        draft = args.speculative_draft_attention_backend
        off = sorted({choice.prefill_attention_backend, choice.decode_attention_backend} - set(allowed)) or \
            ([draft] if fused and draft and draft not in _DRAFT_BACKENDS else [])
        if off:
            raise _refuse(f"--enable-unified-memory + {algorithm.name} runs only on the backends "
                          f"{', '.join(allowed)} (translated speculative ids), got {', '.join(off)}", source,
                          f"--attention-backend {allowed[0]}, or drop --enable-unified-memory")
    check_hybrid(launch)  # SGLang's pool build refuses a model without a hybrid pool (_init_pools), in its words


def _uno_refusals(launch: Launch, unread: dict[str, Any], source: str) -> None:
    """_handle_uno's checks, in its order."""
    args = launch.server_args
    if args.speculative_draft_model_path is not None:
        raise _refuse("UNO reuses the target model and takes no --speculative-draft-model-path", source,
                      "drop --speculative-draft-model-path")
    if unread.get("uno_lora_path") is None:
        raise _refuse("UNO requires --uno-lora-path", source, "give --uno-lora-path")
    if (args.speculative_num_draft_tokens or 0) < 1:
        raise _refuse("UNO requires --speculative-num-draft-tokens, its verify width, to be a positive integer",
                      source, "give --speculative-num-draft-tokens 4, say")
    parallel = parallel_of(args)
    if (parallel.tp_size, parallel.pp_size) != (1, 1) or parallel.attn_dp_size != 1:
        raise _refuse(f"UNO requires TP=PP=1 and no DP attention, got {parallel.describe()}", source,
                      "serve UNO on one GPU per replica")
    choice = choose_backend(launch)
    if (choice.prefill_attention_backend, choice.decode_attention_backend) != ("fa3", "fa3"):
        raise _refuse(f"UNO requires fa3 for both prefill and decode, got prefill "
                      f"{choice.prefill_attention_backend}, decode {choice.decode_attention_backend}", source,
                      "--attention-backend fa3 on a Hopper GPU")


def _dflash_refusals(launch: Launch, source: str) -> None:
    """``_handle_dflash`` / ``_handle_dspark``'s checks the kit reads, in their order: one pipeline stage; DFLASH's
    draft path; DFLASH's draft window at least its block."""
    args, dflash = launch.server_args, launch.spec_algorithm is SpeculativeAlgorithm.DFLASH
    if args.pp_size != 1:  # DSPARK: unless the server is a PD prefill, which the kit does not read
        raise _refuse(f"{launch.spec_algorithm.name} runs on one pipeline stage only, got --pp-size {args.pp_size}",
                      source, "drop --pp-size")
    if dflash and args.speculative_draft_model_path is None and launch.draft_model is None:
        raise _refuse("DFLASH requires --speculative-draft-model-path", source, "give the DFlash draft's path")
    window, block = args.speculative_draft_window_size, args.speculative_num_draft_tokens
    if dflash and window is not None and block is not None and window < block:
        raise _refuse(f"--speculative-draft-window-size {window} is below the DFLASH block "
                      f"(--speculative-num-draft-tokens {block})", source, f"give a window of {block} or more")


def check_speculative_surface(launch: Launch, unread: dict[str, Any]) -> None:
    """Raise where SGLang refuses an algorithm's device, UNO, DSPARK's draft, the sink size or the prefix tails;
    ``unread``: the surface's server arguments the launch sets."""
    algorithm, args = launch.spec_algorithm, launch.server_args
    devices = algorithm.traits.devices
    device = "cpu" if launch.platform.name == "cpu" else "cuda"  # ROCm's torch device is cuda too
    source = f"{_HOOK}/speculative_hook.py {algorithm.traits.handler}"
    if devices is not None and not device.startswith(devices):
        raise _refuse(f"{algorithm.name} runs on {', '.join(devices)} devices only, got {launch.platform.name}",
                      source, "run it on a GPU platform")
    if algorithm is SpeculativeAlgorithm.UNO:
        _uno_refusals(launch, unread, source)
    if algorithm.traits.dflash_family:
        _dflash_refusals(launch, source)
    draft = launch.draft_model
    if algorithm is SpeculativeAlgorithm.DSPARK and draft is not None and dspark_markov_rank(draft.hf_config) <= 0:
        raise _refuse(f"DSPARK requires markov_rank > 0 in the draft config, got "
                      f"{dspark_markov_rank(draft.hf_config)}", f"sglang {SGLANG_VERSION} model_executor/"
                      "model_runner_components/spec_aux_hidden_state.py resolve_spec_aux_hidden_state_config",
                      "serve a DSpark draft (its config sets markov_rank), or use --speculative-algorithm DFLASH")
    sink = unread.get("speculative_draft_sink_size")
    if sink is not None:
        source = f"{_HOOK}/speculative_hook.py handle_speculative_decoding"
        if _int("speculative_draft_sink_size", sink) < 0:
            raise _refuse(f"--speculative-draft-sink-size must be non-negative, got {sink}", source, "give 0 or more")
        if args.speculative_draft_window_size is None:
            raise _refuse("--speculative-draft-sink-size requires --speculative-draft-window-size", source,
                          "give --speculative-draft-window-size too, or drop the sink size")
    tails = unread.get("swa_prefix_tails")
    if tails is not None and _int("swa_prefix_tails", tails) < 0:
        raise _refuse(f"--swa-prefix-tails should be a non-negative integer, got {tails}",
                      f"{_HOOK}/kv_cache_hook.py handle_cache_compatibility", "give 0 or more")


def dspark_markov_rank(hf_config: dict[str, Any]) -> int:
    """The draft's markov_rank as ``dspark_config.parse_dspark_draft_config`` reads it: ``dspark_markov_rank``, else
    ``markov_rank`` under ``dspark_config`` / ``dflash_config``, the text config or the top level; 0 when absent."""
    nested = {**(hf_config.get("dflash_config") or {}), **(hf_config.get("dspark_config") or {})}
    text = hf_config.get("text_config") or hf_config
    raw = hf_config.get("dspark_markov_rank")
    if raw is None:
        raw = nested.get("markov_rank", text.get("markov_rank", hf_config.get("markov_rank", 0)))
    return _int("markov_rank", 0 if raw is None else raw)
