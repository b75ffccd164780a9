"""The vLLM side of the known-bugs corpus: entries with ``"engine": "vllm"``, replayed through the vLLM audit.

Each vLLM entry's finding must be raised at its ``before-<N>`` version and gone at vLLM 0.34.0; a rule of the kit's
vLLM model broken on purpose must make the replay say so. Bad vLLM entries are refused by file and field.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.launch import vllm_args, vllm_kv_cache, vllm_routes
from swa_kit.launch.vllm_args import parse_vllm_flags
from swa_kit.launch.vllm_plan import plan
from swa_kit.measure import bugs, vllm_audit
from swa_kit.measure.vllm_audit import audit_vllm
from swa_kit.measure.vllm_bug_launch import build_plan
from swa_kit.measure.vllm_bug_match import match_vllm
from swa_kit.models.configs import load_model
from swa_kit.vllm_versions import REVERTIBLE_FIXES, VLLM_VERSION, VLLM_VERSIONS, before, has_fix, reverted_fix

CORPUS = bugs.load_corpus()
VLLM = [e for e in CORPUS if e.engine == "vllm"]
BY_ID = {e.id: e for e in VLLM}
SAMPLE = "vllm-28539"  # a full vLLM entry (config object, env, after_fix) to corrupt


def test_the_vllm_threads_are_in_the_corpus_and_replay_on_vllm():
    assert {"vllm-28539", "vllm-31625", "vllm-39254", "vllm-41830", "vllm-42024", "vllm-46847"} <= set(BY_ID)
    for entry in VLLM:
        assert entry.repository == "vllm-project/vllm" and entry.label == f"vLLM #{entry.number}"
        assert entry.launch.vllm_version in VLLM_VERSIONS
        if entry.after_fix is not None:  # replayed before the fix the kit models, gone at the release
            # A thread with no merged fix (fixed_by "open") names the change 0.34.0 carries in its stead by the
            # thread's own number, as SGLang's before-34924 does.
            fix = entry.number if entry.fixed_by == "open" else entry.fixed_by
            assert entry.after_fix == VLLM_VERSION and entry.launch.vllm_version == before(fix)
    assert all(e.engine == "sglang" for e in CORPUS if e.repository == "sgl-project/sglang")


@pytest.mark.parametrize("entry", VLLM, ids=lambda e: e.id)
def test_each_vllm_entry_is_raised_before_its_fix_and_gone_after(entry):
    result = bugs.replay(entry)
    assert result.ok, f"{entry.id}: {result.verdict}: {result.detail}"
    assert entry.finding_class in bugs.finding_classes(result.finding)
    if entry.after_fix:
        assert result.verdict == "raised, gone after the fix" and f"gone at vLLM {VLLM_VERSION}" in result.detail
        after = bugs.entry_findings(entry, entry.after_fix)
        assert not any(entry.finding_class in bugs.finding_classes(f) for f in after)


def test_every_revertible_vllm_fix_has_an_entry_that_replays_it():
    replayed = {e.launch.vllm_version for e in VLLM}
    assert {before(pr) for pr in REVERTIBLE_FIXES} <= replayed
    assert not has_fix("before-29234", 29234) and has_fix(VLLM_VERSION, 29234) and has_fix("before-32877", 29234)
    assert [reverted_fix(v) for v in VLLM_VERSIONS] == [None, *sorted(REVERTIBLE_FIXES, reverse=True)]
    with pytest.raises(KeyError, match="29233"):
        before(29233)


# -- a broken rule makes the replays fail ---------------------------------------------------------------------------


def test_a_rule_that_never_undoes_a_fix_leaves_the_before_versions_silent(monkeypatch):
    monkeypatch.setattr(vllm_routes, "has_fix", lambda version, pr: True)
    for ident in ("vllm-28539", "vllm-31625"):
        result = bugs.replay(BY_ID[ident])
        assert (result.verdict, result.ok) == ("NOT RAISED", False), ident


def test_a_rule_that_ignores_the_version_keeps_the_finding_after_the_fix(monkeypatch):
    monkeypatch.setattr(vllm_routes, "has_fix", lambda version, pr: False)
    for ident in ("vllm-28539", "vllm-31625"):
        result = bugs.replay(BY_ID[ident])
        assert (result.verdict, result.ok) == ("still raised after the fix", False), ident


def test_a_window_passed_again_on_the_old_route_is_caught(monkeypatch):
    """The pre-#29234 route given its window back (a wrong model of the old code) no longer shows the thread."""
    real = vllm_routes.VllmRoute

    def windowed(mode, kernel, window_arg, convention, keys, *rest, **kw):
        if kernel == "aiter paged_attention_v1 (no window argument)":
            return real(mode, kernel, 1024, "window length W (0 = off)", 1024, *rest, **kw)
        return real(mode, kernel, window_arg, convention, keys, *rest, **kw)

    monkeypatch.setattr(vllm_routes, "VllmRoute", windowed)
    assert bugs.replay(BY_ID["vllm-28539"]).verdict == "NOT RAISED"


