"""A real launch as SGLang spells it: the model config, server arguments, environment, platform and version.

:class:`Launch` is what :func:`swa_kit.launch.decide.decide` reads. Server arguments keep SGLang's own
field names (``arg_groups/fields/*.py`` in SGLang 0.5.23) and are read from any of:

* the flags as typed: ``--attention-backend aiter --page-size 16`` (a whole ``python -m
  sglang.launch_server ...`` or ``sglang serve ...`` line works too);
* the line SGLang logs at start-up: ``server_args=ServerArgs(model_path='...', page_size=1, ...)``.

Flags and fields the kit does not read are kept in :attr:`ServerArgsView.not_read` and shown in the
report, never silently dropped. The environment holds only the variables the aiter backend's routing
and the SWA pool sizing read (:data:`ENV_VARS`); any other name is refused with the accepted ones.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from swa_kit.models.configs import ModelLayout, load_hf_config, load_model
from swa_kit.engine.environment import check_env
from swa_kit.engine.spec_algorithms import LAUNCH_NAMES, SpeculativeAlgorithm
from swa_kit.errors import UsageError
from swa_kit.files import quote, read_text
from swa_kit.sglang_versions import SGLANG_VERSION, SGLANG_VERSIONS, has_pr_38756, versions_help

GIB = 1 << 30

_BOOL_TRUE = ("1", "true", "yes", "y", "on")  # server-argument booleans written out (--flag=true, a file)
MAX_ARGS_BYTES = 1 << 20  # a launch command or a logged ServerArgs line is a few kilobytes
MAX_INT = (1 << 31) - 1  # page sizes, token counts, request counts: past any real launch
MAX_GPU_GIB = 1 << 20  # a GPU of a pebibyte: past any real one, short of float overflow
#: Words before the flags of a launch command (python -m sglang.launch_server, sglang serve, env VAR=...).
_LAUNCHER = re.compile(r"^(python[0-9.]*|-m|sglang\.launch_server|sglang|serve|env|[A-Za-z_][A-Za-z0-9_]*=.*|\S*/"
                       r"(python[0-9.]*|sglang))$")

#: Platforms: SGLang's platform predicates they set, and a typical GPU's memory (assumed when not given).
PLATFORMS: dict[str, tuple[str, int | None]] = {
    "rocm-gfx942": ("is_hip (MI300X, 192 GB)", 192 * 10**9),
    "rocm-gfx950": ("is_hip, gfx95 (MI355X, 288 GB)", 288 * 10**9),
    "cuda-sm90": ("is_sm90 / is_hopper (H100, 80 GB)", 80 * 10**9),
    "cuda-sm100": ("is_sm100 (B200, 180 GB)", 180 * 10**9),
    "cpu": ("no GPU", None),
}


@dataclass(frozen=True)
class ServerArgsView:
    """The server arguments the kit reads, under SGLang's field names (None = unset, SGLang decides)."""

    model_path: str | None = None
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    speculative_draft_attention_backend: str | None = None
    page_size: int | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None  # else the config's quantization_config.quant_method (ModelConfig)
    disable_hybrid_swa_memory: bool = False
    enable_unified_memory: bool = False  # one byte buffer for the full and SWA pools (swa_kit.launch.unified_memory)
    swa_full_tokens_ratio: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    disable_radix_cache: bool = False
    chunked_prefill_size: int | None = None
    enable_hierarchical_cache: bool = False
    disable_overlap_schedule: bool = False
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_steps: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_window_size: int | None = None
    speculative_ngram_max_bfs_breadth: int | None = None  # NGRAM's topk (SGLang's default 10)
    mem_fraction_static: float | None = None
    context_length: int | None = None  # overrides the config's context length (model_config.context_len)
    tp_size: int = 1  # arg_groups/fields/parallel.py, spelled --tp-size, --tensor-parallel-size or --tp
    pp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False  # deprecated: --dp-size N with it becomes attn_dp_size N (parallel_hook.py)
    not_read: tuple[str, ...] = ()  # flags / fields given but not read by the kit (shown in the report)
    # their values as given, for swa_kit.launch.surface's refusals and notes
    not_read_values: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    def given(self) -> dict[str, Any]:
        """The fields set away from their defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _UNREAD and getattr(self, f.name) != f.default}


_UNREAD = ("not_read", "not_read_values")
_FIELDS = {f.name: f for f in fields(ServerArgsView) if f.name not in _UNREAD}
#: Other spellings SGLang's parser accepts for the same fields (``Arg(aliases=...)`` in arg_groups/fields/).
_ALIASES = {"tp": "tp_size", "tensor_parallel_size": "tp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size",
            "dp": "dp_size", "data_parallel_size": "dp_size", "attention_data_parallel_size": "attn_dp_size"}
_BOOL_FIELDS = {n for n, f in _FIELDS.items() if f.type in ("bool", bool)}


def _coerce(name: str, value: Any) -> Any:
    """``value`` as the field's type: a scalar, and a number finite and within :data:`MAX_INT`."""
    kind = str(_FIELDS[name].type)
    if value is None:
        return None
    refused = UsageError(f"server argument {name}={quote(value)}: SGLang reads it as {kind}")
    if not isinstance(value, (str, int, float, bool)):
        raise refused
    try:
        if "bool" in kind:
            return value if isinstance(value, bool) else str(value).lower() in _BOOL_TRUE
        number: int | float
        if "int" in kind:
            number = int(value)
        elif "float" in kind:
            number = float(value)
        else:
            return str(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf), from 1e999 in a logged line
        raise refused from None
    if not math.isfinite(number) or abs(number) > MAX_INT:
        raise UsageError(f"server argument {name}={quote(value)}: out of range (a finite number, at most "
                         f"{MAX_INT:,})")
    return number


