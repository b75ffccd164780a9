"""One launch asked of the kit and of SGLang's own code, field by field: where the two disagree.

The kit answers with :func:`~swa_kit.launch.decide.decide`; SGLang answers from the RAW launch
(:func:`swa_kit.launch.sglang_oracle.ask_sglang`: its own argument parser on the words as typed, its resolution,
spec-aux resolution and pool configurator, and each layer's window from its model class built on the meta device).
``swa-kit audit --check-with-sglang`` and the project's differential (tests/differential.py) both compare here.

Nothing here imports SGLang until a check runs: the audit without the flag stays light.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swa_kit.errors import SGLangUnavailableError, UsageError
from swa_kit.launch.decide import Decisions
from swa_kit.launch.inputs import Launch

#: The fields both sides answer, in the order the report lists them.
FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size",
          "hybrid_swa_memory", "pool_configurator", "budget_bytes", "full_tokens", "swa_tokens", "one_pool_tokens",
          "swa_pool_floor", "draft_layers", "layer_windows", "kv_heads_per_gpu", "routes", "draft_pool", "unified_pool")
#: Decisions read as they are (the first fields above).
_DECIDED = FIELDS[:6]
#: The spellings SGLang's parser takes for the paths the check replaces (``arg_groups/fields/model.py`` and
#: ``spec.py``: ``aliases=["--model"]``, ``["--speculative-draft-model"]``).
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
REFUSAL = "refusal"
#: the class name that begins the kit's refusal of a surface it does not model
NOT_MODELLED = "NotModelledError"


@dataclass(frozen=True)
class Side:
    """One side's answer for a launch: its start-up refusal (or None) and the fields it decided."""

    refused: str | None
    fields: dict[str, Any]


@dataclass(frozen=True)
class FieldCheck:
    """One compared field: the kit's value, SGLang's, and whether they agree (``refusal``: whether each side
    refuses the launch at start-up; two refusals agree whatever their words)."""

    name: str
    kit: Any
    sglang: Any

    @property
    def agree(self) -> bool:
        if self.name == REFUSAL:
            # the kit's not-modelled refusal never agrees: SGLang serves the launch, or refuses it by a rule the
            # kit missed (the kit's refusal reads "NotModelledError: ...")
            return bool(self.kit) == bool(self.sglang) and not str(self.kit).startswith(NOT_MODELLED)
        return bool(self.kit == self.sglang)


@dataclass(frozen=True)
class SGLangCheck:
    """The comparison of one launch: which SGLang answered, and every compared field."""

    version: str
    rows: tuple[FieldCheck, ...]

    @property
    def differences(self) -> list[FieldCheck]:
        return [row for row in self.rows if not row.agree]


@dataclass(frozen=True)
class RawLaunch:
    """The launch as the user gave it, for SGLang's own parser.

    ``words``: the server arguments from the first flag on (:func:`swa_kit.launch.inputs.flag_words`);
    ``config``: the user's config (a ``config.json``, another JSON file, or a model directory) or, for a bundled
    model, its ``hf_config``; ``draft_config``: the draft's config file or directory, where the launch names one.
    """

    words: tuple[str, ...]
    config: Path | dict[str, Any]
    draft_config: Path | None = None


def route_modes(speculating: bool, with_draft: bool, block_draft: bool = False) -> tuple[str, ...]:
    """The forward modes whose routes are compared: verify where the launch speculates, the draft worker's decode
    where it names a draft with a full pool of its own (a draft's own SWA pool is not driven yet:
    :mod:`swa_kit.measure.sglang_routes`). ``block_draft``: a DFLASH-family draft, which runs no decode: one
    block forward on its own draft backend (``dflash_worker_v2.py``: ``ForwardMode.TARGET_VERIFY`` on the draft
    runner; aiter is not a draft backend, ``draft_worker_common.py resolve_draft_worker_attention_backend``)."""
    modes: tuple[str, ...] = ("prefill", "extend", "decode")
    if speculating:
        modes += ("verify",)
    return (*modes, "draft_decode") if with_draft and not block_draft else modes


#: The backends whose routes are compared: each is driven on SGLang's own backend class
#: (:mod:`swa_kit.measure.sglang_routes`, :mod:`swa_kit.measure.sglang_triton_routes`).
ROUTED_BACKENDS = ("aiter", "triton")


def routed_backend(prefill: str, decode: str) -> str | None:
    """The backend whose routes are compared: one of :data:`ROUTED_BACKENDS` serving both prefill and decode."""
    return prefill if prefill == decode and prefill in ROUTED_BACKENDS else None