def test_the_memory_rule_switched_off_loses_39254(monkeypatch):
    monkeypatch.setattr(vllm_audit, "_memory_findings", lambda plan: [])
    result = bugs.replay(BY_ID["vllm-39254"])
    assert (result.verdict, result.ok) == ("NOT RAISED", False)


def test_a_connector_table_that_loses_nixls_support_keeps_42024_after_the_fix(monkeypatch):
    monkeypatch.setitem(vllm_args.VLLM_KV_CONNECTORS, "NixlConnector", False)
    result = bugs.replay(BY_ID["vllm-42024"])
    assert (result.verdict, result.ok) == ("still raised after the fix", False)


def test_a_switch_that_ignores_the_connector_leaves_41830_and_42024_silent(monkeypatch):
    real = vllm_kv_cache.hybrid_manager_disabled
    monkeypatch.setattr(vllm_kv_cache, "hybrid_manager_disabled",
                        lambda flag, chunked, method, env, connector=None, version=VLLM_VERSION:
                        real(flag, chunked, method, env, None, version))
    monkeypatch.setattr("swa_kit.launch.vllm_plan.hybrid_manager_disabled",
                        vllm_kv_cache.hybrid_manager_disabled)
    for ident in ("vllm-41830", "vllm-42024"):
        assert bugs.replay(BY_ID[ident]).verdict == "NOT RAISED", ident


@pytest.mark.parametrize("config, supports", [
    ('{"kv_connector": "NixlConnector", "kv_role": "kv_both"}', True),
    ('{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}', False),
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": '
     '[{"kv_connector": "NixlConnector"}, {"kv_connector": "OffloadingConnector"}]}}', True),
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": '
     '[{"kv_connector": "NixlConnector"}, {"kv_connector": "ExampleConnector"}]}}', False),
    ('{"kv_connector": "MultiConnector"}', False),  # no child: supports_hma_config says no
])
def test_the_connector_decides_the_switch_as_supports_hma_config_does(config, supports):
    args = parse_vllm_flags(f"--kv-transfer-config '{config}'")
    assert args.kv_connector_hma()[1] is supports
    disabled, rule = vllm_kv_cache.hybrid_manager_disabled(None, False, None, True, args.kv_connector_hma())
    assert disabled is not supports and (supports or "supports_hma_config" in rule)
    assert vllm_kv_cache.hybrid_manager_disabled(None, False, None, True, args.kv_connector_hma(),
                                                 "before-41847")[0] is True
    if supports:
        assert vllm_kv_cache.hybrid_manager_disabled(False, False, None, True, args.kv_connector_hma())[0] is False
    else:  # forced on with a connector that cannot: vLLM's create_connector refuses
        with pytest.raises(UsageError, match="does not support HMA"):
            vllm_kv_cache.hybrid_manager_disabled(False, False, None, True, args.kv_connector_hma())


@pytest.mark.parametrize("config, named", [
    ('{"kv_connector": "PirateConnector"}', "PirateConnector"),
    ('{"kv_connector": "LMCacheMPConnector"}', "LMCacheMPConnector"),  # its class lives in lmcache: not modelled
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [{"kv_connector": "X"}]}}',
     "'X'"),
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": "NixlConnector"}}',
     "list of connector configs"),
    ("[1]", "JSON object"),
    ('{"kv_connector": ["NixlConnector"]}', "NixlConnector"),
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [{"kv_connector": '
     '"MultiConnector"}]}}', "'MultiConnector' is not one"),  # nested: not modelled
    ('{"kv_connector": "MultiConnector", "kv_connector_extra_config": 5}', "list of connector configs"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
])
def test_an_unknown_connector_is_refused_by_name(config, named):
    with pytest.raises(UsageError, match=named):
        parse_vllm_flags(f"--kv-transfer-config '{config}'")


