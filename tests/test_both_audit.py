"""``swa-kit audit --engine both``: one launch mapped to both engines' flags, and the two audits side by side.

The mapping is held against each engine's own reading of the flags it gets (the kit's parsers here; vLLM's own
parser in tests/test_both_audit_vllm.py); the side by side against figures computed in the tests from the config
alone: the window each layer means, and the KV bytes one token costs in every layer.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from swa_kit.errors import UsageError
from swa_kit.launch.inputs import parse_server_args
from swa_kit.launch.two_engines import pair
from swa_kit.launch.vllm_args import parse_vllm_flags
from swa_kit.measure.both_audit import audit_both, render_json
from swa_kit.models.configs import ARCHITECTURES, list_models, load_hf_config, load_model

GEMMA4 = load_model("gemma4-31b")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", "--engine", "both", *args],
                          capture_output=True, text=True, check=False)


def _pair(sglang: str, vllm: str, model=GEMMA4):
    return pair(parse_server_args(sglang), parse_vllm_flags(vllm), model)


def test_a_flag_of_the_launch_reaches_the_other_engine_in_its_spelling():
    paired = _pair("--tp 2 --context-length 32768 --kv-cache-dtype fp8_e4m3 --disable-hybrid-swa-memory", "")
    vllm = parse_vllm_flags(shlex.join(paired.vllm_words))
    assert (vllm.tensor_parallel_size, vllm.max_model_len, vllm.kv_cache_dtype,
            vllm.disable_hybrid_kv_cache_manager) == (2, 32768, "fp8_e4m3", True)
    back = _pair("", "-tp 4 --max-model-len 8k --kv-cache-dtype fp8 --disable-hybrid-kv-cache-manager")
    sglang = parse_server_args(shlex.join(back.sglang_words))
    assert (sglang.tp_size, sglang.context_length, sglang.kv_cache_dtype, sglang.disable_hybrid_swa_memory) == \
        (4, 8000, "fp8_e4m3", True)
    assert {r.how for r in back.rows} == {"from vLLM's"}


def test_speculation_maps_to_each_engines_drafter():
    to_vllm = _pair("--speculative-algorithm FROZEN_KV_MTP --speculative-num-steps 3", "")
    config = parse_vllm_flags(shlex.join(to_vllm.vllm_words)).speculative_config
    assert config == {"method": "mtp", "num_speculative_tokens": 3}
    to_sglang = _pair("", "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'")
    args = parse_server_args(shlex.join(to_sglang.sglang_words))
    assert (args.speculative_algorithm, args.speculative_num_steps) == ("FROZEN_KV_MTP", 2)
    eagle = _pair("", "--speculative-config '{\"method\": \"eagle3\", \"model\": \"/d\"}'", load_model("gpt-oss-20b"))
    args = parse_server_args(shlex.join(eagle.sglang_words))
    assert (args.speculative_algorithm, args.speculative_draft_model_path) == ("EAGLE3", "/d")


def test_engine_only_flags_stay_with_their_engine():
    paired = _pair("--attention-backend aiter --page-size 16 --tp 2", "--attention-backend ROCM_AITER_FA -tp 2")
    assert paired.sglang_words == () and paired.vllm_words == ()
    assert sorted((r.meaning, r.how) for r in paired.rows) == [
        ("attention-backend", "SGLang's own"), ("attention-backend", "vLLM's own"), ("page-size", "SGLang's own"),
        ("tensor-parallel GPUs", "given on both")]


@pytest.mark.parametrize(("sglang", "vllm", "named"), [
    ("--tp 2", "-tp 4", "--tp-size 2 in --server-args and --tensor-parallel-size 4"),
    ("--mem-fraction-static 0.8", "", "--mem-fraction-static"),
    ("", "--gpu-memory-utilization 0.9", "--gpu-memory-utilization"),
    ("--pp-size 2", "", "--pp-size"),
    ("--speculative-algorithm UNO", "", "UNO"),
    ("--speculative-algorithm EAGLE --speculative-eagle-topk 4", "", "topk 4"),
    ("", "--speculative-config '{\"method\": \"suffix\"}'", "'suffix'"),
    ("--speculative-algorithm EAGLE3", "--speculative-config '{\"method\": \"eagle\"}'", "different drafters"),
    ("--speculative-algorithm FROZEN_KV_MTP --speculative-num-steps 3",
     "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 5}'", "num_speculative_tokens"),
    ("--kv-cache-dtype fp8_e4m3", "--kv-cache-dtype fp8_e5m2", "KV-cache dtype"),
])
def test_what_cannot_be_mapped_is_refused_by_name(sglang, vllm, named):
    with pytest.raises(UsageError, match=named.replace("(", r"\(")):
        _pair(sglang, vllm)


def test_each_engine_keeps_its_own_memory_budget_when_both_are_given():
    paired = _pair("--mem-fraction-static 0.8", "--gpu-memory-utilization 0.9")
    assert paired.sglang_words == paired.vllm_words == ()
    assert [(r.sglang, r.vllm) for r in paired.rows] == [("--mem-fraction-static 0.8", ""),
                                                          ("", "--gpu-memory-utilization 0.9")]
    assert {r.how for r in paired.rows} == {"each engine's own (the two count different budgets)"}


def _keys(report, kind, mode):
    return next(r for r in report["keys"] if r["kind"] == kind and r["mode"] == mode)


def test_gemma4_on_both_engines_side_by_side():
    """The window convention at each call: SGLang's aiter unified paths attend W - 1 keys, vLLM's W."""
    done = _cli("--model", "gemma4-31b", "--server-args", "--attention-backend aiter --tp 2", "--env",
                "VLLM_ROCM_USE_AITER=1", "--json")
    report = json.loads(done.stdout)
    window = GEMMA4.hf_config["text_config"]["sliding_window"]  # the model's window, from the config itself
    for mode in ("prefill", "decode"):
        row = _keys(report, "sliding", mode)
        assert (int(row["sglang_keys"]), int(row["vllm_keys"]), int(row["meant"])) == (window - 1, window, window)
    # no --attention-backend: vLLM's Gemma4Config hook names TRITON_ATTN (head sizes differ, no FA4 on ROCm)
    assert "(TRITON_ATTN)" in _keys(report, "sliding", "decode")["vllm_kernel"]
    assert "--tensor-parallel-size 2" in report["vllm"]["flags"]
    assert report["exit_code"] == done.returncode == 1  # SGLang's one-short finding
    assert any(f["engine"] == "SGLang" and f["severity"] == "one-short" for f in report["findings"])
    assert not any(f["engine"] == "vLLM" and f["severity"] != "info" for f in report["findings"])
    assert report["sglang"]["audit"]["findings"] and report["vllm"]["audit"]["routes"]


def _every_layer_bytes(model, tp: int) -> int:
    """One token in every layer, from the layer kinds: heads per GPU x (K + V head size) x 2 bytes."""
    total = 0
    for name in model.layer_types:
        kind = model.kinds[name]
        heads = max(1, kind.num_kv_heads // tp)
        total += heads * (kind.head_dim + kind.v_head_dim) * 2
    return total


@pytest.mark.parametrize("name", [n for n in list_models() if n != "mimo-v2-flash"])
@pytest.mark.parametrize("tp", [1, 2])
def test_both_engines_price_a_token_of_every_layer_alike(name, tp):
    report = json.loads(render_json(audit_both(model=name, server_args=f"--tp {tp}")))
    row = next(r for r in report["memory"] if r["quantity"] == "KV bytes per token, every layer keeping it")
    expected = _every_layer_bytes(load_model(name), tp)
    assert row["sglang"] == row["vllm"] == expected
    gpus = next(r for r in report["memory"] if r["quantity"] == "GPUs (tensor parallel)")
    assert gpus["sglang"] == gpus["vllm"] == tp


def test_an_engine_that_refuses_keeps_its_column():
    # vLLM's ROCM_ATTN takes no head size 512 (Gemma-4's full layers): vLLM refuses at start-up, SGLang runs.
    done = _cli("--model", "gemma4-31b", "--server-args", "--attention-backend aiter",
                "--vllm-args", "--attention-backend ROCM_ATTN", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"] == 2
    assert "head_size" in report["vllm"]["refused"] and report["vllm"]["audit"] is None
    assert report["sglang"]["refused"] is None and report["sglang"]["audit"]["routes"]
    assert "no vLLM plan for this launch" in done.stderr
    assert any(f["engine"] == "vLLM" and f["severity"] == "raises" for f in report["findings"])


def test_markdown_and_text_name_both_engines():
    md = _cli("--model", "gpt-oss-20b", "--markdown")
    assert md.stdout.startswith("# swa-kit audit --engine both") and "SGLang 0.5.23 and vLLM 0.34.0" in md.stdout
    assert "| kind |" in md.stdout and md.returncode in (0, 1)
    assert "swa-kit audit --engine both --model gpt-oss-20b --platform rocm-gfx942" in md.stdout  # for a bug report
    text = _cli("--model", "gpt-oss-20b")
    assert "== KV memory per GPU" in text.stdout and f"exit code {text.returncode}" in text.stdout


def test_draft_kv_on_each_engine():
    report = json.loads(_cli("--model", "gemma4-31b", "--server-args",
                             "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP", "--json").stdout)
    sglang = {r["what"]: r["value"] for r in report["draft"] if r["engine"] == "SGLang"}
    assert sglang["draft pool"].startswith("dummy") and "reads the target's pool" in sglang["draft pool"]
    vllm = {r["what"]: r["value"] for r in report["draft"] if r["engine"] == "vLLM"}
    assert vllm["drafter"] == "mtp"
    drafts = [r for r in report["keys"] if r["mode"].startswith("draft")]
    assert drafts and all(r["layers"] == 1 for r in drafts)  # FROZEN_KV MTP: one sliding, one full layer


@pytest.mark.parametrize(("args", "named"), [
    (("--model", "gpt-oss-20b", "--platform", "cuda-sm90"), "--platform cuda-sm90"),
    (("--model", "gpt-oss-20b", "--trace", "x.jsonl"), "--trace"),
    (("--model", "gpt-oss-20b", "--server-args", "server_args=ServerArgs(tp_size=1)"), "ServerArgs"),
    (("--model", "gpt-oss-20b", "--vllm-args", "--enforce-eager"), "--enforce-eager"),
    (("--model", "gpt-oss-20b", "--env", "SGLANG_NOT_A_VARIABLE=1"), "SGLANG_NOT_A_VARIABLE"),
])
def test_bad_input_is_one_line_naming_it(args, named):
    done = _cli(*args)
    assert done.returncode == 2 and named in done.stderr and not done.stdout


def test_vllm_args_belong_to_a_vllm_engine():
    done = subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", "--model", "gpt-oss-20b", "--vllm-args",
                           "-tp 2"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "--engine both" in done.stderr


def test_a_config_saved_by_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.Gemma3TextConfig(num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=4,
                                           head_dim=128, sliding_window=512, dtype="bfloat16")
    config.architectures = ["Gemma3ForCausalLM"]
    config.save_pretrained(tmp_path)
    done = _cli("--hf-config", str(tmp_path), "--json")
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"], done.stderr
    sliding = [r for r in report["keys"] if r["kind"] == "sliding" and r["mode"] == "decode"]
    assert sliding and sliding[0]["meant"] == "512"


def test_mtp_names_the_models_own_drafter_or_is_refused():
    with pytest.raises(UsageError, match="no algorithm of that meaning.*GptOssForCausalLM"):
        _pair("", "--speculative-config '{\"method\": \"mtp\"}'", load_model("gpt-oss-20b"))
    mimo = _pair("", "--speculative-config '{\"method\": \"mtp\"}'", load_model("mimo-v2-flash"))
    assert parse_server_args(shlex.join(mimo.sglang_words)).speculative_algorithm == "NEXTN"


#: Every config there of an architecture the kit serves as a target (drafter-only configs, a Gemma-4 assistant or a
#: DFlash draft, have none: vLLM reads them as the speculative model).
SAVED = sorted(p for p in (Path(__file__).parent / "data" / "differential").glob("*.json") if p.stem != "expected"
               and (json.loads(p.read_text()).get("architectures") or [""])[0] in ARCHITECTURES)


@pytest.mark.parametrize("config", SAVED, ids=[p.stem for p in SAVED])
def test_configs_saved_by_transformers_classes(config):
    """The differential's configs, each saved by transformers' own config class: audited on both engines, or the
    engine that has no plan says why in its column."""
    report = json.loads(render_json(audit_both(hf_config=config)))
    assert report["exit_code"] in (0, 1, 2)
    for engine in ("sglang", "vllm"):
        side = report[engine]
        assert (side["audit"] is None) == bool(side["refused"]), engine
    planned = {r["kind"] for r in report["keys"]}
    assert planned == set(load_hf_config(config).kinds), planned
    every = next(r for r in report["memory"] if r["quantity"] == "KV bytes per token, every layer keeping it")
    if report["sglang"]["audit"] and report["vllm"]["audit"]:  # a float32 checkpoint serves 16-bit KV on both
        assert every["sglang"] == every["vllm"]


def test_mimo_has_no_vllm_plan_and_says_why():
    done = _cli("--model", "mimo-v2-flash", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 2 and "DiffKV" in report["vllm"]["refused"] and report["sglang"]["audit"] is not None


def test_the_draft_reads_the_same_target_layers_on_both_engines():
    """SGLang's FROZEN_KV MTP borrows the target's last sliding and last full layer through its pools; vLLM's
    Gemma-4 assistant aliases each drafter layer to the target's last layer of its kind. By hand from the layer
    types transformers' config class gives the target."""
    transformers = pytest.importorskip("transformers")
    types = transformers.Gemma4TextConfig(**GEMMA4.hf_config["text_config"]).layer_types
    last = {kind: max(i for i, t in enumerate(types) if t == f"{kind}_attention") for kind in ("sliding", "full")}
    drafter = Path(__file__).parent / "data" / "differential" / "draft-gemma4-assistant-4l.json"
    report = json.loads(render_json(audit_both(model="gemma4-31b", draft_hf_config=drafter,
                                               server_args="--attention-backend aiter --speculative-algorithm "
                                                           "FROZEN_KV_MTP")))
    rows = {r["what"]: r["value"] for r in report["draft"]}
    assert rows["target layers the draft reads"] == (f"sliding layer {last['sliding']} (swa pool), full layer "
                                                     f"{last['full']} (full pool)")
    assistant = json.loads(drafter.read_text())["text_config"]["layer_types"]
    for index, kind in enumerate(assistant):
        value = rows[f"drafter layer {index} ({kind.removesuffix('_attention')})"]
        assert value.startswith(f"reads target layer {last[kind.removesuffix('_attention')]}'s KV")
    launch = {r["meaning"]: r for r in report["launch"]}
    assert launch["drafter config"]["how"] == "vLLM's own"  # SGLang's FROZEN_KV MTP takes the target's layers


