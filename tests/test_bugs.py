"""The known-bugs corpus (data/bugs): every entry reads, replays as it says, and a bad entry is refused by name."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path, PurePosixPath

import pytest

from swa_kit.cli import main
from swa_kit.launch.inputs import Launch
from swa_kit.measure import bugs
from swa_kit.measure.audit import Finding, audit

CORPUS = bugs.load_corpus()
BY_ID = {e.id: e for e in CORPUS}
REPLAYED = [e for e in CORPUS if not e.gap]
SAMPLE = "sglang-38756"  # a full entry (with after_fix) to corrupt


def _audit(model: str | None = None, args: str = "", version: str = "0.5.23", platform: str = "rocm-gfx942",
           hf_config: str | None = None):
    return audit(Launch.from_inputs(model=model, hf_config=hf_config, server_args=args, sglang_version=version,
                                    platform=platform))


# -- the corpus as shipped ----------------------------------------------------------------------------------------


def test_every_file_is_an_entry_named_by_its_thread():
    files = sorted(p.stem for p in bugs.BUGS_DIR.glob("*.json"))
    assert sorted(BY_ID) == files
    assert len(CORPUS) >= 25
    for entry in CORPUS:
        assert entry.id == f"{bugs.REPOSITORIES[entry.repository][0]}-{entry.number}"
        assert entry.finding_class in bugs.FINDING_CLASSES
        assert entry.fixed_by == "open" or entry.state != "open" or entry.kind == "issue"


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e.id)
def test_every_entry_replays_as_the_corpus_says(entry):
    result = bugs.replay(entry)
    assert result.ok, f"{entry.id}: {result.verdict}: {result.detail}"
    if entry.gap:
        assert result.verdict == "gap" and result.finding is None
    else:
        assert entry.finding_class in bugs.finding_classes(result.finding)
        assert result.verdict.startswith("raised")


def test_an_entry_with_a_fix_the_kit_models_loses_its_finding_after_it():
    with_fix = [e for e in CORPUS if e.after_fix]
    assert with_fix
    for entry in with_fix:
        after = bugs.entry_findings(entry, entry.after_fix)  # an SGLang refusal is one finding
        assert not any(entry.finding_class in bugs.finding_classes(f) for f in after), entry.id


def test_replay_says_when_the_corpus_and_the_audit_disagree():
    one_short = BY_ID["sglang-32087"]  # the Triton decode is one key short on both versions the kit knows
    stale = bugs.replay(dataclasses.replace(one_short, after_fix="before-38756"))
    assert (stale.verdict, stale.ok) == ("still raised after the fix", False)
    closed = bugs.replay(dataclasses.replace(one_short, audit_gap="pretend the audit lacks it"))
    assert (closed.verdict, closed.ok) == ("GAP CLOSED", False)
    missing = bugs.replay(dataclasses.replace(one_short, finding_class="untranslated-slots"))
    assert (missing.verdict, missing.ok) == ("NOT RAISED", False)
    refused = bugs.replay(dataclasses.replace(BY_ID["sglang-37610"], finding_class="one-key-short", audit_gap=""))
    assert (refused.verdict, refused.ok) == ("refused", False) and "DeepseekV4ForCausalLM" in refused.detail


# -- finding classes read from real audits -------------------------------------------------------------------------


@pytest.mark.parametrize("name, model, args, version", [
    ("untranslated-slots", "gpt-oss-20b", "--speculative-algorithm FROZEN_KV_MTP", "before-38756"),
    ("window-not-passed", "gemma3-27b", "", "before-38756"),
    ("one-key-short", "gemma4-31b", "", "0.5.23"),
    ("swa-pool-too-small", "gpt-oss-120b", "--max-total-tokens 150", "0.5.23"),
])
def test_each_class_the_audit_raises_is_recognised(name, model, args, version):
    report = _audit(model, args, version)
    assert any(name in bugs.finding_classes(f) for f in report.findings)


def test_the_pool_floor_class_follows_sglangs_rule_on_random_budgets():
    """validate_swa_pool_size: refused when swa tokens (0.8 x full, pages of 1) <= sliding_window_size + page."""
    rng = random.Random(34)
    for tokens in rng.sample(range(100, 400), 12):
        report = _audit("gpt-oss-120b", f"--max-total-tokens {tokens}")
        raised = any("swa-pool-too-small" in bugs.finding_classes(f) for f in report.findings)
        assert raised == (int(tokens * 0.8) <= 127 + 1), tokens


def test_findings_of_no_known_class_get_none():
    for finding in _audit("gpt-oss-120b").findings:
        if finding.severity in ("memory", "info"):
            assert bugs.finding_classes(finding) == frozenset()
    assert bugs.finding_classes(Finding("info", "one key short", "takes no window", "")) == frozenset()


# -- matching an audit's findings to the corpus -------------------------------------------------------------------


# A refused launch gets no report to match against: the audit answers it with SGLang's one-line refusal.
AUDITED = [e for e in REPLAYED if e.finding_class != "startup-refusal" and e.engine == "sglang"]


def test_a_refused_launch_replays_as_the_refusal_class():
    refused = [e for e in REPLAYED if e.finding_class == "startup-refusal"]
    assert refused
    for entry in refused:
        result = bugs.replay(entry)
        assert result.finding.title == bugs.REFUSAL_TITLE and "SGLang refuses this launch" in result.finding.detail


@pytest.mark.parametrize("entry", AUDITED, ids=lambda e: e.id)
def test_an_entrys_own_launch_matches_it(entry):
    matches = bugs.match(audit(bugs.build_launch(entry)), CORPUS)
    hits = [m for m in matches if entry in m.entries]
    assert hits and all(entry.finding_class in bugs.finding_classes(m.finding) for m in hits)
    assert f"matches {entry.label}, {entry.fix_text}" in hits[0].lines()


def test_a_fix_sglang_lost_again_is_never_called_fixed():
    """sglang-7988: the PR's fa3 check is gone from 0.5.23, so its failure is live and the audit says so."""
    lost = BY_ID["sglang-7988"]
    assert lost.fixed_by == "regressed" and lost.after_fix is None
    lines = [line for m in bugs.match(audit(bugs.build_launch(lost)), CORPUS) for line in m.lines()
             if lost.label in line]
    assert lines and set(lines) == {"matches SGLang #7988, fixed in #7988, but SGLang 0.5.23 no longer has that fix"}
    assert lost.fixed_label == "#7988, not in 0.5.23"
    assert all(e.fix_text.startswith(("fixed in #", "no fix known")) for e in CORPUS)