def _kit_routes(decisions: Decisions, modes: tuple[str, ...]) -> dict[str, Any]:
    """The kit's plans per mode and layer, in the shape of :func:`swa_kit.measure.sglang_routes.routes`."""
    from swa_kit.measure.sglang_routes import GUARD
    from swa_kit.measure.sglang_triton_routes import NO_RAIL

    out: dict[str, Any] = {}
    for mode in modes:
        plan = decisions.routes.get(("draft", mode) if mode.startswith("draft_") else ("target", mode))
        out[mode] = None if plan is None else {
            # SGLang's guard refuses before any kernel; a kernel's own refusal (CK's head-dim cap) happens inside the
            # kernel, which SGLang's side records as called
            layer.layer: GUARD if layer.sglang_verdict is not None and layer.site == "decode.paged" else
            NO_RAIL if layer.sglang_verdict is not None and layer.site.startswith("triton.") else
            [layer.kernel, list(layer.window_arg) if isinstance(layer.window_arg, tuple) else layer.window_arg,
             layer.page_table,
             layer.effective_keys] for layer in plan.layers}
    return out


def _kit_kv_heads(launch: Launch) -> dict[str, int]:
    """KV heads one GPU keeps for the full-pool and the SWA-pool layers (one kind stands for both when the model
    has only one; a model whose layers of one pool differ in KV heads answers the largest)."""
    from swa_kit.launch.parallel import parallel_of

    parallel = parallel_of(launch.server_args)
    kinds = launch.model.kinds.values()
    full = [k.num_kv_heads for k in kinds if not k.uses_swa_pool] or [k.num_kv_heads for k in kinds]
    swa = [k.num_kv_heads for k in kinds if k.uses_swa_pool] or full
    return {"full": parallel.kv_heads_per_gpu(max(full)), "swa": parallel.kv_heads_per_gpu(max(swa))}


def kit_side(launch: Launch, decisions: Decisions) -> Side:
    """The kit's answer: ``decisions`` read field by field (the draft's layers only where a draft config is read)."""
    pools = decisions.pools
    fields: dict[str, Any] = {name: getattr(decisions, name).value for name in _DECIDED}
    fields.update(budget_bytes=pools.budget_bytes, full_tokens=pools.full_tokens, swa_tokens=pools.swa_tokens,
                  swa_pool_floor=pools.floor_tokens if pools.hybrid else None)
    if pools.budget_bytes is not None:  # one pool of every layer, as SGLang sizes it without the hybrid pool
        one = pools.budget_bytes // pools.default_pool_cell_bytes
        fields["one_pool_tokens"] = one // decisions.page_size.value * decisions.page_size.value
    draft = decisions.draft_pool.value
    with_draft = launch.draft_model is not None and draft.layout is not None
    fields["draft_layers"] = draft.layout.num_layers if with_draft else None
    fields["layer_windows"] = {i: launch.model.layer_kind(i).sliding_window_size
                               for i in range(launch.model.num_layers)}
    fields["kv_heads_per_gpu"] = _kit_kv_heads(launch)
    full_draft = launch.draft_model is not None and not launch.draft_model.has_window
    modes = route_modes(launch.server_args.speculative_algorithm is not None, full_draft,
                        launch.spec_algorithm.traits.dflash_family)
    fields["routes"] = _kit_routes(decisions, modes) if routed_backend(
        decisions.prefill_attention_backend.value, decisions.decode_attention_backend.value) else None
    unified = decisions.unified_memory.value
    fields["unified_pool"] = unified
    owns = draft.layout is not None and draft.pool.startswith("own")
    fields["draft_pool"] = {"architecture": draft.layout.architecture,
                            "hybrid_swa": draft.pool.startswith("own SWA pool")} if owns and draft.layout else None
    if draft.layout is not None and draft.pool.startswith("fused"):  # no pool of its own: lanes in the target's
        # fusion needs the target's hybrid pool on, so the draft's ModelConfig.is_hybrid_swa is its architecture's
        fields["draft_pool"] = {"architecture": draft.layout.architecture,
                                "hybrid_swa": draft.layout.sglang_hybrid_swa_pool, "fused": unified["draft_lanes"]}
    return Side("refused: SWA pool under its floor" if pools.refused else None, fields)


