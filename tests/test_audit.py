"""swa-kit audit: the done-when launches, ranked findings, the three output forms and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swa_kit.measure.audit import SEVERITIES, audit
from swa_kit.cli import main
from swa_kit.models.configs import MODELS_DIR
from swa_kit.launch.inputs import Launch
from swa_kit.resources import data_path
from swa_kit.sglang_versions import BEFORE_38756


@pytest.fixture(scope="module")
def gemma4_config(tmp_path_factory):
    """Gemma-4 31B's config.json, written out as an engineer would have it."""
    path = tmp_path_factory.mktemp("gemma4") / "config.json"
    path.write_text(json.dumps(json.loads((MODELS_DIR / "gemma4-31b.json").read_text())["hf_config"]))
    return path


def _run_json(capsys, argv):
    code = main(["audit", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_gemma4_defaults_on_rocm_triton_window_arithmetic_and_real_pools(capsys, gemma4_config):
    code, report = _run_json(capsys, ["--hf-config", str(gemma4_config), "--platform", "rocm-gfx942"])
    decisions = {r["decision"]: r for r in report["decisions"]}
    assert decisions["attention_backend"]["value"] == "triton"
    assert "model_overrides/gemma4.py" in decisions["attention_backend"]["source"]
    routes = {(r["mode"], r["kind"]): r for r in report["routes"]}
    assert routes[("decode", "sliding")]["keys"] == "1023/1024" and routes[("decode", "sliding")]["backend"] == "triton"
    assert routes[("extend", "sliding")]["keys"] == "1024/1024"  # extend masks q <= k + sws: the whole window
    assert decisions["bytes_saved_vs_one_pool"]["value"] == pytest.approx(1 - 737_280 / 901_120, abs=1e-4)
    assert decisions["swa_tokens"]["value"] == int(decisions["full_tokens"]["value"] * 0.8)
    severities = [f["severity"] for f in report["findings"]]
    assert severities == sorted(severities, key=SEVERITIES.index)
    assert "memory" in severities and code == report["exit_code"] == 1


def test_gemma4_aiter_frozen_kv_mtp_resolver_routes_one_short(capsys, gemma4_config):
    args = "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP"
    code, report = _run_json(capsys, ["--hf-config", str(gemma4_config), "--server-args", args])
    decisions = {r["decision"]: r["value"] for r in report["decisions"]}
    assert "fixed _resolve_swa_kv_pool" in decisions["resolver"] and decisions["draft_pool"]["pool"].startswith("dummy")
    routes = {(r["worker"], r["mode"], r["kind"]): r for r in report["routes"]}
    draft = routes[("draft", "draft_decode", "sliding")]
    assert (draft["kernel"], draft["page_table"], draft["keys"], draft["sglang"], draft["kit"]) == (
        "unified_attention", "swa", "1023/1024", "runs", "ONE KEY SHORT")
    assert routes[("target", "verify", "sliding")]["kernel"] == "unified_attention"
    short = [f for f in report["findings"] if f["severity"] == "one-short"]
    assert short and "1023 of 1024 keys (one key short)" in short[0]["title"] and code == 1


def test_gemma4_before_38756_is_silently_wrong(capsys, gemma4_config):
    args = "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP"
    _, report = _run_json(capsys, ["--hf-config", str(gemma4_config), "--server-args", args,
                                   "--sglang-version", "before-38756"])
    wrong = [f for f in report["findings"] if f["severity"] == "wrong"]
    assert wrong and "untranslated full-pool slot ids" in wrong[0]["detail"]
    # no guard before the PR: the windowed routes just run (aiter's CK prefill still refuses the 512-wide full layer
    # the draft extends on, a kernel's assert, not SGLang's guard)
    assert not any(f["title"] == "SGLang's guard refuses this route" for f in report["findings"])


def test_gpt_oss_defaults_aiter_127_of_128(capsys):
    _, report = _run_json(capsys, ["--model", "gpt-oss-20b"])
    decisions = {r["decision"]: r["value"] for r in report["decisions"]}
    assert decisions["attention_backend"] == "aiter"
    decode = next(r for r in report["routes"] if r["mode"] == "decode" and r["kind"] == "sliding")
    assert decode["keys"] == "127/128" and decode["kernel"] == "unified_attention"
    assert decisions["bytes_saved_vs_one_pool"] == pytest.approx(0.10, abs=1e-4)


def test_gemma3_aiter_default_is_refused_by_sglangs_guard():
    report = audit(Launch.from_inputs(model="gemma3-27b"))
    raises = [f for f in report.findings if f.severity == "raises"]
    assert raises and "_reject_paged_decode_sliding_window" in raises[0].detail
    unified, triton = raises[0].ways_out  # two alternatives, each carried as a field from the plan
    assert unified.startswith("set SGLANG_USE_AITER_UNIFIED_ATTN=1") and "--attention-backend triton" in triton
    assert all("Ways out" not in way for way in (unified, triton))
    guarded = next(e for e in report.decisions.routes[("target", "decode")].layers if e.sglang_guard)
    assert (raises[0].detail, raises[0].ways_out) == (guarded.sglang_verdict.problem, guarded.sglang_verdict.ways_out)
    assert guarded.sglang_guard == f"{raises[0].detail}. Ways out: {unified}; or {triton}"  # one line, same fields


def test_findings_json_shape_is_stable(capsys):
    """Every finding is {severity, title, detail, ways_out: [str, ...], where}; ways out never hold prose to parse."""
    _, report = _run_json(capsys, ["--model", "gemma3-27b", "--server-args", "--speculative-algorithm EAGLE"])
    assert report["findings"] and set(report) == {"model", "sglang_version", "platform", "server_args_line", "env",
                                                  "decisions", "routes", "findings", "exit_code", "versions",
                                                  "command"}
    for finding in report["findings"]:
        assert list(finding) == ["severity", "title", "detail", "ways_out", "where", "known_bugs"], finding
        assert finding["severity"] in SEVERITIES and isinstance(finding["ways_out"], list)
        assert all(isinstance(w, str) and w and "Ways out" not in w for w in finding["ways_out"]), finding
        assert "Ways out" not in finding["detail"]  # the detail says what goes wrong; the ways out are the field's
    assert any(f["severity"] == "wrong" and f["ways_out"] for f in report["findings"])


def test_text_shows_every_way_out_from_the_field(capsys):
    report = audit(Launch.from_inputs(model="gpt-oss-20b"))
    short = next(f for f in report.findings if f.severity == "one-short")
    assert len(short.ways_out) == 2
    assert main(["audit", "--model", "gpt-oss-20b"]) == 1
    assert f"   ways out: {short.ways_out[0]}; or {short.ways_out[1]}\n" in capsys.readouterr().out


@pytest.mark.parametrize("algorithm", ["NGRAM"])
def test_algorithms_the_kit_does_not_plan_are_named(algorithm):
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args=f"--speculative-algorithm {algorithm} "
                                                                       "--page-size 1"))
    assert not report.decisions.routes
    note = next(f for f in report.findings if f.title == "routes not planned")
    assert f"the kit plans no routes for {algorithm}" in note.detail and "target decode on aiter" in note.detail
    assert "EAGLE, EAGLE3, STANDALONE, FROZEN_KV_MTP" in note.ways_out[0]


