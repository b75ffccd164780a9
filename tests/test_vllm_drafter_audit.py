"""The vLLM audit's drafter placement and admission: findings at the versions that undo a fix, bad inputs refused.

Where the layers land and what the managers charge is held against vLLM's own code in tests/test_vllm_drafter.py
(marker ``vllm``); these tests pin the findings, the refusals and the arithmetic of the cap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from swa_kit.errors import ModelConfigError, UsageError
from swa_kit.launch.vllm_admission import admission_cap, cdiv, default_max_num_batched_tokens
from swa_kit.launch.vllm_args import parse_vllm_flags
from swa_kit.launch.vllm_drafter import read_drafter
from swa_kit.launch.vllm_plan import plan
from swa_kit.measure.vllm_audit import audit_vllm, to_json
from swa_kit.measure.vllm_drafter_audit import MISROUTED, NEVER_ADMITTED
from swa_kit.models.configs import load_model

DATA = Path(__file__).parent / "data" / "differential"
DFLASH = "--speculative-config '{\"method\": \"dflash\", \"model\": \"d\", \"num_speculative_tokens\": 7}'"
EAGLE3 = "--speculative-config '{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'"
MTP = "--speculative-config '{\"method\": \"mtp\", \"model\": \"d\", \"num_speculative_tokens\": 1}'"
#: A pool that holds one 131072-token request with the drafter's sliding group sized for its window only.
SMALL_POOL = "--max-model-len 131072 --gpu-memory-utilization 0.02"


def _drafter(name: str):
    return read_drafter(json.loads((DATA / f"{name}.json").read_text()), name)


def _audit(target: str, flags: str, drafter: str | None, version: str = "0.34.0", **extra):
    p = plan(load_model(target), parse_vllm_flags(flags), {}, vllm_version=version,
             drafter=None if drafter is None else _drafter(drafter), **extra)
    return audit_vllm(p)


def _titles(report) -> list[str]:
    return [f"[{f.severity}] {f.title}" for f in report.findings]


def test_dflash_drafter_spans_two_groups_and_writes_each_through_its_own():
    report = _audit("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l")
    layers = report.plan.drafter.layers
    # gpt-oss-20b's 12 sliding + 12 full layers and the drafter's sliding + full: two groups of 13.
    assert [(layer.attention, layer.group, layer.writes_group) for layer in layers] == \
        [("sliding", 0, 0), ("full", 1, 1)]
    assert report.plan.drafter.groups_shared_with_target == (0, 1)
    assert not any(MISROUTED in t for t in _titles(report))


def test_before_50169_dflash_writes_the_full_layer_through_the_target_sliding_group():
    report = _audit("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l", "before-50169")
    wrong = [f for f in report.findings if MISROUTED in f.title]
    assert len(wrong) == 1 and wrong[0].severity == "wrong" and "drafter layer 1" in wrong[0].title
    assert "group 0's block table (the target's group's)" in wrong[0].detail and "#50169" in wrong[0].detail
    assert int(report.exit_code) == 1


def test_before_50169_leaves_eagle3_alone_its_attention_writes_per_layer():
    report = _audit("gpt-oss-20b", EAGLE3, "draft-gpt-oss-2l", "before-50169")
    assert all(not layer.misrouted for layer in report.plan.drafter.layers)


def test_a_dflash_config_is_read_as_vllm_resolves_it():
    raw = json.loads((DATA / "draft-dflash-3l.json").read_text())
    report = audit_vllm(plan(load_model("gpt-oss-20b"), parse_vllm_flags(DFLASH), {},
                             drafter=read_drafter(raw, "dflash.json")))
    assert [(layer.attention, layer.window) for layer in report.plan.drafter.layers] == \
        [("sliding", 128), ("sliding", 128), ("full", None)]
    assert not any(MISROUTED in t for t in _titles(report))


def test_lagunas_dflash_class_writes_through_one_group_even_at_0_34():
    """laguna_dflash.py declares no get_draft_kv_cache_layer_names: vLLM 0.34.0 still has #50169's failure."""
    raw = {**json.loads((DATA / "draft-dflash-3l.json").read_text()), "architectures": ["DFlashLagunaForCausalLM"]}
    report = audit_vllm(plan(load_model("gpt-oss-20b"), parse_vllm_flags(DFLASH), {},
                             drafter=read_drafter(raw, "laguna.json")))
    assert [layer.index for layer in report.plan.drafter.layers if layer.misrouted] == [2]
    assert any(MISROUTED in t for t in _titles(report)) and int(report.exit_code) == 1


