"""A vLLM 0.34 launch as typed: the ``vllm serve`` flags and the environment variables the kit reads.

Flags keep vLLM's own names (``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``). A flag the kit does
not model is refused by name, never dropped: a flag that changes the KV cache or the backend and is silently
ignored would make the audit answer for a different launch.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, fields
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.files import quote
from swa_kit.vllm_versions import VLLM_VERSION as VLLM_VERSION  # its one place; named here for older imports

#: Backends the kit models (``vllm/v1/attention/backends/registry.py``, ``AttentionBackendEnum``), by the name
#: ``--attention-backend`` takes.
VLLM_BACKENDS = ("ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN")
#: KV-cache dtypes the kit sizes (``vllm/config/cache.py``, ``CacheDType``): the model's own, or 1-byte fp8.
VLLM_KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
#: Environment variables the kit reads, with vLLM 0.34's defaults (``vllm/envs.py``).
VLLM_ENV_DEFAULTS = {
    "VLLM_ROCM_USE_AITER": "False",
    "VLLM_ROCM_USE_AITER_MHA": "True",
    "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "False",
    "VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT": "False",
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "1",
}
#: KV connectors ``--kv-transfer-config`` may name (vllm/distributed/kv_transfer/kv_connector/factory.py, the
#: registered names), and whether each one's class subclasses ``SupportsHMA`` (kv_connector/v1/base.py), which keeps
#: the hybrid KV-cache manager on. ``LMCacheMPConnector``'s class comes from the lmcache package: not listed.
VLLM_KV_CONNECTORS = {
    "ExampleConnector": False, "ExampleHiddenStatesConnector": True, "LMCacheConnectorV1": False,
    "NixlConnector": True, "NixlPullConnector": True, "NixlPushConnector": True, "HiSparseConnector": True,
    "MoRIIOConnector": True, "OffloadingConnector": True, "DecodeBenchConnector": True, "MooncakeConnector": True,
    "MooncakeStoreConnector": True, "UMBPStoreConnector": True, "FlexKVConnectorV1": False,
    "SimpleCPUOffloadConnector": True, "HF3FSKVConnector": False,
}
MULTI_CONNECTOR = "MultiConnector"  # wraps child connectors: it supports the manager when every child does
#: Names users carry over from older vLLM that 0.34 no longer reads, with the way out.
_RETIRED_ENV = {"VLLM_ATTENTION_BACKEND": "vLLM 0.34's envs.py no longer defines it: pass --attention-backend NAME"}
_LAUNCHER = re.compile(r"^(vllm|serve|python[0-9.]*|-m|vllm\.entrypoints\.openai\.api_server|env"
                       r"|\S*/(vllm|python[0-9.]*)|[A-Za-z_][A-Za-z0-9_]*=.*)$")
MAX_INT = (1 << 31) - 1


@dataclass(frozen=True)
class VllmArgs:
    """The ``vllm serve`` flags the kit reads (None: unset, vLLM decides)."""

    model: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    attention_backend: str | None = None
    disable_hybrid_kv_cache_manager: bool | None = None  # None: vLLM decides (VllmConfig.__post_init__)
    speculative_config: dict[str, Any] | None = None
    kv_transfer_config: dict[str, Any] | None = None
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    max_num_batched_tokens: int | None = None  # None: EngineArgs.get_batch_defaults (by GPU memory)
    async_scheduling: bool | None = None  # None: VllmConfig turns it on (a generative model, the default executor)
    line_env: tuple[tuple[str, str], ...] = ()  # NAME=VALUE words before `vllm serve`, read as the environment

    def kv_connector_hma(self) -> tuple[str, bool] | None:
        """The KV connector named and whether it keeps the hybrid manager on (``KVConnectorFactory.
        supports_hma_config``: a MultiConnector only when it has children and every child does); None: no connector."""
        if self.kv_transfer_config is None:
            return None
        name = self.kv_transfer_config["kv_connector"]
        if name != MULTI_CONNECTOR:
            return name, VLLM_KV_CONNECTORS[name]
        children = _children(self.kv_transfer_config)
        return f"{name}({', '.join(children)})", bool(children) and all(VLLM_KV_CONNECTORS[c] for c in children)

    def given(self) -> dict[str, Any]:
        """The fields set away from their defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "line_env" and getattr(self, f.name) != f.default}