def test_llama4_chunked_layers_pass_sglangs_guard_but_are_judged_wrong():
    report = audit(Launch.from_inputs(model="llama4-scout"))
    decode = report.decisions.routes[("target", "decode")]
    chunked = [e for e in decode.layers if e.kind == "chunked"]
    assert chunked and all(e.sglang_guard is None and "chunked" in e.judgement for e in chunked)
    assert report.findings[0].severity == "wrong"


def test_vectorized_5d_layout_routes_to_gluon_and_ck():
    report = audit(Launch.from_inputs(model="gpt-oss-20b", env={"SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d",
                                                                 "SGLANG_USE_AITER": "1"}))
    assert report.decisions.page_size.value == 64
    decode = report.decisions.routes[("target", "decode")].layers[0]
    prefill = report.decisions.routes[("target", "prefill")].layers[0]
    assert (decode.kernel, decode.window_arg) == ("pa_decode_gluon", 127)
    assert (prefill.kernel, prefill.window_arg, prefill.effective_keys) == ("mha_batch_prefill_func", (127, -1), 128)


def test_text_and_markdown(capsys):
    assert main(["audit", "--model", "gpt-oss-20b"]) == 1
    text = capsys.readouterr().out
    assert "== Findings (worst first)" in text and "[one-short]" in text and "exit code 1" in text
    assert main(["audit", "--model", "gpt-oss-20b", "--markdown"]) == 1
    markdown = capsys.readouterr().out
    assert markdown.startswith("# swa-kit audit") and "| decision | value | source |" in markdown
    assert "**[one-short]**" in markdown


def test_exit_zero_without_findings_above_info(capsys, tmp_path):
    # A Mistral-style config without a window: every layer full, nothing to find beyond information.
    config = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, report = _run_json(capsys, ["--hf-config", str(tmp_path)])
    assert {f["severity"] for f in report["findings"]} == {"info"} and code == 0
    windowed = {**config, "sliding_window": 4096}
    (tmp_path / "config.json").write_text(json.dumps(windowed))
    code, report = _run_json(capsys, ["--hf-config", str(tmp_path)])
    wrong = [f for f in report["findings"] if f["severity"] == "wrong"]
    assert code == 1 and wrong and "sliding_window_size=-1" in wrong[0]["detail"]  # SGLang's llama.py passes none


