"""The attention backend SGLang 0.5.23 really uses for a launch, and whether it builds a hybrid SWA pool.

Two steps, as in SGLang's argument resolution:

1. the per-architecture overrides (``arg_groups/model_overrides/<family>.py``), which branch on the
   platform (``runtime_context.get_platform()``) and on which backends the user set;
2. the generic default (``arg_groups/overrides.py _attention_backend_default`` ->
   ``model_override_base.get_default_attn_backend``) when ``attention_backend`` is still unset; then
   the prefill / decode split (``model_override_base.attention_backends_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.launch.inputs import Launch
from swa_kit.models.configs import text_fields
from swa_kit.sglang_versions import has_fix

_OVERRIDES = "sglang 0.5.23 arg_groups/model_overrides/"
_DEFAULT = "sglang 0.5.23 arg_groups/model_override_base.py get_default_attn_backend"
_SPLIT = "sglang 0.5.23 arg_groups/model_override_base.py attention_backends_of"


@dataclass(frozen=True)
class BackendChoice:
    """The three backend fields after resolution, and the source of each step."""

    attention_backend: str
    prefill_attention_backend: str
    decode_attention_backend: str
    why: str  # which rule set attention_backend
    source: str
    disable_hybrid_swa_memory: bool
    hybrid_why: str


def _platform_pick(platform: str, sm100: str, sm90: str, hip: str, other: str) -> str:
    if platform == "cuda-sm100":
        return sm100
    if platform == "cuda-sm90":
        return sm90
    return hip if platform.startswith("rocm") else other


def _model_override(launch: Launch) -> tuple[dict, str]:
    """The architecture's override declarations (only those that touch attention or the pool)."""
    arch, args, platform = launch.model.architecture, launch.server_args, launch.platform.name
    unset = args.attention_backend is None and args.prefill_attention_backend is None \
        and args.decode_attention_backend is None
    if arch.startswith("Gemma4"):
        default = "trtllm_mha" if platform == "cuda-sm100" else "triton"
        if not has_fix(launch.sglang_version, 25547):  # the block before PR #25547 set it whatever was given
            return {"attention_backend": default}, (f"{_OVERRIDES}gemma4.py without PR #25547: Gemma-4's default "
                                                    f"{default} replaces any attention_backend given")
        if unset or args.attention_backend is None:
            return {"attention_backend": default}, f"{_OVERRIDES}gemma4.py: Gemma-4 defaults to {default}"
        return {}, f"{_OVERRIDES}gemma4.py: attention_backend given, kept"
    if arch == "GptOssForCausalLM" and unset:
        pick = _platform_pick(platform, "trtllm_mha", "fa3", "aiter", "triton")
        return {"attention_backend": pick}, f"{_OVERRIDES}gpt_oss.py: GPT-OSS on {platform} -> {pick}"
    if arch.startswith("Llama4") and args.attention_backend is None and platform != "cpu":
        pick = _platform_pick(platform, "trtllm_mha", "fa3", "aiter", "triton")
        return {"attention_backend": pick}, f"{_OVERRIDES}llama4.py: Llama-4 on {platform} -> {pick}"
    if arch.startswith("MiMoV2") and unset and platform == "cuda-sm100":
        return {"attention_backend": "fa4"}, f"{_OVERRIDES}mimo_v2.py: MiMo-V2 on SM100 -> fa4"
    if arch.startswith(("Gemma2", "Gemma3")):
        return {"disable_hybrid_swa_memory": True}, f"{_OVERRIDES}gemma2_gemma3.py: hybrid SWA memory disabled"
    if arch == "Exaone4ForCausalLM" and text_fields(launch.model).get("sliding_window_pattern") is not None:
        overrides: dict = {"disable_hybrid_swa_memory": True}
        if args.attention_backend is None:  # fa3 needs SM80+; ROCm and the rest get triton
            overrides["attention_backend"] = _platform_pick(platform, "trtllm_mha", "fa3", "triton", "triton")
        return overrides, (f"{_OVERRIDES}exaone.py: EXAONE-4 with sliding_window_pattern -> "
                           f"{overrides.get('attention_backend', 'attention_backend given, kept')}")
    return {}, ""


def _topk_one(launch: Launch) -> bool:
    """``utils/common.py is_no_spec_infer_or_topk_one`` as the default is picked: topk unset, or 1 on pages of 1."""
    topk, page = launch.server_args.speculative_eagle_topk, launch.server_args.page_size
    return topk is None or (topk == 1 and page in (None, 1))