def sglang_side(argv: list[str], platform: str, gpu_memory_bytes: int | None, built: Any,
                weights_bytes: int = 0, draft: Any = None) -> Side:
    """SGLang's answer for the raw command line ``argv`` (``--model-path`` and any draft path as SGLang reads
    them, the draft's config still in place); ``built``: the target's model class built on the meta device
    (``sglang_oracle.built_models_apart``); ``draft``: the draft's, where ``argv`` names a draft (or why it did not
    build: its decode routes are then left out)."""
    from swa_kit.launch.sglang_oracle import ask_sglang, import_sglang
    from swa_kit.measure import sglang_routes, sglang_triton_routes

    # a class that does not build here: SGLang may still refuse the launch at start-up, before any model is built
    # (Gemma-4 text-only); past start-up, ask_sglang says the class does not build, never guesses
    built_here = None if isinstance(built, str) else built
    answer = ask_sglang(argv, platform, gpu_memory_bytes, weights_bytes, built=built_here)
    if answer.refused:
        return Side(answer.refused, answer.fields)
    if isinstance(built, str):
        raise SGLangUnavailableError(f"SGLang's model class {built}")
    sa, fields = answer.server_args, answer.fields
    fields["draft_pool"] = sglang_draft_pool(sa, platform)
    lanes = (fields.get("unified_pool") or {}).get("draft_lanes")
    if fields["draft_pool"] is not None and lanes:  # fused into the target's entries (kv_cache_configurator.py)
        fields["draft_pool"]["fused"] = lanes
    route_fields: Any = None
    backend = routed_backend(fields["prefill_attention_backend"], fields["decode_attention_backend"])
    if backend is not None:
        full_draft = draft is not None and (isinstance(draft, str) or all(w <= 0 for w in draft.layer_windows.values()))
        spec_info = import_sglang("sglang.srt.speculative.spec_info")
        modes = route_modes(sa.speculative_algorithm is not None, full_draft,
                            spec_info.SpeculativeAlgorithm.from_string(sa.speculative_algorithm).is_dflash_family())
        built_draft = None if draft is None or isinstance(draft, str) else draft
        draft_windows = None if built_draft is None else built_draft.layer_windows
        args = (sa, answer.model_config, fields["page_size"], fields["hybrid_swa_memory"], built.layer_windows, modes,
                draft_windows)
        route_fields = sglang_routes.routes(*args) if backend == "aiter" else sglang_triton_routes.routes(
            *args, built.sliding_window_size, None if built_draft is None else built_draft.sliding_window_size)
    return Side(None, {**fields, "layer_windows": built.layer_windows, "routes": route_fields})


def sglang_draft_pool(sa: Any, platform: str) -> dict[str, Any] | None:
    """The draft worker's model as SGLang reads it (``ModelConfig.from_server_args(..., is_draft_model=True)``,
    as ``spec_aux_hidden_state`` and the scheduler do): its architecture, and whether its own KV pool is an SWA
    pool (``ModelConfig.is_hybrid_swa``)."""
    from swa_kit.launch.sglang_oracle import PLATFORM_FACTS, hidden_aiter, import_sglang
    from swa_kit.launch.sglang_oracle_spec import runs_a_draft_model

    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    algorithm = spec_info.SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    if algorithm.is_none() or not runs_a_draft_model(algorithm):  # UNO and NGRAM draft with the target alone
        return None
    model_config = import_sglang("sglang.srt.configs.model_config")
    runtime = import_sglang("sglang.srt.runtime_context")
    with runtime.override_platform(**PLATFORM_FACTS[platform]), hidden_aiter():
        draft = model_config.ModelConfig.from_server_args(sa, model_path=sa.speculative_draft_model_path,
                                                          is_draft_model=True)
    return {"architecture": draft.hf_config.architectures[0], "hybrid_swa": bool(draft.is_hybrid_swa)}


def compare_sides(kit: Side, sglang: Side, names: tuple[str, ...] = FIELDS) -> tuple[FieldCheck, ...]:
    """Every compared field; only the refusal where either side refuses (the other side's fields then mean
    nothing to compare)."""
    if kit.refused or sglang.refused:
        return (FieldCheck(REFUSAL, kit.refused, sglang.refused),)
    return tuple(FieldCheck(name, kit.fields.get(name), sglang.fields.get(name)) for name in names)


def differences(kit: Side, sglang: Side, names: tuple[str, ...] = FIELDS) -> dict[str, tuple[Any, Any]]:
    """The fields that differ: name -> (kit, SGLang); ``refusal`` when one side refuses and the other does not."""
    return {row.name: (row.kit, row.sglang) for row in compare_sides(kit, sglang, names) if not row.agree}


def per_item(value: Any) -> dict[str, Any] | None:
    """A per-layer field as ``{"layer 3": value}``, a per-mode per-layer one (routes) as ``{"decode layer 3":
    value}``; None for a field of one value."""
    if not isinstance(value, dict) or not value:
        return None
    if all(isinstance(k, int) for k in value):
        return {f"layer {k}": v for k, v in value.items()}
    if all(isinstance(v, dict) or v is None for v in value.values()):
        flat: dict[str, Any] = {}
        for mode, layers in value.items():
            flat.update({f"{mode}: none": None} if layers is None else
                        {f"{mode} layer {k}": v for k, v in layers.items()})
        return flat
    return None