def test_39254_is_raised_only_with_the_manager_off():
    entry = BY_ID["vllm-39254"]
    assert "--disable-hybrid-kv-cache-manager" in entry.launch.server_args and entry.fixed_by == "open"
    on = dataclasses.replace(entry, launch=dataclasses.replace(entry.launch, server_args=""))
    assert not any("local-sized-as-full" in bugs.finding_classes(f) for f in bugs.entry_findings(on))


# -- bad vLLM entries are refused by file and field ----------------------------------------------------------------


def _sample() -> dict:
    return json.loads((bugs.BUGS_DIR / f"{SAMPLE}.json").read_text())


def _refused(tmp_path, raw: dict) -> str:
    (tmp_path / f"{SAMPLE}.json").write_text(json.dumps(raw))
    with pytest.raises(bugs.BugEntryError) as error:
        bugs.load_corpus(tmp_path)
    assert f"{SAMPLE}.json" in str(error.value)
    return str(error.value)


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("engine"), "engine"),  # a vLLM thread is never replayed on SGLang
    (lambda r: r.update(engine="trtllm"), "engine"),
    (lambda r: r["launch"].update(vllm_version="0.11.0"), "launch.vllm_version"),
    (lambda r: r["launch"].update(vllm_version="before-38756"), "launch.vllm_version"),  # an SGLang fix
    (lambda r: r["launch"].update(platform="cuda-sm90"), "launch.platform"),
    (lambda r: r["launch"].update(server_args="--enforce-eager"), "launch.server_args"),
    (lambda r: r["launch"].update(env={"SGLANG_USE_AITER": "1"}), "launch.env"),
    (lambda r: r["launch"].update(sglang_version="0.5.23"), "launch.sglang_version"),  # not a vLLM launch key
    (lambda r: r["launch"].pop("vllm_version"), "launch.vllm_version"),
    (lambda r: r["launch"].update(model="gemma5"), "launch.model"),
    (lambda r: r.update(after_fix={"sglang_version": "0.5.23"}), "after_fix.sglang_version"),
    (lambda r: r.update(after_fix={"vllm_version": "before-29234"}), "after_fix"),  # the launch's own version
    (lambda r: r.update(fixed_by="regressed"), "fixed_by"),
])
def test_inconsistent_vllm_entries_are_named(tmp_path, change, field):
    raw = _sample()
    change(raw)
    assert f"field {field!r}" in _refused(tmp_path, raw)


def test_an_sglang_thread_is_not_replayed_on_vllm(tmp_path):
    raw = json.loads((bugs.BUGS_DIR / "sglang-38756.json").read_text())
    raw["engine"] = "vllm"
    (tmp_path / "sglang-38756.json").write_text(json.dumps(raw))
    with pytest.raises(bugs.BugEntryError, match="'engine'"):
        bugs.load_corpus(tmp_path)


def test_a_vllm_entry_has_no_sglang_launch():
    with pytest.raises(UsageError, match="vLLM audit"):
        bugs.build_launch(BY_ID[SAMPLE])


# -- the commands ----------------------------------------------------------------------------------------------------


