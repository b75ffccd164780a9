"""``swa-kit audit --check-with-sglang`` against SGLang's own code: bundled launches agree, a planted rule shows.

Run in the SGLang venv: ``SWA_KIT_REQUIRE_SGLANG=1 pytest -m sglang tests/test_audit_sglang_check_sglang.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_support import require_sglang
from test_light_imports import loaded_after

from swa_kit.cli import main
from swa_kit.models.configs import MODELS_DIR

require_sglang("sglang.srt.server_args", "sglang.srt.arg_groups.pipeline",
               "sglang.srt.model_executor.pool_configurator", "sglang.srt.models.registry")

pytestmark = pytest.mark.sglang
DRAFT = Path(__file__).parent / "data" / "differential" / "draft-llama-2l.json"
SPEC = "--speculative-algorithm STANDALONE --speculative-num-steps 3 --speculative-eagle-topk 1 " \
       "--speculative-num-draft-tokens 4"


def _audit(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(["audit", *argv, "--check-with-sglang", "--json"])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    return code, json.loads(captured.out)


def _audit_apart(argv: list[str]) -> dict:
    """The audit in its own process, as an engineer runs it."""
    run = subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", *argv, "--check-with-sglang", "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def gemma4_dir(tmp_path_factory):
    """Gemma-4 31B's config.json in a model directory, as an engineer has it."""
    path = tmp_path_factory.mktemp("gemma4")
    (path / "config.json").write_text(json.dumps(json.loads((MODELS_DIR / "gemma4-31b.json").read_text())["hf_config"]))
    return path


def test_bundled_launches_agree_field_by_field(gemma4_dir, tmp_path):
    command = tmp_path / "launch.sh"  # a launch command with its own model path and draft path: both replaced
    command.write_text(f"python -m sglang.launch_server --model-path openai/gpt-oss-20b --tp 2 {SPEC} "
                       "--speculative-draft-model-path org/draft --mem-fraction-static 0.8 --context-length 32768\n")
    reports = []
    for argv in (["--model", "gemma3-27b", "--server-args", "--attention-backend aiter --tp 2"],
                 ["--model", "gpt-oss-20b", "--server-args", str(command), "--draft-hf-config", str(DRAFT),
                  "--platform", "rocm-gfx950"],
                 ["--hf-config", str(gemma4_dir), "--platform", "cuda-sm90", "--weights-gib", "30"]):
        reports.append(report := _audit_apart(argv))
        check = report["sglang_check"]
        assert check["version"] and [f["field"] for f in check["fields"]][:3] == [
            "attention_backend", "prefill_attention_backend", "decode_attention_backend"], argv
        assert [f for f in check["fields"] if not f["agree"]] == [], argv
        assert not [f for f in report["findings"] if f["where"] == "sglang check"], argv
    # aiter's and Triton's routes were compared layer by layer, the draft worker's decode too
    routes = [{f["field"]: f for f in r["sglang_check"]["fields"]}["routes"]["kit"] for r in reports]
    assert len(routes[0]["decode"]) == 62  # gemma3-27b on aiter
    assert {layer[0] for layer in routes[2]["decode"].values()} == {"decode_attention_fwd"}  # Gemma-4: triton
    assert len(routes[1]["draft_decode"]) == json.loads(DRAFT.read_text())["num_hidden_layers"]
    # the draft's config was read by both: SGLang counts its layers in the target's pool, as the kit does
    rows = {f["field"]: f for f in reports[1]["sglang_check"]["fields"]}
    assert rows["draft_layers"]["kit"] == rows["draft_layers"]["sglang"] == json.loads(DRAFT.read_text())[
        "num_hidden_layers"]


def test_a_planted_kit_rule_is_a_wrong_finding_naming_both_values(capsys, monkeypatch):
    from swa_kit.launch import decide as decide_module

    chosen = decide_module.choose_page_size
    monkeypatch.setattr(decide_module, "choose_page_size", lambda launch, choice: (64, "planted")
                        if chosen(launch, choice)[0] == 1 else chosen(launch, choice))
    code, report = _audit(capsys, ["--model", "gemma3-27b", "--server-args", "--attention-backend aiter"])
    assert code == 1
    rows = {f["field"]: f for f in report["sglang_check"]["fields"]}
    assert (rows["page_size"]["kit"], rows["page_size"]["sglang"], rows["page_size"]["agree"]) == (64, 1, False)
    found = [f for f in report["findings"] if f["title"].endswith("disagree on page_size")]
    assert len(found) == 1 and found[0]["severity"] == "wrong"
    assert "kit: 64;" in found[0]["detail"] and "raw launch: 1" in found[0]["detail"]
    # the same launch in Markdown and text carries the section and the finding
    assert main(["audit", "--model", "gemma3-27b", "--server-args", "--attention-backend aiter",
                 "--check-with-sglang", "--markdown"]) == 1
    markdown = capsys.readouterr().out
    assert f"## SGLang {report['sglang_check']['version']} on this launch" in markdown
    assert "| page_size" in markdown and "**[wrong]** the kit and SGLang" in markdown


def test_a_planted_layer_window_names_the_layers_that_differ(capsys, monkeypatch):
    from dataclasses import replace

    from swa_kit.models.configs import ModelLayout

    kind = ModelLayout.layer_kind

    def planted(self, i):  # the kit's window rule off by one on the sliding layers
        k = kind(self, i)
        return replace(k, sliding_window_size=k.sliding_window_size - 1) if k.sliding_window_size > 0 else k

    monkeypatch.setattr(ModelLayout, "layer_kind", planted)
    assert main(["audit", "--model", "gemma3-27b", "--server-args", "--attention-backend aiter --page-size 16",
                 "--check-with-sglang"]) == 1
    text = capsys.readouterr().out
    assert "disagree on layer_windows" in text and "layer 0: kit 1,022, SGLang 1,023" in text


def test_only_the_flag_imports_sglang():
    code = "from swa_kit.cli import main\ntry:\n    main({!r})\nexcept SystemExit:\n    pass"
    argv = ["audit", "--model", "gemma4-31b"]
    assert not loaded_after(code.format(argv), ("sglang",))
    # the check can fail: the flag does import it
    assert "sglang" in loaded_after(code.format([*argv, "--check-with-sglang"]), ("sglang",))


def test_a_kit_refusal_carries_sglangs_own_answer(capsys, monkeypatch):
    assert main(["audit", "--model", "gemma4-31b", "--server-args", "--attention-backend fa3",
                 "--check-with-sglang"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Gemma-4 runs only on" in err and "own code refuses it too: AssertionError at model_hook.py" in err
    # the check can fail: a refusal the kit plants where SGLang starts is named as a disagreement
    from swa_kit.errors import LaunchRefusedError
    from swa_kit.measure import audit as audit_module

    def refuse(launch):
        raise LaunchRefusedError("planted refusal")

    monkeypatch.setattr(audit_module, "check_surface", refuse)
    assert main(["audit", "--model", "gemma4-31b", "--check-with-sglang"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "planted refusal; but SGLang" in err and "accepts this launch: the kit and SGLang disagree" in err