@pytest.mark.parametrize("argv,message", [
    (["--hf-config", "/nonexistent/config.json"], "config '/nonexistent/config.json': no such file"),
    (["--model", "gpt-oss-20b", "--env", "SGLANG_NOPE=1"], "'SGLANG_NOPE' is not one"),
    (["--model", "gpt-oss-20b", "--server-args", "--page-size 1 --page-size 16"], "given twice"),
    (["--model", "gpt-oss-20b", "--server-args", "--speculative-num-draft-tokens 4"], "--speculative-algorithm is not"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    assert main(["audit", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_unknown_architecture_exits_2(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["FalconForCausalLM"], "model_type": "falcon"}))
    assert main(["audit", "--hf-config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown architecture 'FalconForCausalLM'; the kit models:" in err and err.count("\n") == 1


def test_conflicting_model_arguments_exit_2(capsys, gemma4_config):
    with pytest.raises(SystemExit) as bad:
        main(["audit", "--model", "gpt-oss-20b", "--hf-config", str(gemma4_config)])
    assert bad.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# -- --trace: a live server's kernel calls against the plan ---------------------------------------------------

TRACE = data_path("traces", "gemma4-31b_decode_aiter_cpu.jsonl")
AITER = ["--model", "gemma4-31b", "--server-args", "--attention-backend aiter"]


def _tampered(tmp_path, old, new):
    path = tmp_path / "tampered.jsonl"
    text = TRACE.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def test_recorded_trace_agrees_with_the_plan(capsys):
    code, report = _run_json(capsys, [*AITER, "--trace", str(TRACE)])
    ours = [f for f in report["findings"] if f["where"].startswith("trace")]
    assert [f["severity"] for f in ours] == ["info"] and "agrees with the plan: 2" in ours[0]["title"]


@pytest.mark.parametrize("old,new,severity,field", [
    ('"window_arg": [1022, 0]', '"window_arg": [-1, -1]', "wrong", "window_arg"),  # the window dropped
    ('"window_arg": [1022, 0]', '"window_arg": [1021, 0]', "wrong", "window_arg"),  # two keys short
    ('"page_table": "swa"', '"page_table": "full"', "wrong", "page_table"),  # untranslated slot ids
    ('"window_arg": [1022, 0]', '"window_arg": [1023, 0]', "info", "window_arg"),  # all 1024 keys, not as planned
])
def test_tampered_trace_is_a_ranked_finding(capsys, tmp_path, old, new, severity, field):
    code, report = _run_json(capsys, [*AITER, "--trace", str(_tampered(tmp_path, old, new))])
    ours = [f for f in report["findings"] if f["where"].startswith("trace")]
    assert [f["severity"] for f in ours] == [severity] and f"{field}=" in ours[0]["detail"]
    assert ours[0]["where"] == "trace: layer 0 decode" and code == 1
    severities = [f["severity"] for f in report["findings"]]
    assert severities == sorted(severities, key=SEVERITIES.index)


def test_traced_other_kernel_one_key_short_is_one_short(capsys, tmp_path):
    """Another kernel than planned, passed (sws - 1, 0): ranked by the keys it attends, 1023 of 1024."""
    path = _tampered(tmp_path, '"kernel": "unified_attention"', '"kernel": "extend_attention_fwd"')
    _, report = _run_json(capsys, [*AITER, "--trace", str(path)])
    ours = [f for f in report["findings"] if f["where"].startswith("trace")]
    assert [(f["severity"], f["where"]) for f in ours] == [("one-short", "trace: layer 0 decode")]
    assert "kernel='extend_attention_fwd'" in ours[0]["detail"] and "1023 of 1024" in ours[0]["title"]


def _nested(depth: int) -> list:
    value: list = [0]
    for _ in range(depth - 1):
        value = [value]
    return value


def _mutated(folder: Path, **fields) -> Path:
    """The shipped trace's first record with ``fields`` replaced (1e999 written as such: JSON has no inf)."""
    record = json.loads(data_path("traces", "gemma4-31b_decode_aiter_cpu.jsonl").read_text().splitlines()[0])
    path = folder / "mutated.jsonl"
    path.write_text(json.dumps({**record, **fields}).replace("Infinity", "1e999") + "\n")
    return path


@pytest.mark.parametrize("make,message", [
    (lambda p: p / "missing.jsonl", "no such file"),
    (lambda p: p, "is a folder"),
    (lambda p: (p / "bad.jsonl").write_text('{"layer": 0\n') and p / "bad.jsonl", "line 1 is not valid JSON"),
    (lambda p: (p / "empty.jsonl").write_text("\n\n") and p / "empty.jsonl", "empty.jsonl' holds no kernel calls"),
    (lambda p: Path("/dev/zero"), "trace '/dev/zero' is not a regular file"),
    (lambda p: _mutated(p, mode=["decode"]), "line 1: mode is ['decode']; a trace record's mode is str or null"),
    (lambda p: _mutated(p, layer=True), "line 1: layer is True; a trace record's layer is int or null"),
    (lambda p: _mutated(p, pid=1e999), "line 1: 1e999 is not a finite number"),
    (lambda p: _mutated(p, window_arg=_nested(34)), "line 1: JSON nested deeper than 32 levels"),
    (lambda p: _mutated(p, extra=1), "not a swa_kit.measure.trace record (lacks [], unknown ['extra'])"),
])
def test_bad_trace_files_exit_2_with_one_line(capsys, tmp_path, make, message):
    assert main(["audit", *AITER, "--trace", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("form", ["--markdown", None])
def test_trace_findings_in_text_and_markdown(capsys, tmp_path, form):
    path = _tampered(tmp_path, '"window_arg": [1022, 0]', '"window_arg": [-1, -1]')
    assert main(["audit", *AITER, "--trace", str(path), *([form] if form else [])]) == 1
    out = capsys.readouterr().out
    assert "window_arg=[-1, -1]" in out and "(trace: layer 0 decode)" in out


@pytest.mark.parametrize("name,args", [("gpt-oss-120b", ""), ("gemma4-31b", "--attention-backend aiter")])
def test_disabled_hybrid_pool_on_aiter_raises_at_the_first_decode(capsys, name, args):
    """No SWA pool: the sliding layers decode on the paged path, SGLang's guard raises, no 'runs, one key short'."""
    code, report = _run_json(capsys, ["--model", name, f"--server-args={args} --disable-hybrid-swa-memory"])
    decisions = {r["decision"]: r["value"] for r in report["decisions"]}
    assert decisions["attention_backend"] == "aiter" and decisions["hybrid_swa_memory"] is False
    routes = {(r["worker"], r["mode"], r["kind"]): r for r in report["routes"]}
    decode = routes[("target", "decode", "sliding")]
    assert (decode["kernel"], decode["page_table"], decode["sglang"]) == ("paged_attention_ragged", "full", "RAISES")
    assert routes[("target", "prefill", "sliding")]["page_table"] == "full"  # no SWA pool, so no SWA page table
    raises = [f for f in report["findings"] if f["severity"] == "raises" and f["title"].startswith("SGLang's guard")]
    assert len(raises) == 1 and "target decode" in raises[0]["where"]
    # no unified_attention either at prefill: CK batch prefill, which refuses Gemma-4's 512-wide full layers
    ck = [f for f in report["findings"] if f["title"] == "aiter's CK prefill refuses this head dimension"]
    assert [f["where"] for f in ck] == (["target prefill, target extend (aiter)"] if name == "gemma4-31b" else [])
    assert "_reject_paged_decode_sliding_window" in raises[0]["detail"] and "hybrid SWA memory is off" in \
        raises[0]["detail"]
    assert len(raises[0]["ways_out"]) == 3 and all("one key short" in w for w in raises[0]["ways_out"])
    assert not any("target decode" in f["where"] for f in report["findings"] if f["severity"] == "one-short")
    memory = next(f for f in report["findings"] if f["title"].startswith("one full-size pool"))
    assert memory["ways_out"][0].startswith("drop --disable-hybrid-swa-memory") and code == 1
    # The same launch with the hybrid pool: decode runs on unified_attention, one key short, nothing raises.
    _, hybrid = _run_json(capsys, ["--model", name] + ([f"--server-args={args}"] if args else []))
    decode = next(r for r in hybrid["routes"] if (r["mode"], r["kind"]) == ("decode", "sliding"))
    assert (decode["kernel"], decode["sglang"]) == ("unified_attention", "runs")
    assert not [f for f in hybrid["findings"] if f["severity"] == "raises"]


def test_a_way_out_is_offered_once_per_finding():
    # before PR #38756 the FROZEN_KV draft's paged decode is both windowless and untranslated: two causes, one fix
    args = "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP"
    report = audit(Launch.from_inputs(model="gemma4-31b", sglang_version=BEFORE_38756, server_args=args))
    assert report.findings and all(len(set(f.ways_out)) == len(f.ways_out) for f in report.findings)
    assert any(len(f.ways_out) > 1 for f in report.findings)