def test_the_mechanism_matches_across_models_but_not_across_backends_or_versions():
    frozen_kv = "--speculative-algorithm FROZEN_KV_MTP"
    before = {e.id for m in bugs.match(_audit("gpt-oss-20b", frozen_kv, "before-38756"), CORPUS) for e in m.entries}
    assert "sglang-38756" in before  # the seed's failure is the pool resolver's, whatever the hybrid model
    after = {e.id for m in bugs.match(_audit("gpt-oss-20b", frozen_kv, "0.5.23"), CORPUS) for e in m.entries}
    assert "sglang-38756" not in after
    triton = {e.id for m in bugs.match(_audit("gpt-oss-120b", "--attention-backend triton"), CORPUS)
              for e in m.entries}
    assert triton == {"sglang-32087", "sglang-34354"}  # the Triton decode's one-key-short threads


def test_launches_with_no_known_bug_match_nothing(tmp_path):
    # GPT-OSS on aiter is one key short too, but through unified_attention: no thread reports that route.
    report = _audit("gpt-oss-120b")
    assert any("one-key-short" in bugs.finding_classes(f) for f in report.findings)
    assert bugs.match(report, CORPUS) == []
    config = tmp_path / "config.json"  # a model without sliding layers: nothing to find, nothing to match
    config.write_text(json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                  "sliding_window": None}))
    plain = _audit(hf_config=str(config))
    assert plain.exit_code == 0 and bugs.match(plain, CORPUS) == []


# -- bad entries are refused by file and field --------------------------------------------------------------------


def _sample() -> dict:
    return json.loads((bugs.BUGS_DIR / f"{SAMPLE}.json").read_text())


def _refused(tmp_path, raw, name: str = SAMPLE) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    with pytest.raises(bugs.BugEntryError) as error:
        bugs.load_corpus(tmp_path)
    assert f"{name}.json" in str(error.value)
    return str(error.value)


