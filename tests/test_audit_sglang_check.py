"""``swa-kit audit --check-with-sglang`` without SGLang, and the raw launch it hands SGLang (no SGLang needed).

The comparison against SGLang's own code is in tests/test_audit_sglang_check_sglang.py (the SGLang venv).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.launch import sglang_oracle
from swa_kit.launch.inputs import Launch
from swa_kit.measure.sglang_check import FieldCheck, RawLaunch, Side, check_launch, differences, sglang_argv
from swa_kit.launch.decide import decide
from swa_kit.sglang_versions import BEFORE_38756


def test_the_flag_without_sglang_stops_first_with_how_to_install(capsys, monkeypatch):
    monkeypatch.setattr(sglang_oracle, "sglang_version", lambda: None)
    assert main(["audit", "--model", "gemma4-31b", "--check-with-sglang", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stopped before any work: no report
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--check-with-sglang needs SGLang, not installed here" in lines[0]
    assert "pip install --no-deps sglang==" in lines[0]


@pytest.mark.parametrize("argv, message", [
    (["--server-args", "server_args=ServerArgs(model_path='m', page_size=1)"], "a logged ServerArgs(...) line"),
    (["--sglang-version", BEFORE_38756], "compares with the SGLang installed here"),
])
def test_a_launch_the_check_cannot_give_sglang_raw_is_refused(capsys, monkeypatch, argv, message):
    monkeypatch.setattr(sglang_oracle, "sglang_version", lambda: "0.0-test")  # past the install check
    assert main(["audit", "--model", "gemma4-31b", *argv, "--check-with-sglang"]) == 2
    assert message in capsys.readouterr().err


def test_a_draft_path_not_on_this_machine_is_refused_before_sglang_is_asked():
    args = ("--speculative-algorithm STANDALONE --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 --speculative-draft-model-path some-org/draft-on-the-hub")
    launch = Launch.from_inputs(model="gpt-oss-20b", server_args=args)
    raw = RawLaunch(tuple(args.split()), launch.model.hf_config, None)
    with pytest.raises(UsageError, match="pass --draft-hf-config"):
        check_launch(launch, decide(launch), raw)


def test_sglang_gets_the_words_as_typed_with_the_paths_pointing_here():
    words = ("--model-path", "google/gemma-3-27b-it", "--tp", "2", "--speculative-draft-model=org/draft",
             "--weird-flag", "x")
    assert sglang_argv(words, "/m", "/d") == ["--model-path", "/m", "--tp", "2", "--speculative-draft-model", "/d",
                                              "--weird-flag", "x"]
    assert sglang_argv(("--model=x", "--page-size", "16"), "/m", None) == ["--model", "/m", "--page-size", "16"]
    assert sglang_argv(("--page-size", "16"), "/m", None) == ["--model-path", "/m", "--page-size", "16"]


def test_refusals_and_fields_compare_as_the_differential_does():
    kit, same = Side(None, {"page_size": 1, "layer_windows": {0: 3}}), Side(None, {"page_size": 1,
                                                                                 "layer_windows": {0: 3}})
    assert differences(kit, same, ("page_size", "layer_windows")) == {}
    assert differences(kit, Side(None, {"page_size": 16, "layer_windows": {0: 2}}), ("page_size", "layer_windows")) \
        == {"page_size": (1, 16), "layer_windows": ({0: 3}, {0: 2})}
    assert differences(kit, Side("ValueError at x.py:1: no", {}), ("page_size",)) == \
        {"refusal": (None, "ValueError at x.py:1: no")}
    assert differences(Side("refused: SWA pool under its floor", {}), Side("ValueError at x.py:1", {})) == {}
    assert not FieldCheck("refusal", None, "AssertionError").agree and FieldCheck("refusal", "a", "b").agree


def test_a_config_file_under_another_name_is_copied_for_sglang(tmp_path):
    from swa_kit.measure.sglang_check import _config_dirs

    named = tmp_path / "gemma.json"
    named.write_text('{"architectures": ["X"]}')
    with _config_dirs(RawLaunch((), named, tmp_path / "config.json")) as (model_dir, draft_dir):
        assert (Path(model_dir) / "config.json").read_text() == named.read_text()
        assert draft_dir == str(tmp_path)  # a config.json is read where it is, beside the user's other files


def test_a_per_layer_field_names_the_layers_and_modes_that_differ():
    from swa_kit.measure.sglang_check import differing_items

    windows = FieldCheck("layer_windows", {0: 1023, 1: -1, 2: 1023}, {0: 1022, 1: -1, 2: 1022})
    assert differing_items(windows) == [("layer 0", 1023, 1022), ("layer 2", 1023, 1022)]
    route = ["unified_attention", [126, 0], "swa", 127]
    routes = FieldCheck("routes", {"decode": {0: route, 1: route}, "verify": None},
                        {"decode": {0: route, 1: [*route[:3], 128]}, "verify": {0: route}})
    assert differing_items(routes) == [("decode layer 1", route, [*route[:3], 128]), ("verify layer 0", None, route)]
    assert differing_items(FieldCheck("page_size", 1, 16)) == []