def test_a_drafter_in_one_group_is_never_misrouted():
    report = _audit("gpt-oss-20b", DFLASH, "draft-llama-2l", "before-50169")  # two full layers, head size 128
    assert len(report.plan.drafter.groups) == 1
    assert not any(MISROUTED in t for t in _titles(report))


def test_gemma4_assistant_reads_the_last_owner_layer_of_its_type():
    target = load_model("gemma4-31b")
    report = _audit("gemma4-31b", MTP, "draft-gemma4-assistant-4l")
    last = {kind: max(i for i, t in enumerate(target.layer_types) if target.kinds[t].attention == kind)
            for kind in ("sliding", "full")}
    layers = report.plan.drafter.layers
    assert [(layer.attention, layer.shares_kv_with) for layer in layers] == \
        [("sliding", last["sliding"])] * 3 + [("full", last["full"])]
    group_of = {i: g for g, group in enumerate(report.plan.kv.groups) for i in group.layers}
    assert all(layer.group == group_of[layer.shares_kv_with] and layer.writes_group is None for layer in layers)
    # Aliases own no KV: the pool is the target's alone.
    alone = plan(target, parse_vllm_flags(MTP), {})
    assert report.plan.kv.groups == alone.kv.groups and report.plan.num_blocks == alone.num_blocks
    assert any("own no KV" in t for t in _titles(report))


def test_the_sliding_cap_is_the_window_plus_in_flight_tokens():
    report = _audit("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l")
    gate = report.plan.admission
    sliding = report.plan.kv.groups[0]
    # vllm serve on a 192 GiB MI300X: 16384 batched tokens, two concurrent batches (async scheduling on).
    assert (default_max_num_batched_tokens(192), gate.max_in_flight_tokens) == (16384, 2 * 16384)
    assert admission_cap(sliding, gate.max_in_flight_tokens, gate.max_model_len) == cdiv(128 - 1 + 32768, 64) + 1
    assert admission_cap(report.plan.kv.groups[1], gate.max_in_flight_tokens, gate.max_model_len) is None
    # Brute force: the longest prompt is the last length whose charge fits the pool.
    pool = gate.pool_blocks
    fits = [n for n in range(1, gate.max_model_len + 1, 997) if gate.blocks(n) <= pool]
    assert max(fits) <= gate.largest_prompt and gate.blocks(gate.largest_prompt) <= pool


def test_before_55800_the_engine_starts_and_a_long_prompt_waits_forever():
    now = _audit("gpt-oss-20b", f"{DFLASH} {SMALL_POOL}", "draft-gpt-oss-2l")
    before = _audit("gpt-oss-20b", f"{DFLASH} {SMALL_POOL}", "draft-gpt-oss-2l", "before-55800")
    # 0.34.0: start-up charges what admission charges, so vLLM refuses to start rather than wedge.
    assert not now.plan.admission.starts and now.plan.admission.startup_blocks == now.plan.admission.blocks(131072)
    assert not any(NEVER_ADMITTED in t for t in _titles(now))
    gate = before.plan.admission
    assert gate.starts and gate.largest_prompt < 131072
    [stuck] = [f for f in before.findings if NEVER_ADMITTED in f.title]
    assert stuck.severity == "raises" and f"{gate.largest_prompt + 1} to 131072 tokens" in stuck.title
    assert gate.blocks(gate.largest_prompt + 1) > gate.pool_blocks >= gate.blocks(gate.largest_prompt)
    assert "#55800" in stuck.detail and f"--max-model-len {gate.largest_prompt}" in stuck.ways_out


def test_a_launch_whose_start_up_fits_admits_max_model_len():
    """With room for one max_model_len request under the drafter's full charge, no version wedges."""
    for version in ("0.34.0", "before-55800"):
        report = _audit("gpt-oss-20b", f"{DFLASH} --max-model-len 131072 --gpu-memory-utilization 0.03",
                        "draft-gpt-oss-2l", version)
        assert report.plan.admission.largest_prompt == 131072
        assert not any(NEVER_ADMITTED in t for t in _titles(report))


def test_before_55800_changes_nothing_without_a_drafter():
    now, before = (_audit("gemma3-27b", SMALL_POOL, None, v) for v in ("0.34.0", "before-55800"))
    assert now.plan.admission.startup_blocks == before.plan.admission.startup_blocks