def _generic_default(launch: Launch) -> str:
    """``get_default_attn_backend`` for a non-MLA model (every architecture the kit reads is one)."""
    platform, args = launch.platform.name, launch.server_args
    if platform == "cuda-sm90" and _topk_one(launch):
        return "fa3"
    # SM100 wants the topk settled: with speculation and no --speculative-eagle-topk (topk is chosen later, by
    # speculative_hook.py _auto_choose_speculative_params) it skips trtllm_mha / fa4 (_forces_eagle_topk_one).
    settled = args.speculative_algorithm is None or args.speculative_eagle_topk is not None \
        or launch.spec_algorithm.traits.topk_forced_to_one
    if platform == "cuda-sm100" and _topk_one(launch) and settled:
        asymmetric = any(k.head_dim != k.v_head_dim for k in launch.model.kinds.values())
        return "fa4" if asymmetric else "trtllm_mha"
    if launch.platform.is_hip:
        return "aiter"
    return "triton"  # flashinfer where installed and the model has no attention sinks; the kit assumes triton


def choose_backend(launch: Launch) -> BackendChoice:
    """Resolve the attention backends and the hybrid-pool switch the way SGLang 0.5.23 does."""
    args = launch.server_args
    overrides, why = _model_override(launch)
    backend = overrides.get("attention_backend", args.attention_backend)
    source = why or "server arguments"
    if args.prefill_attention_backend and args.prefill_attention_backend == args.decode_attention_backend:
        backend = args.prefill_attention_backend
        source = "sglang 0.5.23 arg_groups/overrides.py _attention_backend_default: prefill == decode"
    elif backend is None:
        backend, source = _generic_default(launch), f"{_DEFAULT} on {launch.platform.name}"
    elif backend == args.attention_backend and not why.endswith(backend):
        source = "--attention-backend"
    prefill = args.prefill_attention_backend or backend
    decode = args.decode_attention_backend or backend
    disabled = args.disable_hybrid_swa_memory or overrides.get("disable_hybrid_swa_memory", False)
    if args.disable_hybrid_swa_memory:
        hybrid_why = "--disable-hybrid-swa-memory"
    elif overrides.get("disable_hybrid_swa_memory"):
        hybrid_why = why
    else:
        hybrid_why = ""
    return BackendChoice(backend, prefill, decode, source, f"{source}; split: {_SPLIT}", disabled, hybrid_why)


def hybrid_swa_memory_off(launch: Launch) -> tuple[bool, str]:
    """``disable_hybrid_swa_memory`` as SGLang resolves it, and what set it ("" when hybrid SWA memory stays on).

    The user's flag or the target architecture's override (``arg_groups/model_overrides/``, e.g. Gemma-2/3/3n's
    ``gemma2_gemma3.py``).
    The draft's ``ModelConfig`` reads the same resolved value (``configs/model_config.py
    ModelConfig.from_server_args`` passes ``resolving_view(server_args).disable_hybrid_swa_memory``, and
    ``spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state`` builds the draft's config that way), so the
    target's override turns a hybrid-SWA draft's SWA pool off too.
    """
    choice = choose_backend(launch)
    return choice.disable_hybrid_swa_memory, choice.hybrid_why


_PAGES = "sglang 0.5.23 arg_groups/overrides.py"
TRTLLM_MHA_PAGES = (16, 32, 64, 128)


def choose_page_size(launch: Launch, choice: BackendChoice) -> tuple[int, str]:
    """The page size after the backends' constraints, then SGLang's default; and the rule that set it."""
    args, env = launch.server_args, launch.env
    used = {choice.attention_backend, choice.prefill_attention_backend, choice.decode_attention_backend}
    page, source = args.page_size, "--page-size"
    if "trtllm_mha" in used | {args.speculative_draft_attention_backend} and page not in TRTLLM_MHA_PAGES:
        page, source = 64, (f"{_PAGES} _mla_backend_page_constraints: trtllm_mha takes pages of 16, 32, 64 or 128 "
                            f"tokens, so {page if page is not None else 'the default'} becomes 64")
    if "fa4" in used and launch.platform.name == "cuda-sm100" and (args.speculative_eagle_topk or 0) <= 1:
        page, source = 128, f"{_PAGES} _fa4_page_constraint: FA4 on SM100 takes pages of 128 tokens (non-MLA)"
    if page is not None:
        return page, source
    if launch.platform.is_hip and env.get("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd").lower() == "vectorized_5d":
        return 64, f"{_PAGES} _page_size_default: 64 for the vectorized_5d layout on HIP"
    return 1, f"{_PAGES} _page_size_default: 1"
