"""A model's attention layout, read from its Hugging Face ``config.json`` through transformers' own classes.

One parser for every model: :func:`parse_hf_config` turns a config (the parsed JSON) into a
:class:`ModelLayout`. ``--hf-config PATH`` (a ``config.json`` or a model directory) goes through
:func:`load_hf_config`; the bundled models in ``data/models/<name>.json`` are shortcuts that carry a
real-shaped config under ``hf_config`` plus where each field came from, and go through the same parser.

transformers builds the config object (``AutoConfig.for_model``), so its defaults and conversions
apply exactly as when the model loads: default ``layer_types``, Gemma-4's per-layer head overrides
(``per_layer_config``), MiMo-V2's ``sliding_window = sliding_window_size + 1``. A ``model_type``
transformers does not know is read through a plain ``PretrainedConfig`` with the fields SGLang reads
(``layer_types``, ``sliding_window``, heads, head dims), and the layout says so in its sources.

What SGLang does with the config comes from :data:`ARCHITECTURES`, one row per architecture the kit
models: the ``sliding_window_size`` its model file hands ``RadixAttention`` (Gemma-3/4, GPT-OSS and EXAONE-4
pass ``sliding_window - 1``, Gemma-3n and Cohere-2 (Command R7B) the whole window, SGLang's Llama file,
which serves Mistral, none) and whether ``is_hybrid_swa_model`` gives it a hybrid pool. Every derived figure names its
origin in :attr:`ModelLayout.sources`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swa_kit.errors import ModelConfigError, UsageError
from swa_kit.files import parse_json, quote, read_text
from swa_kit.models.transformers_reads import read_config
from swa_kit.resources import data_path
from swa_kit.sglang_versions import has_fix
from swa_kit.window import Window

MODELS_DIR = data_path("models")

ATTENTION_KINDS = ("full", "sliding", "chunked")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9.]+)*$")
_BUNDLE_KEYS = {"name", "display_name", "hf_repo", "hf_config", "sources", "unverified", "notes"}
_HF_KIND = {"sliding_attention": "sliding", "full_attention": "full", "chunked_attention": "chunked"}
MAX_CONFIG_BYTES = 4 << 20  # a config.json is kilobytes; its tokenizer and weights live in other files
MAX_LAYERS = 4096  # far past any published model, far below what would cost memory to lay out
MAX_COUNT = (1 << 31) - 1  # heads, head dims and windows: past any real model


@dataclass(frozen=True)
class LayerKind:
    """One attention shape shared by every layer of that kind, and the window SGLang hands its layers."""

    name: str
    attention: str  # full | sliding | chunked
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: Window = field(default_factory=lambda: Window(None))
    window_field: str | None = None
    window_value: Any = None
    chunk_size: int | None = None
    sliding_window_size: int = -1  # RadixAttention.sliding_window_size as SGLang's model file sets it

    @property
    def uses_swa_pool(self) -> bool:
        """Whether a hybrid pool keeps this kind in its SWA sub-pool (sliding and chunked layers)."""
        return self.attention != "full"

    @property
    def retained_tokens(self) -> int | None:
        """Most tokens one query of this kind can attend (None: the whole context)."""
        return self.window.keys if self.attention == "sliding" else self.chunk_size


@dataclass(frozen=True)
class ModelLayout:
    """A model's layer layout and KV shapes, with the source of every figure."""

    name: str
    display_name: str
    hf_repo: str
    architecture: str
    dtype: str
    kinds: dict[str, LayerKind]
    layer_types: tuple[str, ...]
    sglang_hybrid_swa_pool: bool
    sources: dict[str, str]
    unverified: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    path: Path | None = field(default=None, compare=False)
    hf_config: dict = field(default_factory=dict, compare=False, repr=False)
    sha256: str | None = field(default=None, compare=False)  # of the file read, for a bug report

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def layer_kind(self, layer_id: int) -> LayerKind:
        """The kind of layer ``layer_id``; a clear error outside ``[0, num_layers)``."""
        if not isinstance(layer_id, int) or isinstance(layer_id, bool) or not 0 <= layer_id < self.num_layers:
            raise ModelConfigError(
                f"{self.name}: layer {layer_id!r} does not exist; layers are 0..{self.num_layers - 1}"
            )
        return self.kinds[self.layer_types[layer_id]]

    def window_keys(self, layer_id: int) -> int | None:
        """Keys a query of layer ``layer_id`` attends at most (None = whole context)."""
        return self.layer_kind(layer_id).retained_tokens

    @property
    def swa_attention_layer_ids(self) -> list[int]:
        """Layers a hybrid pool keeps in its SWA sub-pool (SGLang's ``swa_attention_layer_ids``)."""
        return [i for i, k in enumerate(self.layer_types) if self.kinds[k].uses_swa_pool]

    @property
    def full_attention_layer_ids(self) -> list[int]:
        return [i for i, k in enumerate(self.layer_types) if not self.kinds[k].uses_swa_pool]

    @property
    def has_window(self) -> bool:
        return bool(self.swa_attention_layer_ids)

    @property
    def sliding_window_size(self) -> int | None:
        """The model runner's one ``sliding_window_size`` (``get_attention_sliding_window_size``), or None."""
        values = {k.sliding_window_size for k in self.kinds.values() if k.attention == "sliding"}
        values.discard(-1)
        return max(values) if values else None