def test_vllms_explicit_hybrid_manager_is_sglangs_default():
    paired = _pair("", "--no-disable-hybrid-kv-cache-manager")
    assert paired.sglang_words == () and paired.rows[0].sglang == "(SGLang's default)"
    with pytest.raises(UsageError, match="sliding layers sized as full"):
        _pair("--disable-hybrid-swa-memory", "--no-disable-hybrid-kv-cache-manager")


def test_one_drafter_two_token_counts_is_refused():
    with pytest.raises(UsageError, match="num_speculative_tokens"):
        _pair("--speculative-algorithm FROZEN_KV_MTP --speculative-num-steps 3",
              "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 5}'")
    agreed = _pair("--speculative-algorithm FROZEN_KV_MTP --speculative-num-steps 3",
                   "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'")
    assert [r.how for r in agreed.rows] == ["given on both"]


def test_known_bugs_under_each_engines_findings():
    report = json.loads(render_json(audit_both(model="gemma4-31b", server_args="--disable-hybrid-swa-memory")))
    vllm_memory = next(f for f in report["findings"] if f["engine"] == "vLLM" and f["severity"] == "memory")
    assert any("39254" in line for line in vllm_memory["known_bugs"])  # the hybrid manager off: vLLM #39254


@pytest.mark.parametrize("keys", [2, 5, 9])
def test_aiters_kernel_measured_with_each_engines_argument(keys):
    """aiter's own Triton unified_attention, run with each engine's decode argument: SGLang's attends one key short,
    vLLM's the whole window (counted from the one-hot values the kernel weighs, not read from the argument)."""
    from swa_kit.attention.paths import get_path
    from swa_kit.measure.probe import probe_engines

    available, why = get_path("aiter_triton_unified").available()
    if not available:
        pytest.skip(why)
    sglang, vllm = probe_engines(keys)
    assert (sglang.site, sglang.attended_keys, sglang.ok) == ("SGLang", keys - 1, False)
    assert (vllm.site, vllm.attended_keys, vllm.ok) == ("vLLM", keys, True)
    assert (sglang.window_arg, vllm.window_arg) == ((keys - 2, 0), (keys - 1, 0))


