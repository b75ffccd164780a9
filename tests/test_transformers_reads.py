"""The records of what the config parser reads from transformers (swa_kit/models/transformers_reads.py)."""

from __future__ import annotations

import json
import os

import pytest

from swa_kit.errors import ModelConfigError
from swa_kit.measure.bugs import load_corpus
from swa_kit.models import configs, transformers_reads
from swa_kit.models.configs import list_models, load_hf_config, load_model
from swa_kit.models.transformers_reads import SCHEMA, SHIPPED, config_key, record, transformers_version

COMMAND = "SWA_KIT_WRITE_DOCS=1 python -m pytest tests/test_transformers_reads.py"


@pytest.fixture
def no_records(monkeypatch, tmp_path):
    """Every config read through transformers: no shipped records, an empty user cache."""
    monkeypatch.setattr(transformers_reads, "shipped", lambda: {})
    monkeypatch.setenv("SWA_KIT_CACHE_DIR", str(tmp_path))
    return tmp_path


def shipped_configs() -> dict[str, dict]:
    """The configs the kit itself reads on every audit: the bundled models, and the known bugs' own configs."""
    bundled = {name: load_model(name).hf_config for name in list_models()}
    return {**bundled, **{entry.id: dict(entry.launch.model) for entry in load_corpus()
                          if not isinstance(entry.launch.model, str)}}


def test_the_shipped_configs_read_from_their_records_as_through_transformers(no_records, monkeypatch):
    raws, fresh = {}, {}
    for name, raw in shipped_configs().items():
        try:
            fresh[name] = configs.parse_hf_config(raw, where=name)
        except ModelConfigError:  # refused before transformers reads it (an architecture the kit does not model)
            continue
        raws[name] = raw
    records = {}
    for raw in raws.values():
        config, built_by = configs._transformers_config(raw, "test")
        records[config_key(raw)] = record(config, configs._text_config(config), built_by)
    assert len(records) > len(list_models())  # the known bugs bring configs of their own
    if os.environ.get("SWA_KIT_WRITE_DOCS") == "1":
        rows = ",\n".join(f"  {json.dumps(key)}: {json.dumps(records[key], sort_keys=True)}" for key in sorted(records))
        SHIPPED.write_text(f'{{"transformers": {json.dumps(transformers_version())}, "schema": "{SCHEMA}",\n'
                           f' "configs": {{\n{rows}\n }}\n}}\n')
    kept = json.loads(SHIPPED.read_text())
    assert kept["schema"] == SCHEMA and kept["configs"] == records, f"the records are out of date: run {COMMAND}"

    # read from the records alone: transformers is never asked, and every layout is the same
    monkeypatch.setattr(transformers_reads, "shipped", lambda: kept["configs"])
    monkeypatch.setenv("SWA_KIT_CACHE_DIR", str(no_records / "unused"))
    monkeypatch.setattr(configs, "_transformers_config", _refuse)
    for name, model in fresh.items():
        assert configs.parse_hf_config(raws[name], where=name) == model, name
    assert not (no_records / "unused").exists()


def _refuse(raw, where):
    raise AssertionError(f"{where} was read through transformers, not from its record")


def test_the_shipped_records_serve_only_the_transformers_they_came_from(monkeypatch):
    transformers_reads.shipped.cache_clear()
    monkeypatch.setattr(transformers_reads, "transformers_version", lambda: "0.0.0-other")
    try:
        assert transformers_reads.shipped() == {}
    finally:
        transformers_reads.shipped.cache_clear()


def test_any_other_config_is_read_once_then_from_the_user_cache(no_records, monkeypatch, tmp_path):
    raw = dict(load_model("gemma4-31b").hf_config, _name_or_path="me/my-gemma")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    first = load_hf_config(path)
    kept = list(no_records.glob(f"*/{config_key(raw)}.json"))
    assert len(kept) == 1 and transformers_version() in kept[0].parent.name
    monkeypatch.setattr(configs, "_transformers_config", _refuse)
    assert load_hf_config(path) == first
    # the check can fail: a damaged record is read afresh (and here refused), never trusted
    kept[0].write_text('{"built_by": "x"}')
    with pytest.raises(AssertionError, match="read through transformers"):
        load_hf_config(path)


def test_a_read_only_cache_leaves_the_answer_unchanged(monkeypatch, tmp_path):
    monkeypatch.setattr(transformers_reads, "shipped", lambda: {})
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SWA_KIT_CACHE_DIR", str(blocker))  # a file where the folder would go
    assert load_model("gpt-oss-20b").num_layers == 24


def test_a_field_json_would_change_leaves_no_record(no_records):
    from types import SimpleNamespace

    class Odd:
        """Not a JSON value, not a dtype."""

    text = SimpleNamespace(num_hidden_layers=2, layer_types=Odd())
    with pytest.raises(transformers_reads.Unrecordable, match="Odd"):
        record(SimpleNamespace(dtype=None), text, "test")
    kept = record(SimpleNamespace(dtype=None), SimpleNamespace(num_hidden_layers=2, layer_types=("full_attention",)),
                  "test")
    assert kept["text"]["layer_types"] == ["full_attention"] and kept["text"]["sliding_window"] is None