# -- what SGLang 0.5.23 does per architecture ----------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """How SGLang 0.5.23 serves one architecture: the window its layers get, and its pool."""

    sws: str  # "keys - 1" | "keys" | "none": RadixAttention.sliding_window_size from the HF window
    sws_source: str
    hybrid_swa: bool  # in configs/model_config.py is_hybrid_swa_model
    mtp_draft: str | None = None  # the draft architecture SGLang rewrites this one to for MTP / NextN


_MC = "sglang 0.5.23 configs/model_config.py is_hybrid_swa_model"


_RULES = {"keys - 1": "config.sliding_window - 1", "keys": "config.sliding_window (the whole window)",
          "none": "no sliding_window_size (RadixAttention keeps -1)",
          "sliding_window_size": "config.sliding_window_size as written"}


def _arch(sws: str, model_file: str, hybrid: bool, mtp_draft: str | None = None) -> Architecture:
    return Architecture(sws, f"sglang 0.5.23 models/{model_file} passes {_RULES[sws]}", hybrid, mtp_draft)


ARCHITECTURES: dict[str, Architecture] = {
    "Cohere2ForCausalLM": _arch("keys", "commandr.py", False),
    "Exaone4ForCausalLM": _arch("keys - 1", "exaone4.py", False),
    "Gemma2ForCausalLM": _arch("keys - 1", "gemma2.py", False),
    "Gemma3ForCausalLM": _arch("keys - 1", "gemma3_causal.py", False),
    "Gemma3ForConditionalGeneration": _arch("keys - 1", "gemma3_causal.py", False),
    "Gemma3nForCausalLM": _arch("keys", "gemma3n_causal.py", False),
    "Gemma3nForConditionalGeneration": _arch("keys", "gemma3n_causal.py", False),
    "Gemma4ForCausalLM": _arch("keys - 1", "gemma4_causal.py", True),
    "Gemma4ForConditionalGeneration": _arch("keys - 1", "gemma4_causal.py", True),
    "GptOssForCausalLM": _arch("keys - 1", "gpt_oss.py", True),
    "Llama4ForConditionalGeneration": _arch("none", "llama4.py", True),
    # EAGLE / EAGLE3 draft heads, read from --speculative-draft-model-path: full attention, in the target's pool
    "LlamaForCausalLMEagle": _arch("none", "llama_eagle.py", False),
    "LlamaForCausalLMEagle3": _arch("none", "llama_eagle3.py", False),
    "MistralForCausalLM": _arch("none", "llama.py", False),
    "MiMoV2FlashForCausalLM": _arch("sliding_window_size", "mimo_v2.py", True, mtp_draft="MiMoV2MTP"),
    "MiMoV2MTP": _arch("sliding_window_size", "mimo_v2_nextn.py", True),
    "SwaKitTinyForCausalLM": Architecture(
        "keys - 1", "swa_kit.lessons.tiny_model serves its tiny model as SGLang serves Gemma-4 (sliding_window - 1)",
        True),
    "SwaKitTinyEagleForCausalLM": Architecture(
        "keys - 1", "swa_kit.lessons.tiny_model's tiny EAGLE head: one windowed layer in a full pool of its own",
        False),
}