def _from_log_line(text: str) -> dict[str, Any]:
    """The keyword arguments of the ``ServerArgs(...)`` repr SGLang logs (literal values only)."""
    snippet = text[text.index("ServerArgs("):]
    snippet = snippet[:snippet.rfind(")") + 1]  # the log line may carry text after the closing parenthesis
    try:
        call = ast.parse(snippet, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError):  # RecursionError: brackets nested past the parser
        call = None
    if not isinstance(call, ast.Call):
        raise UsageError("cannot read the ServerArgs(...) line: paste it whole, from 'ServerArgs(' to its ')'")
    if call.args or any(keyword.arg is None for keyword in call.keywords):
        raise UsageError("the ServerArgs(...) line holds a positional or **{...} argument: SGLang logs name=value "
                         "pairs only; paste the line as SGLang logged it")
    values: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:  # refused above; narrows the name for the type checker
            continue
        if keyword.arg in values:
            raise UsageError(f"the ServerArgs(...) line sets {keyword.arg} twice: paste the line as SGLang logged it")
        try:
            values[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            values[keyword.arg] = ast.unparse(keyword.value)  # enums, objects: fields the kit does not read
    return values


def flag_words(text: str) -> list[str]:
    """The words of a launch command from its first flag on, as SGLang's parser receives them.

    Words before the first flag may only be the launcher (``python -m sglang.launch_server``, ``sglang serve``,
    ``env VAR=value``); any other word is refused (SGLang's own parser refuses it too).
    """
    try:
        tokens = shlex.split(text.replace("\\\n", " "))
    except ValueError as error:
        raise UsageError(f"cannot split the server arguments ({error}): check the quotes") from None
    start = next((i for i, token in enumerate(tokens) if token.startswith("--")), len(tokens))
    for token in tokens[:start]:
        if not _LAUNCHER.match(token):
            raise UsageError(f"server arguments: {quote(token)} is not a flag (SGLang's parser refuses it); quote a "
                             "value with spaces, or drop the word")
    return tokens[start:]


def _from_flags(text: str) -> dict[str, Any]:
    """``--flag value`` pairs (and bare boolean flags) of a launch command.

    Words before the first flag may only be the launcher (``python -m sglang.launch_server``, ``sglang serve``,
    ``env VAR=value``); any other word that is neither a flag nor a flag's value is refused: SGLang's own
    parser refuses it too, and dropping it would audit another launch than the one given.
    """
    tokens = flag_words(text)
    values: dict[str, Any] = {}
    value: str | bool
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            after = f" after --{list(values)[-1].replace('_', '-')}" if values else ""
            raise UsageError(f"server arguments: {quote(token)}{after} is not a flag (SGLang's parser refuses "
                             "it); quote a value with spaces, or drop the word")
        flag, _, inline = token[2:].partition("=")
        name = flag.replace("-", "_")
        name = _ALIASES.get(name, name)
        takes_value = name not in _BOOL_FIELDS
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if inline:
            value, i = inline, i + 1
        elif takes_value and nxt is not None and not nxt.startswith("--"):
            value, i = nxt, i + 2
        elif name in _FIELDS and takes_value:
            raise UsageError(f"server arguments: --{flag} needs a value (SGLang's parser: expected one argument)")
        else:
            value, i = True, i + 1
        if name in values and values[name] != value:
            raise UsageError(f"--{quote(flag)[1:-1]} is given twice ({quote(values[name])} and {quote(value)}): "
                             "keep one")
        values[name] = value
    return values


def parse_server_args(text: str | None) -> ServerArgsView:
    """Read server arguments from flags, a launch command or SGLang's logged ``ServerArgs(...)`` line."""
    if not text or not text.strip():
        return ServerArgsView()
    if len(text) > MAX_ARGS_BYTES:
        raise UsageError(f"server arguments of {len(text):,} characters: a launch is at most {MAX_ARGS_BYTES:,}")
    if "ServerArgs(" in text:
        values = _from_log_line(text)
    else:
        values = _from_flags(text)
    known = {k: _coerce(k, v) for k, v in values.items() if k in _FIELDS}
    not_read = tuple(sorted(k for k in values if k not in _FIELDS and not k.startswith("_")))
    return _check_args(ServerArgsView(**known, not_read=not_read,
                                      not_read_values=tuple((k, values[k]) for k in not_read)))


def server_args_text(value: str | None) -> str | None:
    """``value`` is the arguments themselves, or a file holding a launch command or the ServerArgs line: the text."""
    if value and not value.lstrip().startswith("-") and "ServerArgs(" not in value and "\n" not in value:
        path = Path(value)
        if path.exists() and " " not in value:
            return read_text(path, "--server-args file", MAX_ARGS_BYTES)
        if " " not in value:
            raise UsageError(f"--server-args {quote(value)}: no such file; give the flags in quotes "
                             "(\"--attention-backend aiter ...\"), a launch command, or a file holding either")
    return value


def read_server_args(value: str | None) -> ServerArgsView:
    """``value`` is the arguments themselves, or a file holding a launch command or the ServerArgs line."""
    return parse_server_args(server_args_text(value))


def _check_args(args: ServerArgsView) -> ServerArgsView:
    """The refusals SGLang's resolution makes, in one line each (the kit refuses before deciding)."""
    ratio = args.swa_full_tokens_ratio
    if ratio is not None and not 0 < ratio <= 1:
        raise UsageError(f"--swa-full-tokens-ratio {ratio}: SGLang accepts 0 < ratio <= 1 "
                         "(arg_groups/kv_cache_hook.py)")
    if args.mem_fraction_static is not None and not 0 < args.mem_fraction_static < 1:
        raise UsageError(f"--mem-fraction-static {args.mem_fraction_static}: a fraction of GPU memory, 0 < f < 1")
    for name in ("tp_size", "pp_size", "dp_size", "attn_dp_size", "context_length", "page_size",
                 "max_running_requests", "max_total_tokens", "speculative_eagle_topk",
                 "speculative_num_steps", "speculative_num_draft_tokens", "speculative_draft_window_size",
                 "speculative_ngram_max_bfs_breadth"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be >= 1")
    algorithm = args.speculative_algorithm
    if algorithm is not None and algorithm.upper() not in LAUNCH_NAMES:
        raise UsageError(f"--speculative-algorithm {algorithm!r}: one of {', '.join(LAUNCH_NAMES)}")
    spec_only = [n for n in ("speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_window_size",
                             "speculative_draft_model_path", "speculative_num_steps") if getattr(args, n) is not None]
    if algorithm is None and spec_only:
        raise UsageError(f"--{spec_only[0].replace('_', '-')} is set but --speculative-algorithm is not: "
                         "give the algorithm, or drop the speculative flags")
    if algorithm is None:
        return args
    if SpeculativeAlgorithm.from_string(algorithm).traits.single_chain and (args.speculative_eagle_topk or 1) != 1:
        raise UsageError(f"--speculative-eagle-topk {args.speculative_eagle_topk} with {algorithm.upper()}: it drafts "
                         "a single chain, topk must be 1")
    return dataclasses.replace(args, speculative_algorithm=algorithm.upper())


@dataclass(frozen=True)
class Platform:
    """The accelerator the server runs on, and its memory (bytes; assumed from the platform when not given)."""

    name: str
    gpu_memory_bytes: int | None
    memory_assumed: bool = False

    @property
    def is_hip(self) -> bool:
        return self.name.startswith("rocm")

    @classmethod
    def parse(cls, name: str, gpu_memory_gib: float | None = None) -> Platform:
        if name not in PLATFORMS:
            raise UsageError(f"platform {name!r}: one of {', '.join(PLATFORMS)}")
        if gpu_memory_gib is not None:
            if not 0 < gpu_memory_gib <= MAX_GPU_GIB:  # also refuses nan and inf
                raise UsageError(f"GPU memory {gpu_memory_gib!r} GiB: a finite size, 0 < GiB <= {MAX_GPU_GIB:,}")
            return cls(name, int(gpu_memory_gib * GIB))
        return cls(name, PLATFORMS[name][1], memory_assumed=PLATFORMS[name][1] is not None)


@dataclass(frozen=True)
class Launch:
    """One SGLang launch: what :func:`swa_kit.launch.decide.decide` reads."""

    model: ModelLayout
    server_args: ServerArgsView = field(default_factory=ServerArgsView)
    env: dict[str, str] = field(default_factory=dict)
    platform: Platform = field(default_factory=lambda: Platform.parse("rocm-gfx942"))
    sglang_version: str = SGLANG_VERSION
    draft_model: ModelLayout | None = None  # the draft's own config (--speculative-draft-model-path)
    weights_bytes: int | None = None  # model weights on the GPU, to subtract from the static budget

    @classmethod
    def from_inputs(
        cls,
        *,
        hf_config: str | Path | None = None,
        model: str | None = None,
        server_args: str | None = None,
        env: Mapping[str, str] | None = None,
        platform: str = "rocm-gfx942",
        gpu_memory_gib: float | None = None,
        sglang_version: str = SGLANG_VERSION,
        draft_hf_config: str | Path | None = None,
        weights_gib: float | None = None,
    ) -> Launch:
        """Build a launch from what an engineer has; every bad input raises one clear line."""
        if hf_config is not None and model is None:
            layout = load_hf_config(hf_config)
        elif model is not None and hf_config is None:
            layout = load_model(model)
        else:
            raise UsageError("give exactly one of --hf-config PATH (a config.json or model directory) or --model NAME")
        if sglang_version not in SGLANG_VERSIONS:
            raise UsageError(f"SGLang version {quote(sglang_version)}: one of {', '.join(SGLANG_VERSIONS)} "
                             f"({versions_help()})")
        args = read_server_args(server_args)
        if draft_hf_config is not None and args.speculative_algorithm is None:
            raise UsageError("--draft-hf-config is given but no --speculative-algorithm in the server arguments")
        draft_config = draft_hf_config if draft_hf_config is not None else local_draft_config(args)
        draft = load_hf_config(draft_config) if draft_config is not None else None
        if weights_gib is not None and not 0 <= weights_gib <= MAX_GPU_GIB:  # also refuses nan and inf
            raise UsageError(f"--weights-gib {weights_gib!r}: the weights' size in GiB, finite, 0..{MAX_GPU_GIB:,}")
        return cls(model=layout, server_args=args, env=check_env(env),
                   platform=Platform.parse(platform, gpu_memory_gib),
                   sglang_version=sglang_version, draft_model=draft,
                   weights_bytes=None if weights_gib is None else int(weights_gib * GIB))

    @property
    def has_pr_38756(self) -> bool:
        return has_pr_38756(self.sglang_version)

    @property
    def spec_algorithm(self) -> SpeculativeAlgorithm:
        """The speculative algorithm the server runs, an alias read as its algorithm (NEXTN is EAGLE)."""
        return SpeculativeAlgorithm.from_string(self.server_args.speculative_algorithm)


def local_draft_config(args: ServerArgsView) -> Path | None:
    """The draft's ``config.json`` named by ``--speculative-draft-model-path``, where it is on this machine.

    SGLang reads the draft's config from that path (``spec_aux_hidden_state.py
    resolve_spec_aux_hidden_state_config``, ``ModelConfig.from_server_args(model_path=draft_path)``): a
    directory holding ``config.json``, or here also the ``config.json`` itself. A hub name that is not a local
    path gives None (the kit then says what it assumes); a local path without a config is refused.
    """
    value = args.speculative_draft_model_path
    if value is None:
        return None
    path = Path(value)
    if path.is_file():
        return path
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"--speculative-draft-model-path {value[:200]!r}: the directory holds no config.json; "
                             "point it at the draft's model directory, or give --draft-hf-config")
        return path / "config.json"
    return None


_ENV_PAIR = re.compile(r"^([A-Z0-9_]+)=(.*)$")


def parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    """``["NAME=VALUE", ...]`` (repeated ``--env``) as a dict of SGLang's variables; a malformed pair is refused."""
    return check_env(env_pairs(pairs))


def env_pairs(pairs: list[str]) -> dict[str, str]:
    """``["NAME=VALUE", ...]`` as a dict, names unchecked (each engine checks its own); a malformed pair is refused."""
    env: dict[str, str] = {}
    for pair in pairs:
        match = _ENV_PAIR.match(pair)
        if not match:
            raise UsageError(f"--env {quote(pair)}: give NAME=VALUE, e.g. SGLANG_USE_AITER_UNIFIED_ATTN=1")
        name, value = match.groups()
        if env.get(name, value) != value:  # a shell keeps the last; which one the server saw is unknowable here
            raise UsageError(f"--env {name} is given twice ({quote(env[name])} and {quote(value)}): keep the one "
                             "the server ran with")
        env[name] = value
    return env