def _human_int(flag: str, text: str) -> int:
    """vLLM's ``human_readable_int`` (``vllm/utils/argparse_utils.py``): 32k = 32000, 32K = 32768."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    try:
        if match:
            number, suffix = match.groups()
            decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
            scale = decimal.get(suffix) or 2 ** (10 * "KMGT".index(suffix) + 10)
            value = int(float(number) * scale)
        else:
            value = int(text)
    except ValueError:
        raise UsageError(f"{flag} {quote(text)}: vLLM reads an integer (e.g. 32768, 32k, 32K)") from None
    if not 0 < value <= MAX_INT:
        raise UsageError(f"{flag} {quote(text)}: must be between 1 and {MAX_INT}")
    return value


def _fraction(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag} {quote(text)}: vLLM reads a number in (0, 1]") from None
    if not 0 < value <= 1:  # CacheConfig: Field(gt=0, le=1)
        raise UsageError(f"{flag} {quote(text)}: vLLM accepts (0, 1] (CacheConfig.gpu_memory_utilization)")
    return value


def _choice(flag: str, text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise UsageError(f"{flag} {quote(text)}: the kit models {', '.join(choices)}")
    return text


def _json_object(flag: str, text: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{flag} {quote(text)}: not JSON ({error.msg}); e.g. '{example}'") from None
    except RecursionError:
        raise UsageError(f"{flag}: JSON nested too deeply to be a config") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} {quote(text)}: vLLM reads a JSON object")
    return value


def _speculative(flag: str, text: str) -> dict[str, Any]:
    return _json_object(flag, text, '{"method": "eagle3", "model": "...", "num_speculative_tokens": 3}')


def _children(config: dict[str, Any]) -> list[str]:
    """A MultiConnector's child connectors (``kv_connector_extra_config["connectors"]``)."""
    return [c["kv_connector"] for c in (config.get("kv_connector_extra_config") or {}).get("connectors", [])]


def _kv_transfer(flag: str, text: str) -> dict[str, Any]:
    """``--kv-transfer-config`` JSON: the connector (and a MultiConnector's children) must be ones the kit knows."""
    value = _json_object(flag, text, '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}')
    named = value.get("kv_connector")
    if named != MULTI_CONNECTOR:
        _known_connector(flag, text, named, [*VLLM_KV_CONNECTORS, MULTI_CONNECTOR])
        return value
    extra = value.get("kv_connector_extra_config") or {}
    children = extra.get("connectors", []) if isinstance(extra, dict) else None
    if not isinstance(children, list) or not all(isinstance(c, dict) for c in children):
        raise UsageError(f"{flag} {quote(text)}: a MultiConnector's kv_connector_extra_config.connectors is a list "
                         "of connector configs")
    for child in children:  # plain connectors only: a MultiConnector inside one is not modelled
        _known_connector(flag, text, child.get("kv_connector"), list(VLLM_KV_CONNECTORS))
    return value


def _known_connector(flag: str, text: str, name: Any, known: list[str]) -> None:
    if not isinstance(name, str) or name not in known:
        raise UsageError(f"{flag} {quote(text)}: kv_connector {str(name)[:80]!r} is not one the kit models here "
                         f"({', '.join(sorted(known))})")


