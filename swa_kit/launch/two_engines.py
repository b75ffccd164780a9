"""One launch for both engines: the flags that mean the same thing in SGLang and vLLM, mapped to each one's spelling.

``swa-kit audit --engine both`` takes SGLang's flags (``--server-args``) and vLLM's (``--vllm-args``). A flag that
describes the launch itself (tensor parallelism, context length, KV-cache dtype, the hybrid switch, speculation)
must reach both engines: given on one side, it is written in the other's spelling; given on both, the two must
agree. A flag that tunes one engine only (SGLang's ``--attention-backend``, ``--page-size``,
``--swa-full-tokens-ratio``; vLLM's ``--attention-backend``, ``--block-size``) stays with that engine and is listed
as its own. A flag of the launch that has no faithful counterpart is refused by name, with the way out: the report
would otherwise compare two different launches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from swa_kit.engine.spec_algorithms import SGLANG_TO_VLLM_METHOD, sglang_algorithm_for
from swa_kit.errors import UsageError
from swa_kit.launch.inputs import ServerArgsView
from swa_kit.launch.vllm_args import VllmArgs
from swa_kit.models.configs import ARCHITECTURES, ModelLayout


@dataclass(frozen=True)
class Shared:
    """A flag of the launch in both spellings, with the conversion each way (a value with no counterpart raises)."""

    meaning: str
    sglang_field: str
    sglang_flag: str
    vllm_field: str
    vllm_flag: str
    to_vllm: Callable[[Any], Any]
    to_sglang: Callable[[Any], Any]


def _lookup(table: dict[str, str], flag: str, engine: str) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value not in table:
            raise UsageError(f"{flag} {value}: {engine} has no KV-cache dtype of that meaning (mapped: "
                             f"{', '.join(table)}); way out: give each engine's own value in --server-args and "
                             "--vllm-args")
        return table[value]
    return convert


def _same(value: Any) -> Any:
    return value


#: SGLang's KV dtypes in vLLM's words (``mem_cache/kv_cache_dtype.py``; ``vllm/config/cache.py`` CacheDType); vLLM's
#: ``fp8`` is e4m3 on ROCm ("fp8 (=fp8_e4m3)", CacheConfig.cache_dtype's help).
_KV_TO_VLLM = {"auto": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "bf16": "bfloat16",
               "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16"}
_KV_TO_SGLANG = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
                 "bfloat16": "bfloat16", "float16": "float16"}

SHARED = (
    Shared("tensor-parallel GPUs", "tp_size", "--tp-size", "tensor_parallel_size", "--tensor-parallel-size",
           _same, _same),
    Shared("context length", "context_length", "--context-length", "max_model_len", "--max-model-len", _same, _same),
    Shared("KV-cache dtype", "kv_cache_dtype", "--kv-cache-dtype", "kv_cache_dtype", "--kv-cache-dtype",
           _lookup(_KV_TO_VLLM, "--kv-cache-dtype", "vLLM"), _lookup(_KV_TO_SGLANG, "--kv-cache-dtype", "SGLang")),
    Shared("sliding layers sized as full", "disable_hybrid_swa_memory", "--disable-hybrid-swa-memory",
           "disable_hybrid_kv_cache_manager", "--disable-hybrid-kv-cache-manager", _same, _same),
)

#: Flags of the launch with no faithful counterpart on the other engine: refused when given on one side only.
UNMAPPED = {
    "mem_fraction_static": ("--mem-fraction-static", "vLLM's --gpu-memory-utilization counts another budget (all "
                            "of vLLM's memory, KV = budget - weights - activations); SGLang's fraction is weights + "
                            "KV pools. Give vLLM's own value in --vllm-args too"),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "SGLang's --mem-fraction-static counts another budget "
                               "(weights + KV pools); give SGLang's own value in --server-args too"),
    "pp_size": ("--pp-size", "the vLLM audit models tensor parallelism only; audit --engine sglang alone"),
    "dp_size": ("--dp-size", "the vLLM audit models tensor parallelism only; audit --engine sglang alone"),
    "attn_dp_size": ("--attn-dp-size", "the vLLM audit models tensor parallelism only; audit --engine sglang alone"),
    "enable_dp_attention": ("--enable-dp-attention", "the vLLM audit models tensor parallelism only; audit "
                            "--engine sglang alone"),
}
#: The speculative flags, mapped as one (:func:`_speculation`).
_SPEC_FIELDS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                "speculative_eagle_topk", "speculative_num_draft_tokens")
@dataclass(frozen=True)
class MappedFlag:
    """One row of the launch table: a flag as each engine gets it, and where it came from."""

    meaning: str
    sglang: str  # the words SGLang gets ("" when none)
    vllm: str
    how: str  # given on both | from SGLang's | from vLLM's | SGLang's own | vLLM's own


@dataclass(frozen=True)
class PairedLaunch:
    """The words added to each engine's flags, and the table of every flag the launch sets."""

    sglang_words: tuple[str, ...]
    vllm_words: tuple[str, ...]
    rows: tuple[MappedFlag, ...]