def test_prompt_tokens_and_json_rows():
    report = _audit("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l", prompt_tokens=100)
    rows = to_json(report)
    assert [r["blocks"] for r in rows["admission"]] == [2, 2]  # cdiv(100, 64) in each group
    assert [r["group"] for r in rows["drafter_layers"]] == [0, 1]


@pytest.mark.parametrize(("target", "flags", "drafter", "extra", "named"), [
    ("gpt-oss-20b", "", "draft-gpt-oss-2l", {}, "no drafter"),
    ("gpt-oss-20b", "--speculative-config '{\"method\": \"ngram\"}'", "draft-gpt-oss-2l", {}, "no drafter model"),
    ("gpt-oss-20b", MTP, "draft-gemma4-assistant-4l", {}, "Gemma-4 model only"),
    ("gemma4-31b", EAGLE3, "draft-gemma4-assistant-4l", {}, "method mtp"),
    ("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l", {"prompt_tokens": 10**6},
     "--prompt-tokens 1000000: vLLM refuses a prompt over"),
    ("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l", {"prompt_tokens": 0}, "--prompt-tokens 0: a prompt holds at least one"),
    ("gpt-oss-20b", "--speculative-config '{\"method\": \"dflash\", \"attention_backend\": \"FLASH_ATTN\"}'",
     "draft-gpt-oss-2l", {}, "attention_backend 'FLASH_ATTN'"),
    ("gpt-oss-20b", "--speculative-config '{\"method\": \"dflash\", \"kv_cache_dtype\": \"fp8\"}'",
     "draft-gpt-oss-2l", {}, "kv_cache_dtype"),
])
def test_bad_drafter_inputs_are_refused_by_name(target, flags, drafter, extra, named):
    with pytest.raises(UsageError, match=named):
        _audit(target, flags, drafter, **extra)


def test_bad_drafter_configs_are_refused_by_name():
    with pytest.raises(UsageError, match="text_config"):
        read_drafter({"model_type": "gemma4_assistant"}, "assistant.json")
    with pytest.raises(ModelConfigError, match="unknown architecture"):
        read_drafter({"architectures": ["NoSuchDrafter"]}, "d.json")
    dflash = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, "layer_types": ["full_attention"]}
    with pytest.raises(UsageError, match="num_hidden_layers 2"):
        read_drafter(dflash, "d.json")
    with pytest.raises(UsageError, match="needs a window"):
        read_drafter({**dflash, "num_hidden_layers": 1, "layer_types": ["sliding_attention"]}, "d.json")
    raw = json.loads((DATA / "draft-gemma4-assistant-4l.json").read_text())
    chunked = {**raw, "text_config": {**raw["text_config"], "layer_types": ["full_attention"] * 4}}
    target = replace(load_model("gemma4-31b"), layer_types=("sliding",) * 60)  # no full layer owning KV
    with pytest.raises(UsageError, match="no full layer"):
        plan(target, parse_vllm_flags(MTP), {}, drafter=read_drafter(chunked, "a.json"))


def test_a_drafter_without_its_config_is_named_not_guessed():
    report = _audit("gpt-oss-20b", EAGLE3, None)
    assert report.plan.drafter is None
    assert "[info] drafter layers not placed" in _titles(report)


def test_cli_reads_the_drafter_config_and_prompt_length():
    out = subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", "--engine", "vllm", "--model", "gpt-oss-20b",
                          "--server-args", DFLASH, "--draft-hf-config", str(DATA / "draft-gpt-oss-2l.json"),
                          "--prompt-tokens", "4096", "--json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [r["blocks"] for r in report["admission"]] == [64, 64]
    assert [r["attention"] for r in report["drafter_layers"]] == ["sliding", "full"]
    bad = subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", "--model", "gpt-oss-20b", "--prompt-tokens",
                          "5"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--prompt-tokens" in bad.stderr and "--engine vllm" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", "--engine", "vllm", "--model",
                              "gpt-oss-20b", "--server-args", DFLASH, "--draft-hf-config", "/no/such/config.json"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "/no/such/config.json" in missing.stderr


def test_the_guides_admission_figures_are_the_kits():
    """docs/debugging.md quotes the sliding group's cap for its DFlash example: the plan's own numbers."""
    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "debugging.md").read_text().split())
    report = _audit("gpt-oss-20b", DFLASH, "draft-gpt-oss-2l", prompt_tokens=32768)
    gate = report.plan.admission
    (sliding,) = [c for c in gate.charges(32768) if c.cap is not None]
    assert (f"{sliding.cap} blocks of {sliding.block_size} tokens here, for {gate.max_in_flight_tokens:,} in-flight "
            "tokens") in guide
