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
import tempfile
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
          "swa_pool_floor", "draft_layers", "layer_windows")
#: Decisions read as they are (the first fields above).
_DECIDED = FIELDS[:6]
#: The spellings SGLang's parser takes for the paths the check replaces (``arg_groups/fields/model.py`` and
#: ``spec.py``: ``aliases=["--model"]``, ``["--speculative-draft-model"]``).
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
REFUSAL = "refusal"


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
            return bool(self.kit) == bool(self.sglang)
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
    return Side("refused: SWA pool under its floor" if pools.refused else None, fields)


def sglang_side(argv: list[str], platform: str, gpu_memory_bytes: int | None, built: Any,
                weights_bytes: int = 0) -> Side:
    """SGLang's answer for the raw command line ``argv`` (``--model-path`` and any draft path as SGLang reads
    them); ``built``: the target's model class built on the meta device (``sglang_oracle.built_models_apart``)."""
    from swa_kit.launch.sglang_oracle import ask_sglang

    answer = ask_sglang(argv, platform, gpu_memory_bytes, weights_bytes, built=built)
    if answer.refused:
        return Side(answer.refused, answer.fields)
    return Side(None, {**answer.fields, "layer_windows": built.layer_windows})


def compare_sides(kit: Side, sglang: Side, names: tuple[str, ...] = FIELDS) -> tuple[FieldCheck, ...]:
    """Every compared field; only the refusal where either side refuses (the other side's fields then mean
    nothing to compare)."""
    if kit.refused or sglang.refused:
        return (FieldCheck(REFUSAL, kit.refused, sglang.refused),)
    return tuple(FieldCheck(name, kit.fields.get(name), sglang.fields.get(name)) for name in names)


def differences(kit: Side, sglang: Side, names: tuple[str, ...] = FIELDS) -> dict[str, tuple[Any, Any]]:
    """The fields that differ: name -> (kit, SGLang); ``refusal`` when one side refuses and the other does not."""
    return {row.name: (row.kit, row.sglang) for row in compare_sides(kit, sglang, names) if not row.agree}


def differing_keys(row: FieldCheck) -> list[Any]:
    """The keys (layers) at which a per-layer field differs; [] for a field of one value."""
    if not (isinstance(row.kit, dict) and isinstance(row.sglang, dict)):
        return []
    return sorted((k for k in row.kit.keys() | row.sglang.keys() if row.kit.get(k) != row.sglang.get(k)), key=str)


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
    with tempfile.TemporaryDirectory(prefix="swa-kit-check-") as tmp:
        draft = None if raw.draft_config is None else _config_dir(raw.draft_config, Path(tmp), "draft")
        yield _config_dir(raw.config, Path(tmp), "model"), draft


def installed_sglang() -> str:
    """The installed SGLang's version; without SGLang, one line naming how to install it."""
    from swa_kit.launch.sglang_oracle import INSTALL_HINT, sglang_version

    version = sglang_version()
    if version is None:
        raise SGLangUnavailableError(f"--check-with-sglang needs SGLang, not installed here: {INSTALL_HINT}")
    return version


def check_launch(launch: Launch, decisions: Decisions, raw: RawLaunch) -> SGLangCheck:
    """The kit's ``decisions`` for ``launch`` against SGLang's answer for the same launch given raw."""
    from swa_kit.launch.sglang_oracle import built_models_apart, environment

    if raw.draft_config is None and any(w.partition("=")[0] in DRAFT_FLAGS for w in raw.words):
        raise UsageError("--check-with-sglang: SGLang reads the draft's config from --speculative-draft-model-path, "
                         "which is not on this machine: pass --draft-hf-config with the draft's config.json")
    version = installed_sglang()
    with environment(dict(launch.env)), _config_dirs(raw) as (model_dir, draft_dir):
        built = built_models_apart([model_dir])[model_dir]
        if isinstance(built, str):  # each layer's window comes from SGLang's model class: never guessed
            raise SGLangUnavailableError(f"--check-with-sglang: SGLang {version}'s model class {built}")
        sglang = sglang_side(sglang_argv(raw.words, model_dir, draft_dir), launch.platform.name,
                             launch.platform.gpu_memory_bytes, built, launch.weights_bytes or 0)
    return SGLangCheck(version, compare_sides(kit_side(launch, decisions), sglang))