def _given(value: Any, default: Any) -> bool:
    return value is not None and value != default


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


def _flag(name: str, value: Any) -> list[str]:
    return [name] if value is True else [] if value is False else [name, str(value)]


def _spec_to_vllm(args: ServerArgsView) -> dict[str, Any]:
    algorithm = args.speculative_algorithm or ""
    if algorithm not in SGLANG_TO_VLLM_METHOD:
        raise UsageError(f"--speculative-algorithm {algorithm}: vLLM has no method of that meaning (mapped: "
                         f"{', '.join(SGLANG_TO_VLLM_METHOD)}); way out: audit --engine sglang alone")
    if (args.speculative_eagle_topk or 1) > 1:
        raise UsageError(f"--speculative-eagle-topk {args.speculative_eagle_topk}: a draft tree; the vLLM plan models "
                         "chains only (vLLM's speculative_token_tree is not read); way out: topk 1, or audit "
                         "--engine sglang alone")
    config: dict[str, Any] = {"method": SGLANG_TO_VLLM_METHOD[algorithm]}
    if args.speculative_draft_model_path is not None:
        config["model"] = args.speculative_draft_model_path
    if args.speculative_num_steps is not None:  # a chain of N draft steps proposes N tokens
        config["num_speculative_tokens"] = args.speculative_num_steps
    return config


def _spec_to_sglang(config: dict[str, Any], model: ModelLayout) -> list[str]:
    method = str(config.get("method"))
    arch = ARCHITECTURES.get(model.architecture)
    algorithm = sglang_algorithm_for(method, gemma4=model.architecture.startswith("Gemma4"),
                                     mtp_layers=bool(arch and arch.mtp_draft))
    if algorithm is None:
        raise UsageError(f"--speculative-config method {method!r}: SGLang has no algorithm of that meaning (mapped: "
                         f"{', '.join(sorted(set(SGLANG_TO_VLLM_METHOD.values())))}); way out: audit --engine vllm "
                         f"alone, or give SGLang's --speculative-algorithm for {model.architecture} in --server-args")
    words = ["--speculative-algorithm", algorithm]
    if "model" in config:
        words += ["--speculative-draft-model-path", str(config["model"])]
    if "num_speculative_tokens" in config:
        words += ["--speculative-num-steps", str(config["num_speculative_tokens"])]
    return words


def _speculation(sglang: ServerArgsView, vllm: VllmArgs, model: ModelLayout) -> tuple[list[str], list[str], MappedFlag]:
    """The drafter on both engines: mapped from the side that names it, or checked where both do."""
    s_given, v_config = sglang.speculative_algorithm is not None, vllm.speculative_config
    if s_given and v_config is not None:
        mapped = _spec_to_vllm(sglang)
        differ = [key for key in mapped if key in v_config and mapped[key] != v_config[key]]
        if differ:
            raise UsageError(f"--speculative-algorithm {sglang.speculative_algorithm} and its flags are vLLM's "
                             f"{ {k: mapped[k] for k in differ} }, but --vllm-args gives "
                             f"{ {k: v_config[k] for k in differ} }: the engines would run different drafters; keep "
                             "one of them")
        return [], [], MappedFlag("speculation", sglang.speculative_algorithm or "", str(v_config), "given on both")
    if s_given:
        config = _spec_to_vllm(sglang)
        text = json.dumps(config)
        return [], ["--speculative-config", text], MappedFlag("speculation", sglang.speculative_algorithm or "", text,
                                                             "from SGLang's")
    assert v_config is not None
    words = _spec_to_sglang(v_config, model)
    return words, [], MappedFlag("speculation", " ".join(words), str(v_config), "from vLLM's")