#: flag -> (field, reader). Readers take (flag, text) and return the field's value.
_VALUED = {
    "--model": ("model", lambda f, t: t),
    "--tensor-parallel-size": ("tensor_parallel_size", _human_int), "-tp": ("tensor_parallel_size", _human_int),
    "--max-model-len": ("max_model_len", _human_int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _fraction),
    "--attention-backend": ("attention_backend", lambda f, t: _choice(f, t, VLLM_BACKENDS)),
    "--speculative-config": ("speculative_config", _speculative), "-sc": ("speculative_config", _speculative),
    "--kv-cache-dtype": ("kv_cache_dtype", lambda f, t: _choice(f, t, VLLM_KV_DTYPES)),
    "--block-size": ("block_size", _human_int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", _human_int),
    "--kv-transfer-config": ("kv_transfer_config", _kv_transfer),
}
#: flag -> (field, value).
_SWITCHES = {"--disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", True),
             "--no-disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", False),
             "--async-scheduling": ("async_scheduling", True), "--no-async-scheduling": ("async_scheduling", False)}
ACCEPTED_FLAGS = tuple(_VALUED) + tuple(_SWITCHES)


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _words(text: str) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The flags after the launcher words, and the NAME=VALUE assignments among those words."""
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as error:
        raise UsageError(f"vLLM flags {quote(text)}: {error} (unbalanced quotes?)") from None
    start = 0
    while start < len(words) and _LAUNCHER.match(words[start]):
        start += 1
    env = tuple((m.group(1), m.group(2)) for m in map(_ASSIGNMENT.match, words[:start]) if m)
    # `vllm serve MODEL`: the model is the first positional word after the launcher
    if start < len(words) and not words[start].startswith("-") and start > 0 and words[start - 1] == "serve":
        return ["--model", *words[start:]], env
    return words[start:], env


def parse_vllm_flags(text: str) -> VllmArgs:
    """The flags of ``vllm serve MODEL ...`` (or the flags alone); an unknown flag is refused by name."""
    (words, line_env), unknown = _words(text), []
    values: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, inline = word.partition("=")
        if flag in _SWITCHES and not eq:
            name, value = _SWITCHES[flag]
            values[name] = value
        elif flag in _VALUED:
            if not eq:
                if i + 1 >= len(words):
                    raise UsageError(f"vLLM flag {flag} needs a value")
                i, inline = i + 1, words[i + 1]
            name, reader = _VALUED[flag]
            values[name] = reader(flag, inline)
        elif word.startswith("-"):
            unknown.append(flag)
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                i += 1  # its value, if it takes one: the flag is refused below either way
        else:
            raise UsageError(f"vLLM flags: stray word {quote(word)} (a value without its flag?)")
        i += 1
    if unknown:
        raise UsageError(f"vLLM flags the kit does not model: {', '.join(unknown)}; accepted: "
                         f"{', '.join(ACCEPTED_FLAGS)} (remove them, or audit without them)")
    return VllmArgs(**values, line_env=line_env)


def _env_bool(name: str, text: str) -> bool:
    """``vllm/envs.py``: ``os.getenv(name).lower() in ("true", "1")``; the chunked switch is ``bool(int(...))``."""
    if name == "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE":
        try:
            return bool(int(text))
        except ValueError:
            raise UsageError(f"{name}={quote(text)}: vLLM reads it with int() (0 or 1), so this value would "
                             "stop it at start-up") from None
    return text.lower() in ("true", "1")


def merged_env(args: VllmArgs, env: dict[str, str]) -> dict[str, str]:
    """``--env`` pairs and the launch line's own assignments; one name with two values is refused."""
    merged = dict(env)
    for name, value in args.line_env:
        if merged.setdefault(name, value) != value:
            raise UsageError(f"{name} is {quote(merged[name])} in --env and {quote(value)} in the launch line: keep "
                             "the one the server ran with")
    return merged


def vllm_env(env: dict[str, str]) -> dict[str, bool]:
    """Each variable of :data:`VLLM_ENV_DEFAULTS` as vLLM reads it; other names are refused."""
    for name in env:
        if name in _RETIRED_ENV:
            raise UsageError(f"{name}: {_RETIRED_ENV[name]}")
        if name not in VLLM_ENV_DEFAULTS:
            raise UsageError(f"environment variable {quote(name)}: the vLLM audit reads "
                             f"{', '.join(VLLM_ENV_DEFAULTS)}")
    return {name: _env_bool(name, env.get(name, default)) for name, default in VLLM_ENV_DEFAULTS.items()}