#: Model classes with their own ``get_attention_sliding_window_size``, and what it returns: the one window SGLang's
#: model runner hands its attention backend (``load_model_utils.resolve_sliding_window_size``; SGLang 0.5.23
#: ``models/gemma2.py``, ``gemma3_causal.py``, ``gemma3_mm.py``, ``gemma3n_causal.py``, ``gemma3n_mm.py``,
#: ``gemma4_causal.py``, ``gemma4_mm.py``, ``gpt_oss.py``, ``exaone4.py``: ``config.sliding_window - 1``;
#: ``llama_eagle3.py``: the draft window its layers get). Any other class's runner takes
#: ``ModelConfig.sliding_window_size`` only while the launch has a hybrid pool, else the chunk size, else None.
RUNNER_WINDOW_RULES: dict[str, str] = {
    **{arch: "keys - 1" for arch in ("Exaone4ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                     "Gemma3ForConditionalGeneration", "Gemma3nForCausalLM",
                                     "Gemma3nForConditionalGeneration", "Gemma4ForCausalLM",
                                     "Gemma4ForConditionalGeneration", "GptOssForCausalLM", "SwaKitTinyForCausalLM")},
    "LlamaForCausalLMEagle3": "layers",
}


def runner_sliding_window_size(model: ModelLayout) -> int | None:
    """The model runner's one ``sliding_window_size`` for ``model`` as the launch serves it (its
    ``sglang_hybrid_swa_pool`` already off where the launch turns the hybrid pool off)."""
    rule = RUNNER_WINDOW_RULES.get(model.architecture)
    sliding = [k.window.keys for k in model.kinds.values() if k.attention == "sliding" and k.window.keys]
    if rule == "keys - 1":
        return max(sliding) - 1 if sliding else None
    if rule == "layers" or model.sglang_hybrid_swa_pool and model.sliding_window_size is not None:
        return model.sliding_window_size
    return max((k.chunk_size for k in model.kinds.values() if k.chunk_size), default=None)