def _shared_row(flag: Shared, s_value: Any, v_value: Any, s_on: bool, v_on: bool
                ) -> tuple[list[str], list[str], MappedFlag]:
    if s_on and v_on:
        if flag.to_vllm(s_value) != v_value:
            raise UsageError(f"{flag.sglang_flag} {s_value} in --server-args and {flag.vllm_flag} {v_value} in "
                             f"--vllm-args: one launch has one {flag.meaning}; keep one of them")
        return [], [], MappedFlag(flag.meaning, f"{flag.sglang_flag} {s_value}", f"{flag.vllm_flag} {v_value}",
                                  "given on both")
    if s_on:
        value = flag.to_vllm(s_value)
        return [], _flag(flag.vllm_flag, value), MappedFlag(flag.meaning, f"{flag.sglang_flag} {s_value}",
                                                            " ".join(_flag(flag.vllm_flag, value)), "from SGLang's")
    value = flag.to_sglang(v_value)
    words = _flag(flag.sglang_flag, value)  # none: vLLM's value is SGLang's default (--no-disable-... is off)
    return words, [], MappedFlag(flag.meaning, " ".join(words) or "(SGLang's default)", f"{flag.vllm_flag} {v_value}",
                                 "from vLLM's")


def _refuse_unmapped(sglang: ServerArgsView, vllm: VllmArgs) -> None:
    s_given, v_given = sglang.given(), vllm.given()
    memory = ("mem_fraction_static" in s_given, "gpu_memory_utilization" in v_given)
    for name, (flag, why) in UNMAPPED.items():
        one_sided = name in s_given or name in v_given
        if name in ("mem_fraction_static", "gpu_memory_utilization") and all(memory):
            one_sided = False  # each engine has its own budget: both given, each is kept
        if one_sided:
            raise UsageError(f"{flag}: no flag of the same meaning on the other engine: {why}")


def pair(sglang: ServerArgsView, vllm: VllmArgs, model: ModelLayout) -> PairedLaunch:
    """The words each engine's flags gain so both serve one launch, and the table of every flag set.

    Raises :class:`~swa_kit.errors.UsageError` naming a flag of the launch that has no counterpart, or one given on
    both sides with two meanings.
    """
    _refuse_unmapped(sglang, vllm)
    s_defaults, v_defaults = _defaults(ServerArgsView), _defaults(VllmArgs)
    s_words: list[str] = []
    v_words: list[str] = []
    rows: list[MappedFlag] = []
    for flag in SHARED:
        s_value, v_value = getattr(sglang, flag.sglang_field), getattr(vllm, flag.vllm_field)
        s_on = _given(s_value, s_defaults[flag.sglang_field])
        v_on = _given(v_value, v_defaults[flag.vllm_field])
        if s_on or v_on:
            add_s, add_v, row = _shared_row(flag, s_value, v_value, s_on, v_on)
            s_words, v_words, rows = s_words + add_s, v_words + add_v, rows + [row]
    if sglang.speculative_algorithm is not None or vllm.speculative_config is not None:
        add_s, add_v, row = _speculation(sglang, vllm, model)
        s_words, v_words, rows = s_words + add_s, v_words + add_v, rows + [row]
    mapped_s = {f.sglang_field for f in SHARED} | set(_SPEC_FIELDS) | {"model_path"}
    mapped_v = {f.vllm_field for f in SHARED} | {"speculative_config", "model"}
    budgets = "each engine's own (the two count different budgets)"
    for name, value in sglang.given().items():
        if name not in mapped_s:  # what is left of UNMAPPED here is a budget both sides gave (else refused above)
            rows.append(MappedFlag(name.replace("_", "-"), f"--{name.replace('_', '-')} {value}", "",
                                   budgets if name in UNMAPPED else "SGLang's own"))
    for name, value in vllm.given().items():
        if name not in mapped_v:
            rows.append(MappedFlag(name.replace("_", "-"), "", f"--{name.replace('_', '-')} {value}",
                                   budgets if name in UNMAPPED else "vLLM's own"))
    return PairedLaunch(tuple(s_words), tuple(v_words), tuple(rows))


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--env`` pairs as (SGLang's, vLLM's): vLLM reads ``VLLM_*``, SGLang the rest (each engine checks its own)."""
    vllm = {k: v for k, v in env.items() if k.startswith("VLLM_")}
    return {k: v for k, v in env.items() if k not in vllm}, vllm