def differing_items(row: FieldCheck) -> list[tuple[str, Any, Any]]:
    """``(item, kit, SGLang)`` for each layer (or mode and layer) where a per-layer field differs; [] for a field
    of one value."""
    kit, sglang = per_item(row.kit), per_item(row.sglang)
    if kit is None or sglang is None:
        return []
    return [(k, kit.get(k), sglang.get(k)) for k in dict.fromkeys([*kit, *sglang]) if kit.get(k) != sglang.get(k)]


# -- the audit's launch, as SGLang reads it ---------------------------------------------------------------


def sglang_argv(words: tuple[str, ...], model_dir: str, draft_dir: str | None) -> list[str]:
    """``words`` with the model path (and the draft's) pointing at the configs on this machine; every other word
    exactly as given. A model path absent from ``words`` is added, as SGLang's parser needs one."""
    argv: list[str] = []
    i = 0
    while i < len(words):
        flag, eq, _ = words[i].partition("=")
        swap = model_dir if flag in MODEL_FLAGS else draft_dir if flag in DRAFT_FLAGS else None
        if swap is None:
            argv.append(words[i])
            i += 1
            continue
        argv += [flag, swap]
        i += 1 if eq else 2
    return argv if any(w.partition("=")[0] in MODEL_FLAGS for w in words) else ["--model-path", model_dir, *argv]


def _config_dir(config: Path | dict[str, Any], tmp: Path, name: str) -> str:
    """A directory SGLang reads ``config.json`` from: the user's own where the file is one, else a copy."""
    if isinstance(config, Path) and config.is_dir():
        return str(config)
    if isinstance(config, Path) and config.name == "config.json":
        return str(config.parent)
    (tmp / name).mkdir()
    text = config.read_text() if isinstance(config, Path) else json.dumps(config)
    (tmp / name / "config.json").write_text(text)
    return str(tmp / name)


@contextlib.contextmanager
def _config_dirs(raw: RawLaunch) -> Iterator[tuple[str, str | None]]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="swa-kit-check-") as tmp:
        draft = None if raw.draft_config is None else _config_dir(raw.draft_config, Path(tmp), "draft")
        yield _config_dir(raw.config, Path(tmp), "model"), draft


def _names_draft(raw: RawLaunch) -> bool:
    return any(word.partition("=")[0] in DRAFT_FLAGS for word in raw.words)


def installed_sglang() -> str:
    """The installed SGLang's version; without SGLang, one line naming how to install it."""
    from swa_kit.launch.sglang_oracle import INSTALL_HINT, sglang_version

    version = sglang_version()
    if version is None:
        raise SGLangUnavailableError(f"--check-with-sglang needs SGLang, not installed here: {INSTALL_HINT}")
    return version


def ask_raw(launch: Launch, raw: RawLaunch) -> tuple[str, Side]:
    """The installed SGLang's version and its answer for ``launch`` given raw (its environment set while SGLang
    runs)."""
    from swa_kit.launch.sglang_oracle import built_models_apart, environment

    if raw.draft_config is None and _names_draft(raw):
        raise UsageError("--check-with-sglang: SGLang reads the draft's config from --speculative-draft-model-path, "
                         "which is not on this machine: pass --draft-hf-config with the draft's config.json")
    version = installed_sglang()
    # SGLang prints on import (aiter_backend's "aiter is AMD specific ..."): stdout stays the report's
    with environment(dict(launch.env)), _config_dirs(raw) as (model_dir, draft_dir), \
            contextlib.redirect_stdout(sys.stderr):
        built = built_models_apart([model_dir] + ([draft_dir] if draft_dir else []))
        argv = sglang_argv(raw.words, model_dir, draft_dir)
        return version, sglang_side(argv, launch.platform.name, launch.platform.gpu_memory_bytes, built[model_dir],
                                    launch.weights_bytes or 0,
                                    built[draft_dir] if draft_dir and _names_draft(raw) else None)


def check_launch(launch: Launch, decisions: Decisions, raw: RawLaunch) -> SGLangCheck:
    """The kit's ``decisions`` for ``launch`` against SGLang's answer for the same launch given raw."""
    version, sglang = ask_raw(launch, raw)
    return SGLangCheck(version, compare_sides(kit_side(launch, decisions), sglang))


def on_kit_refusal(launch: Launch, raw: RawLaunch, refusal: str) -> str:
    """The kit's start-up refusal of ``launch`` with SGLang's own answer on the raw launch after it: a refusal
    too, or the disagreement named."""
    version, sglang = ask_raw(launch, raw)
    if sglang.refused:
        return f"{refusal} (SGLang {version}'s own code refuses it too: {sglang.refused})"
    return (f"{refusal}; but SGLang {version}'s own code accepts this launch: the kit and SGLang disagree, report it "
            "to swa_kit with this command line")
