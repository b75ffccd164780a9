"""benchmarks/gpu_run.py, the one device call: an unknown stage is refused before any runs, a failing stage never costs
the others, and every ``gpu_run.py STAGE`` the docs, records and code name is a stage it has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from benchmark_scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))  # the script makes its output folder on import
    return load_script("gpu_run")


def _fake_stages(gpu_run, monkeypatch, ran: list[str]) -> None:
    def stage(name: str):
        def run() -> None:
            ran.append(name)
            if name == "tests_kit":
                raise RuntimeError("a stage that fails")
        return run

    monkeypatch.setattr(gpu_run, "STAGES", {name: stage(name) for name in gpu_run.STAGES})


def test_an_unknown_stage_is_refused_before_any_stage_runs(gpu_run, monkeypatch, capsys) -> None:
    ran: list[str] = []
    _fake_stages(gpu_run, monkeypatch, ran)
    assert gpu_run.main(["env", "tune"]) == 2
    assert ran == [] and "unknown stage(s) ['tune']; known: env, " in capsys.readouterr().err


def test_a_failing_stage_never_costs_the_others(gpu_run, monkeypatch, capsys, tmp_path) -> None:
    ran: list[str] = []
    _fake_stages(gpu_run, monkeypatch, ran)
    assert gpu_run.main(["tests_kit", "env"]) == 0
    assert ran == ["tests_kit", "env"]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "stage tests_kit FAILED" in summary and "RuntimeError: a stage that fails" in summary
    assert "[env done in" in summary
    ran.clear()
    assert gpu_run.main([]) == 0 and ran == list(gpu_run.DEFAULT_STAGES)


def test_every_stage_the_docs_name_is_a_stage() -> None:
    gpu_run = load_script("gpu_run")
    texts = [path.read_text() for path in (*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("records/**/*.md"),
                                           *ROOT.glob("notebooks/*.py"), *ROOT.glob("swa_kit/**/*.py"))]
    named = {stage for text in texts for run in re.findall(r"`[^`\n]*gpu_run\.py((?: [a-z_0-9]+)+)`", text)
             for stage in run.split()}  # each command as the docs quote it: `... gpu_run.py STAGE ...`
    assert named, "no doc names a gpu_run.py stage: this test reads the wrong files"
    missing = named - set(gpu_run.STAGES)
    assert not missing, f"stages named in the docs that gpu_run.py lacks: {sorted(missing)}"