@pytest.mark.parametrize("key", sorted(_sample()))
def test_every_field_missing_or_mistyped_is_named(tmp_path, key):
    raw = _sample()
    del raw[key]
    if key not in ("audit_gap", "after_fix"):
        assert f"field {key!r}" in _refused(tmp_path, raw)
    raw = _sample()
    raw[key] = [raw[key]]  # a list where the schema wants text, a number or an object (evidence: its item)
    assert f"field '{key}" in _refused(tmp_path, raw)


@pytest.mark.parametrize("key", ["model", "server_args", "env", "sglang_version", "platform"])
def test_every_launch_field_missing_or_mistyped_is_named(tmp_path, key):
    raw = _sample()
    del raw["launch"][key]
    assert f"field 'launch.{key}'" in _refused(tmp_path, raw)
    raw = _sample()
    raw["launch"][key] = 7
    assert f"field 'launch.{key}'" in _refused(tmp_path, raw)


@pytest.mark.parametrize("change, field", [
    (lambda r: r.update(surprise=1), "surprise"),
    (lambda r: r.update(number=38755), "id"),
    (lambda r: r.update(kind="issue"), "state"),  # an issue is never merged
    (lambda r: r.update(fixed_by="open"), "fixed_by"),  # a merged PR fixes itself
    (lambda r: r.update(fixed_by="regressed"), "fixed_by"),  # a lost fix has no version where it is back
    (lambda r: r.pop("after_fix") and r.update(fixed_by="regressed", state="closed"), "fixed_by"),  # merged only
    (lambda r: r.update(fixed_by="fixed"), "fixed_by"),
    (lambda r: r.update(finding_class="off-by-two"), "finding_class"),
    (lambda r: r.update(title=""), "title"),
    (lambda r: r.update(symptom="x" * (bugs.MAX_TEXT + 1)), "symptom"),
    (lambda r: r.update(after_fix={"sglang_version": r["launch"]["sglang_version"]}), "after_fix"),
    (lambda r: r["launch"].update(platform="rocm-gfx1100"), "launch.platform"),
    (lambda r: r["launch"].update(model="gemma5"), "launch.model"),
    (lambda r: r["launch"].update(env={"X": 1}), "launch.env"),
    (lambda r: r["launch"].update(env={"SGLANG_ENABLE_SPEC_V2": "1"}), "launch.env"),  # a variable the kit reads not
    (lambda r: r["launch"].update(server_args="--page-size 0"), "launch.server_args"),
    (lambda r: r.update(evidence=[]), "evidence"),
    (lambda r: r["evidence"][0].update(line=0), "evidence[0].line"),
    (lambda r: r["evidence"][1].pop("function"), "evidence[1].function"),
])
def test_inconsistent_values_are_named(tmp_path, change, field):
    raw = _sample()
    change(raw)
    assert f"field {field!r}" in _refused(tmp_path, raw)


def test_unreadable_files_are_named(tmp_path):
    assert "not valid JSON" in _refused(tmp_path, "{")
    assert "nested too deeply" in _refused(tmp_path, "[" * 20_000 + "]" * 20_000)
    assert "bytes" in _refused(tmp_path, " " * (bugs.MAX_ENTRY_BYTES + 1))
    assert "JSON object" in _refused(tmp_path, "[]")
    assert "'id'" in _refused(tmp_path, _sample(), name="sglang-1")  # the file's name must be the entry's id


def test_the_wheel_ships_every_entry():
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["swa_kit.data"]
    for path in bugs.BUGS_DIR.glob("*.json"):
        assert any(PurePosixPath("bugs", path.name).match(glob) for glob in globs), path.name


# -- the command ----------------------------------------------------------------------------------------------------


def test_the_command_lists_and_replays(capsys):
    assert main(["bugs"]) == 0
    out = capsys.readouterr().out
    assert all(e.id in out for e in CORPUS) and f"{len(CORPUS)} threads: {len(REPLAYED)} replay" in out
    assert main(["bugs", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [e.id for e in CORPUS]
    assert main(["bugs", "--replay", SAMPLE]) == 0
    assert "raised, gone after the fix" in capsys.readouterr().out
    assert main(["bugs", "--replay", "all", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(CORPUS) and all(r["as_expected"] for r in rows)


def test_an_unknown_id_is_one_line_and_exit_2(capsys):
    assert main(["bugs", "--replay", "sglang-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no bug entry 'sglang-1'" in err and SAMPLE in err