#: Window rules a fix changed in a model file: PR -> (the architectures, their rule before it). SGLang PR #26147
#: (Gemma-4 on Ascend) made gemma4_causal.py pass ``config.sliding_window - 1``, as Gemma-2 and Gemma-3 do.
WINDOW_RULE_FIXES: dict[int, tuple[tuple[str, ...], str]] = {
    26147: (("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), "keys"),
}


def as_of_version(model: ModelLayout, sglang_version: str) -> ModelLayout:
    """``model`` with the ``sliding_window_size`` SGLang ``sglang_version``'s model file hands its layers.

    Only a fix of :data:`WINDOW_RULE_FIXES` undone (``before-<N>``) changes it; the window meant stays the model's.
    """
    for pr, (architectures, rule) in WINDOW_RULE_FIXES.items():
        if model.architecture not in architectures or has_fix(sglang_version, pr):
            continue
        raw_text = _raw_text_fields(model.hf_config)
        kinds = {label: replace(kind, sliding_window_size=_sliding_window_size(rule, kind.window.keys, raw_text))
                 if kind.attention == "sliding" and kind.window.keys is not None else kind
                 for label, kind in model.kinds.items()}
        source = f"{ARCHITECTURES[model.architecture].sws_source}; before PR #{pr} it passed {_RULES[rule]}"
        return replace(model, kinds=kinds, sources={**model.sources, "sliding_window_size": source})
    return model


# -- reading a config through transformers -----------------------------------------------------------------


def _fail(where: str, message: str) -> ModelConfigError:
    return ModelConfigError(f"{where}: {message}")


def _transformers_config(raw: dict, where: str) -> tuple[Any, str]:
    """transformers' own config object for ``raw``, and which class built it."""
    try:
        import transformers
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # a declared dependency; a broken install says so in one line
        raise _fail(where, "reading a config needs transformers: pip install transformers") from None
    model_type: Any = raw.get("model_type")  # any JSON value; transformers judges it
    values = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        if model_type in transformers.CONFIG_MAPPING:
            config = transformers.AutoConfig.for_model(model_type, **values)
            return config, f"transformers {transformers.__version__} {type(config).__name__}"
        config = transformers.PretrainedConfig(**values)
    except (TypeError, ValueError, KeyError, StrictDataclassError) as error:  # transformers' validators
        detail = str(error).replace("\n", " ")
        raise _fail(where, f"transformers refuses this config ({type(error).__name__}: {detail})") from None
    return config, (f"transformers {transformers.__version__} PretrainedConfig (model_type {model_type!r} has no "
                    "transformers class; only the fields SGLang reads are used)")


def architecture_for(model_type: str) -> str | None:
    """The architecture the kit models that transformers' auto classes name for ``model_type`` (None: none)."""
    from transformers.models.auto import modeling_auto

    for names in (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                  modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
        if names.get(model_type) in ARCHITECTURES:
            return names[model_type]
    return None


def _architecture(raw: dict, where: str) -> tuple[str, str]:
    """The config's architecture, and how it was inferred ("" when ``architectures`` names it)."""
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if archs is None and isinstance(model_type, str):  # transformers' config classes save architectures: null
        architecture = architecture_for(model_type)
        if architecture is None:
            raise _fail(where, f"architectures is null and model_type {quote(model_type)} names no architecture the "
                               f"kit models; add \"architectures\": [one of {', '.join(ARCHITECTURES)}]")
        return architecture, (f"INFERRED: architectures is null; transformers' auto classes map model_type "
                              f"{model_type!r} to {architecture}")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise _fail(where, "architectures must list the model class, e.g. [\"Gemma4ForConditionalGeneration\"], or be "
                           f"null with a model_type; got {quote(archs)}")
    if archs[0] not in ARCHITECTURES:
        raise _fail(where, f"unknown architecture {quote(archs[0])}; the kit models: {', '.join(ARCHITECTURES)}")
    return archs[0], ""


def _check_before_transformers(raw: dict, architecture: str, where: str) -> None:
    """Refuse what transformers would take silently or slowly: a missing ``text_config``, a huge layer count."""
    nested = raw.get("text_config")
    if architecture.endswith("ForConditionalGeneration") and not isinstance(nested, dict):
        raise _fail(where, f"{architecture} keeps its text model under text_config, and this config has "
                           f"{'none' if nested is None else 'a ' + type(nested).__name__}; without it transformers "
                           "builds its default text model, not yours: give the model's own config.json")
    for holder, prefix in ((raw, ""), (nested, "text_config.")):
        if isinstance(holder, dict) and "num_hidden_layers" in holder:
            _positive(where, f"{prefix}num_hidden_layers", holder["num_hidden_layers"], MAX_LAYERS)
        for key in ("dtype", "torch_dtype"):  # transformers looks a string up on torch, and a wrong one crashes it
            if isinstance(holder, dict) and isinstance(holder.get(key), str) and not _torch_dtype(holder[key]):
                raise _fail(where, f"{prefix}{key} is {quote(holder[key])}, not a torch dtype (bfloat16, float16, "
                                   "float32, ...)")


def _torch_dtype(name: str) -> bool:
    if name.removeprefix("torch.") in DTYPE_BYTES or name == "auto":  # torch dtypes all; no torch import for them
        return True
    import torch

    return name == "auto" or isinstance(getattr(torch, name.removeprefix("torch."), None), torch.dtype)


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if callable(getter) else config


def _positive(where: str, name: str, value: Any, maximum: int = MAX_COUNT) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
        raise _fail(where, f"{name} must be a whole number in 1..{maximum:,}, got {quote(value)}")
    return value


def _layer_attention(text: Any, raw_text: dict, where: str, arch: str) -> tuple[list[str], str]:
    """Per layer "full" / "sliding" / "chunked", and the field that said so."""
    n = _positive(where, "num_hidden_layers", getattr(text, "num_hidden_layers", None), MAX_LAYERS)
    pattern = raw_text.get("hybrid_layer_pattern")
    if pattern is not None:  # MiMo-V2: SGLang's get_hybrid_layer_ids reads this field (1 = sliding)
        if not isinstance(pattern, list) or len(pattern) != n or set(pattern) - {0, 1}:
            raise _fail(where, f"hybrid_layer_pattern must list 0 (full) or 1 (sliding) for each of {n} layers")
        kinds = ["sliding" if p else "full" for p in pattern]
        return kinds, "hybrid_layer_pattern (read by SGLang get_hybrid_layer_ids)"
    types = getattr(text, "layer_types", None)
    if types:
        unknown = sorted(set(types) - set(_HF_KIND))
        if unknown or len(types) != n:
            raise _fail(where, f"layer_types must hold {n} entries from {sorted(_HF_KIND)}, got "
                               f"{unknown or len(types)}")
        return [_HF_KIND[t] for t in types], "layer_types (after transformers' defaults)"
    if getattr(text, "sliding_window", None):  # Mistral-style: one window on every layer
        return ["sliding"] * n, "sliding_window on every layer (no layer_types)"
    return ["full"] * n, "no sliding_window or layer_types: every layer full"


def _heads(text: Any, raw_text: dict, layer: int, attention: str, arch: str) -> tuple[dict[str, Any], str]:
    """Heads and head dims of one layer (unchecked: the caller checks each), and where they came from."""
    per_layer = getattr(text, "per_layer_config", None)
    cfg, origin = text, "num_attention_heads, num_key_value_heads, head_dim"
    if per_layer is not None and getattr(text, "is_heterogeneous", False) and layer < len(per_layer):
        cfg = per_layer[layer]
        origin = ("transformers per_layer_config (e.g. Gemma-4 global_head_dim / num_global_key_value_heads on full "
                  "layers)")
    q = getattr(cfg, "num_attention_heads", None)
    kv = getattr(cfg, "num_key_value_heads", None) or q
    head_dim = getattr(cfg, "head_dim", None) or (getattr(cfg, "hidden_size", 0) // (q or 1))
    v_head_dim = getattr(cfg, "v_head_dim", None) or head_dim
    if attention == "sliding" and "swa_num_key_value_heads" in raw_text:  # MiMo-V2: fields SGLang reads
        q = raw_text.get("swa_num_attention_heads", q)
        kv = raw_text["swa_num_key_value_heads"]
        head_dim = raw_text.get("swa_head_dim", head_dim)
        v_head_dim = raw_text.get("swa_v_head_dim", v_head_dim)
        origin = "swa_num_attention_heads, swa_num_key_value_heads, swa_head_dim, swa_v_head_dim (SGLang reads these)"
    return {"num_q_heads": q, "num_kv_heads": kv, "head_dim": head_dim, "v_head_dim": v_head_dim}, origin


def _window(text: Any, raw_text: dict, attention: str, arch: Architecture, where: str) -> dict[str, Any]:
    """The layer's window in keys, the field it came from, and SGLang's ``sliding_window_size`` for it."""
    if attention == "chunked":
        chunk = _positive(where, "attention_chunk_size", getattr(text, "attention_chunk_size", None))
        return {"chunk_size": chunk, "window_field": "attention_chunk_size", "window_value": chunk}
    if attention != "sliding":
        return {}
    keys = getattr(text, "sliding_window", None)
    if not isinstance(keys, int) or isinstance(keys, bool) or not 1 <= keys <= MAX_COUNT:
        raise _fail(where, f"a sliding layer needs sliding_window in 1..{MAX_COUNT:,} keys, got {quote(keys)}")
    return {"window": Window(keys), "window_field": "sliding_window", "window_value": keys,
            "sliding_window_size": _sliding_window_size(arch.sws, keys, raw_text)}


def _sliding_window_size(rule: str, keys: int, raw_text: dict) -> int:
    """``RadixAttention.sliding_window_size`` for a window of ``keys`` under a model file's ``rule``."""
    # SGLang's RadixAttention stores `sliding_window_size or -1`: a 0 here means no window at all.
    return {"keys - 1": keys - 1, "keys": keys, "none": -1,
            "sliding_window_size": raw_text.get("sliding_window_size", keys - 1)}[rule] or -1


def _dtype(config: Any, text: Any) -> str:
    value = getattr(text, "dtype", None) or getattr(config, "dtype", None) or "bfloat16"
    name = str(value).replace("torch.", "")
    return name if name in DTYPE_BYTES else "bfloat16"


def parse_hf_config(
    raw: Any,
    *,
    where: str = "config.json",
    name: str | None = None,
    display_name: str | None = None,
    hf_repo: str | None = None,
    sources: dict[str, str] | None = None,
    unverified: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
) -> ModelLayout:
    """Build the :class:`ModelLayout` of one Hugging Face config (the parsed ``config.json``)."""
    if not isinstance(raw, dict):
        raise _fail(where, f"a config.json holds one JSON object, got {type(raw).__name__}")
    architecture, inferred = _architecture(raw, where)
    arch = ARCHITECTURES[architecture]
    _check_before_transformers(raw, architecture, where)
    config, built_by = read_config(raw, where, _transformers_config, _text_config)  # transformers, or its record
    text = _text_config(config)
    raw_text = _raw_text_fields(raw)
    attention, layers_from = _layer_attention(text, raw_text, where, architecture)
    kinds: dict[str, LayerKind] = {}
    shape_of: dict[tuple, str] = {}
    layer_types, heads_from = [], set()
    for layer, kind in enumerate(attention):
        heads, origin = _heads(text, raw_text, layer, kind, architecture)
        for key, value in heads.items():
            _positive(where, f"layer {layer} {key}", value)
        if heads["num_q_heads"] % heads["num_kv_heads"]:
            raise _fail(where, f"layer {layer}: {heads['num_q_heads']} query heads are not a multiple of "
                               f"{heads['num_kv_heads']} kv heads (grouped-query attention needs whole groups)")
        shape = (kind, *heads.values())
        if shape not in shape_of:
            label = kind if kind not in kinds else f"{kind}_{sum(k.startswith(kind) for k in kinds) + 1}"
            shape_of[shape] = label
            kinds[label] = LayerKind(label, kind, **heads, **_window(text, raw_text, kind, arch, where))
        layer_types.append(shape_of[shape])
        heads_from.add(origin)
    layout_sources = {
        "config": built_by,
        "layer kinds": layers_from,
        "heads and head dims": "; ".join(sorted(heads_from)),
        "window in keys": "sliding_window (Hugging Face counts the query itself)",
        "sliding_window_size": arch.sws_source,
        "hybrid pool eligibility": f"{_MC} {'lists' if arch.hybrid_swa else 'does not list'} {architecture}",
        **({"architecture": inferred} if inferred else {}),
        **(sources or {}),
    }
    name = name or str(raw.get("_name_or_path") or architecture).split("/")[-1].lower()
    return ModelLayout(
        name=name, display_name=display_name or name, hf_repo=hf_repo or str(raw.get("_name_or_path", "")),
        architecture=architecture, dtype=_dtype(config, text), kinds=kinds, layer_types=tuple(layer_types),
        sglang_hybrid_swa_pool=arch.hybrid_swa and any(k.uses_swa_pool for k in kinds.values()),
        sources=layout_sources, unverified=tuple(unverified), notes=tuple(notes), hf_config=raw,
    )


def load_hf_config(path: str | Path) -> ModelLayout:
    """Read ``path`` (a ``config.json`` or a directory holding one) into a :class:`ModelLayout`."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        text = read_text(file, "config", MAX_CONFIG_BYTES)
        raw = parse_json(text, f"config {quote(str(file))}")
    except UsageError as error:
        raise ModelConfigError(f"{error}; give a config.json or a model directory holding one") from None
    name = file.parent.name if file.name == "config.json" else file.stem  # the model directory's name
    layout = parse_hf_config(raw, where=str(file), name=name.lower() or None)
    object.__setattr__(layout, "path", file)
    object.__setattr__(layout, "sha256", hashlib.sha256(text.encode()).hexdigest())
    return layout


# -- the bundled shortcuts ---------------------------------------------------------------------------------


def list_models(directory: Path | None = None) -> list[str]:
    """Names of the bundled models in ``data/models`` (file stems, sorted)."""
    return sorted(p.stem for p in (directory or MODELS_DIR).glob("*.json"))


def parse_bundle(raw: Any, where: str, expected_name: str | None = None) -> ModelLayout:
    """One bundled model: its ``hf_config`` through :func:`parse_hf_config`, with its name and sources."""
    if not isinstance(raw, dict):
        raise _fail(where, f"must be a JSON object, got {type(raw).__name__}")
    unknown = set(raw) - _BUNDLE_KEYS
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_BUNDLE_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(where, f"name must be lower case words joined by dashes (e.g. gemma4-31b), got {name!r}")
    if expected_name is not None and name != expected_name:
        raise _fail(where, f"name {name!r} differs from the file stem {expected_name!r}; they must match")
    sources = raw.get("sources")
    if not isinstance(sources, dict) or not sources or not all(isinstance(v, str) and v for v in sources.values()):
        raise _fail(where, "sources must map each config field to where its value came from")
    config = raw.get("hf_config")
    fields = set(config) | set(config.get("text_config", {})) if isinstance(config, dict) else set()
    missing = sorted(fields - set(sources) - {"text_config"})
    if missing:
        raise _fail(where, f"sources lack an entry for config fields {missing}: every figure needs its origin")
    return parse_hf_config(config, where=f"{where} hf_config", name=name, display_name=raw.get("display_name"),
                           hf_repo=raw.get("hf_repo"), sources={f"config.{k}": v for k, v in sources.items()},
                           unverified=tuple(raw.get("unverified", ())), notes=tuple(raw.get("notes", ())))


def load_model(name: str, directory: Path | None = None) -> ModelLayout:
    """Load the bundled model ``data/models/<name>.json``; unknown names list the known ones."""
    path = (directory or MODELS_DIR) / f"{name}.json"
    if not isinstance(name, str) or "/" in name or not path.is_file():
        known = ", ".join(list_models(directory)) or "(none)"
        raise ModelConfigError(f"unknown model {name!r}; known models: {known}")
    try:
        text = read_text(path, "bundled model", MAX_CONFIG_BYTES)
        raw = parse_json(text, f"bundled model {quote(str(path))}")
    except UsageError as error:
        raise ModelConfigError(str(error)) from None
    layout = parse_bundle(raw, where=str(path), expected_name=path.stem)
    object.__setattr__(layout, "path", path)
    object.__setattr__(layout, "sha256", hashlib.sha256(text.encode()).hexdigest())
    return layout


def load_all(directory: Path | None = None) -> list[ModelLayout]:
    return [load_model(n, directory) for n in list_models(directory)]


def _raw_text_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """A raw config's text-model fields: its ``text_config`` where it has one (multimodal), else the config."""
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def text_fields(model: ModelLayout) -> dict[str, Any]:
    """The text-model fields of the config ``model`` was read from (see :func:`_raw_text_fields`)."""
    return _raw_text_fields(model.hf_config or {})
