"""The environment variables SGLang 0.5.23's aiter backend routes by, its SWA pool sizing and start-up read.

Only these names are accepted in a launch's environment (:func:`check_env`); any other is refused with the
accepted ones, so a typo never silently leaves a route unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from swa_kit.errors import UsageError

#: Routing and sizing variables: SGLang 0.5.23's default, how SGLang reads the value, and what it changes.
#: "bool": ``utils/common.py get_bool_env_var`` (true / 1, false / 0); "EnvBool": ``environ.py`` (also yes / y,
#: no / n); "layout" and "int" are checked as ``mem_cache/memory_pool.py`` and ``environ.py EnvInt`` do.
ENV_VARS: dict[str, tuple[str, str, str]] = {
    "SGLANG_USE_AITER_UNIFIED_ATTN": ("0", "bool", "aiter: unified_attention in every mode when no SWA pool forces it"),
    "SGLANG_AITER_UNIFIED_VERIFY": ("1", "bool", "aiter: target verify through unified_attention when topk == 1"),
    "SGLANG_AITER_UNIFIED_DRAFT_EXTEND": ("1", "EnvBool", "aiter: draft extend (v2) through unified_attention"),
    "SGLANG_AITER_KV_CACHE_LAYOUT": ("nhd", "layout", ("aiter: 'vectorized_5d' sends decode to pa_decode_gluon and "
                                                       "extend to forward_extend_vectorized_5d (SGLANG_USE_AITER=1)")),
    "SGLANG_USE_AITER": ("0", "EnvBool", "ROCm: aiter kernels in the KV pool; without it the 5D layout is ignored"),
    "SGLANG_AITER_FP8_PREFILL_ATTN": ("1", "bool", "aiter: fp8 prefill for full-attention layers on gfx950"),
    "SGLANG_AITER_PAGED_PREFILL_ASM": ("1", "EnvBool", "aiter: asm paged prefill for full-attention layers"),
    "SGLANG_AITER_ASM_PREFILL_HD128": ("1", "EnvBool", "aiter: asm prefill for head_dim 128 full-attention layers"),
    "SGLANG_SWA_EVICTION_INTERVAL": ("128", "int", "SWA eviction interval; the request-cap pool configurator reads it"),
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": ("0", "EnvBool", ("start-up: accepts a --context-length above the "
                                                                   "model's own (else ModelConfig refuses it)")),
}
_ACCEPTED = {"bool": (("true", "1"), ("false", "0")), "EnvBool": (("true", "1", "yes", "y"), ("false", "0", "no", "n"))}


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The routing environment as strings; an unknown name or a bad value is refused in one line."""
    env = {str(k): str(v) for k, v in (env or {}).items()}
    unknown = sorted(set(env) - set(ENV_VARS))
    if unknown:
        raise UsageError(f"environment variable {unknown[0]!r} is not one the aiter backend's routing or the SWA "
                         f"pool sizing reads; accepted: {', '.join(ENV_VARS)}")
    for name, value in env.items():
        default, kind, _ = ENV_VARS[name]
        if kind == "layout":
            if value.lower() not in ("nhd", "vectorized_5d"):
                raise UsageError(f"{name}={value!r}: SGLang accepts 'nhd' or 'vectorized_5d' "
                                 "(mem_cache/memory_pool.py)")
        elif kind == "int":
            if not value.isdigit():
                raise UsageError(f"{name}={value!r}: a whole number of steps (default {default})")
        elif value.lower() not in _ACCEPTED[kind][0] + _ACCEPTED[kind][1]:
            raise UsageError(f"{name}={value!r}: SGLang reads this boolean as one of {_ACCEPTED[kind][0]} (on) or "
                             f"{_ACCEPTED[kind][1]} (off); anything else is silently off or an error")
    return env


def env_value(env: Mapping[str, str], name: str) -> str:
    """A routing variable's value, SGLang's default when unset."""
    return str(env.get(name, ENV_VARS[name][0])).strip().lower()


def env_flag(env: Mapping[str, str], name: str) -> bool:
    return env_value(env, name) in _ACCEPTED[ENV_VARS[name][1]][0]