def test_swa_kit_bugs_lists_and_replays_the_vllm_entries(capsys):
    assert main(["bugs", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert all(rows[e.id]["engine"] == "vllm" for e in VLLM) and rows["sglang-38756"]["engine"] == "sglang"
    assert main(["bugs", "--replay", SAMPLE]) == 0
    out = capsys.readouterr().out
    assert "vLLM #28539" in out and "raised, gone after the fix" in out and f"gone at vLLM {VLLM_VERSION}" in out


def _audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", *args], capture_output=True, text=True,
                          check=False)


def test_the_audit_plans_a_before_version_and_refuses_it_where_it_does_not_apply():
    entry = BY_ID["vllm-31625"]
    args = ["--engine", "vllm", "--model", "gpt-oss-120b", "--server-args", entry.launch.server_args,
            "--env", "VLLM_ROCM_USE_AITER=1"]
    before_fix = _audit(*args, "--vllm-version", "before-32877", "--json")
    report = json.loads(before_fix.stdout)
    assert before_fix.returncode == 1 and any("as if they were one" in f["detail"] for f in report["findings"])
    assert {"decision": "vLLM version", "value": "before-32877"}.items() <= report["decisions"][0].items()
    assert _audit(*args).returncode == 0
    refused = _audit("--model", "gpt-oss-120b", "--vllm-version", "before-32877")
    assert refused.returncode == 2 and "--engine vllm" in refused.stderr
    unknown = _audit(*args, "--vllm-version", "0.11.0")
    assert unknown.returncode == 2 and "0.11.0" in unknown.stderr


# -- the known vLLM bugs under the vLLM audit's findings --------------------------------------------------------------


@pytest.mark.parametrize("entry", VLLM, ids=lambda e: e.id)
def test_an_entrys_own_vllm_launch_matches_it(entry):
    report = audit_vllm(build_plan(entry.launch, entry.id))
    hits = [m for m in match_vllm(report, CORPUS) if entry in m.entries]
    assert hits and all(entry.finding_class in bugs.finding_classes(m.finding) for m in hits)
    assert f"matches {entry.label}, {entry.fix_text}" in hits[0].lines()
    if entry.after_fix:  # at the release with the fix, the launch matches nothing of this entry
        fixed = audit_vllm(build_plan(entry.launch, entry.id, entry.after_fix))
        assert not any(entry in m.entries for m in match_vllm(fixed, CORPUS))


def _vllm_report(model: str, flags: str, env: dict[str, str] | None = None, version: str = VLLM_VERSION):
    return audit_vllm(plan(load_model(model), parse_vllm_flags(flags), env or {}, vllm_version=version))


def test_a_memory_class_matches_whatever_the_backend_but_not_across_versions():
    for env in ({}, {"VLLM_ROCM_USE_AITER": "1"}):  # ROCM_AITER_UNIFIED_ATTN, then ROCM_AITER_FA
        ids = {e.id for m in match_vllm(_vllm_report("gpt-oss-20b", "--disable-hybrid-kv-cache-manager", env), CORPUS)
               for e in m.entries}
        assert ids == {"vllm-39254"}, env
    nixl = "--kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'"
    before = {e.id for m in match_vllm(_vllm_report("gpt-oss-20b", nixl, version="before-41847"), CORPUS)
              for e in m.entries}
    assert before == {"vllm-41830", "vllm-42024"}
    assert match_vllm(_vllm_report("gpt-oss-20b", nixl), CORPUS) == []


def test_a_route_class_needs_the_backend_and_the_drafter():
    eagle = "--speculative-config '{\"method\": \"eagle3\", \"model\": \"x\", \"num_speculative_tokens\": 3}'"
    fa = _vllm_report("gpt-oss-20b", f"--attention-backend ROCM_AITER_FA {eagle}", {"VLLM_ROCM_USE_AITER": "1"},
                      "before-32877")
    assert {e.id for m in match_vllm(fa, CORPUS) for e in m.entries} == {"vllm-31625"}
    assert match_vllm(_vllm_report("gpt-oss-20b", f"--attention-backend ROCM_AITER_UNIFIED_ATTN {eagle}",
                                   version="before-32877"), CORPUS) == []


def test_sglang_audits_never_match_vllm_entries():
    from swa_kit.launch.inputs import Launch
    from swa_kit.measure.audit import audit

    report = audit(Launch.from_inputs(model="gemma3-27b", sglang_version="before-38756"))
    ids = {e.id for m in bugs.match(report, CORPUS) for e in m.entries}
    assert "aiter-1362" in ids and not any(i.startswith("vllm-") for i in ids)


def test_the_vllm_audit_names_the_known_bugs(capsys):
    args = ["audit", "--engine", "vllm", "--model", "gemma4-31b", "--server-args", "--disable-hybrid-kv-cache-manager"]
    assert main(args) == 1
    assert "matches vLLM #39254, no fix known" in capsys.readouterr().out
    assert main([*args, "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [f["known_bugs"] for f in findings if f["severity"] == "memory"] == [["matches vLLM #39254, no fix known"]]
    assert main([*args, "--markdown"]) == 1
    assert "   - known bugs:\n     - matches vLLM #39254, no fix known" in capsys.readouterr().out