@pytest.mark.parametrize("seed", range(12))
def test_a_launch_mapped_there_and_back_is_the_same_launch(seed):
    """Random launches of the mapped flags, given in SGLang's words: written in vLLM's, then read back into SGLang's,
    every flag of the launch comes back as given (and the speculative method the same way)."""
    import random

    rng = random.Random(seed)
    choices = {"--tp-size": ["1", "2", "4", "8"], "--context-length": ["4096", "32768", "131072"],
               "--kv-cache-dtype": ["fp8_e4m3", "fp8_e5m2", "bfloat16"],
               "--speculative-algorithm": ["EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "FROZEN_KV_MTP"]}
    words = [w for flag, values in choices.items() if rng.random() < 0.7 for w in (flag, rng.choice(values))]
    words += ["--disable-hybrid-swa-memory"] if rng.random() < 0.5 else []
    given = parse_server_args(shlex.join(words))
    there = _pair(shlex.join(words), "")
    back = _pair("", shlex.join(there.vllm_words))
    returned = parse_server_args(shlex.join(back.sglang_words))
    for field in ("tp_size", "context_length", "kv_cache_dtype", "disable_hybrid_swa_memory", "speculative_algorithm"):
        assert getattr(returned, field) == getattr(given, field), (field, words, there.vllm_words)
