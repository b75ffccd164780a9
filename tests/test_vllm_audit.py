"""``swa-kit audit --engine vllm``: the flags it reads and refuses, the rules it states, and the report.

The kit's answers are held against vLLM's own code in tests/test_differential_vllm.py (marker ``vllm``); these tests
pin the inputs (refused by name, never dropped) and the cases that differential does not reach.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swa_kit.errors import UsageError
from swa_kit.launch.vllm_args import parse_vllm_flags, vllm_env
from swa_kit.launch.vllm_plan import plan
from swa_kit.launch.vllm_routes import MODES, route
from swa_kit.measure.vllm_audit import audit_vllm
from swa_kit.models.configs import list_models, load_model


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swa_kit.cli", "audit", *args], capture_output=True, text=True,
                          check=False)


def test_vllm_serve_line_and_human_readable_numbers():
    args = parse_vllm_flags("vllm serve google/gemma-3-27b-it -tp 2 --max-model-len 32K --speculative-config "
                            "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}' --block-size=32")
    assert (args.model, args.tensor_parallel_size, args.max_model_len, args.block_size) == \
        ("google/gemma-3-27b-it", 2, 32768, 32)
    assert args.speculative_config == {"method": "eagle3", "num_speculative_tokens": 3}
    assert parse_vllm_flags("--max-model-len 32k").max_model_len == 32000


@pytest.mark.parametrize(("flags", "named"), [
    ("--enforce-eager --swap-space 4", "--enforce-eager, --swap-space"),
    ("-tp 0", "-tp '0'"), ("--gpu-memory-utilization 1.5", "(0, 1]"), ("--speculative-config {x}", "not JSON"),
    ("--kv-cache-dtype nvfp4", "nvfp4"), ("--attention-backend FLASH_ATTN", "FLASH_ATTN"), ("--block-size", "value"),
])
def test_bad_flags_are_refused_by_name(flags, named):
    with pytest.raises(UsageError, match=named.replace("(", r"\(").replace(")", r"\)")):
        parse_vllm_flags(flags)


def test_environment_is_read_as_vllm_reads_it():
    assert vllm_env({"VLLM_ROCM_USE_AITER": "TRUE"})["VLLM_ROCM_USE_AITER"] is True
    assert vllm_env({"VLLM_ROCM_USE_AITER": "yes"})["VLLM_ROCM_USE_AITER"] is False  # envs.py: "true" or "1" only
    with pytest.raises(UsageError, match="--attention-backend"):
        vllm_env({"VLLM_ATTENTION_BACKEND": "ROCM_AITER_FA"})
    with pytest.raises(UsageError, match="int"):
        vllm_env({"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "true"})
    with pytest.raises(UsageError, match="SGLANG_USE_AITER_UNIFIED_ATTN"):
        vllm_env({"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})


@pytest.mark.parametrize("backend", ["ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN"])
@pytest.mark.parametrize("window", [1, 2, 128, 1024])
def test_every_rocm_route_attends_the_window(backend, window):
    """Stored as (W - 1, 0), converted back at the call: W keys on every route, read through the conventions."""
    for mode in MODES:
        assert route(backend, mode, window, 128, False, False).keys == window
        assert route(backend, mode, None, 128, False, False).keys is None


def test_aiter_fa_decode_routing():
    """Single-token SWA decode on the paged kernel with W; sinks or several query tokens go to unified_attention."""
    assert route("ROCM_AITER_FA", "decode", 1024, 128, False, False).window_arg == 1024
    assert route("ROCM_AITER_FA", "decode", 1024, 128, False, False).kernel == "aiter paged_attention_v1"
    assert route("ROCM_AITER_FA", "verify", 1024, 128, False, False).window_arg == (1023, 0)
    assert route("ROCM_AITER_FA", "decode", 128, 64, True, False).kernel == "aiter unified_attention"
    assert route("ROCM_AITER_FA", "decode", 1024, 128, False, True).raises


def test_shuffled_kv_with_sliding_layers_is_a_raise_finding():
    report = audit_vllm(plan(load_model("gpt-oss-20b"), parse_vllm_flags("-tp 2"),
                             {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT": "1"}))
    assert report.plan.kinds[0].selection.backend == "ROCM_AITER_FA"  # ROCM_ATTN rejects the sinks
    assert report.findings[0].severity == "raises" and int(report.exit_code) == 1


def test_hybrid_manager_rules():
    llama = load_model("llama4-scout")
    assert not plan(llama, parse_vllm_flags(""), {}).kv.hybrid_disabled  # 0.34 keeps it on for chunked by default
    off = plan(llama, parse_vllm_flags(""), {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"})
    assert off.kv.hybrid_disabled and "chunked" in off.kv.hybrid_rule and len(off.kv.groups) == 1
    eagle = plan(llama, parse_vllm_flags("--speculative-config '{\"method\": \"eagle3\"}'"), {})
    assert eagle.kv.hybrid_disabled and "eagle3" in eagle.kv.hybrid_rule
    with pytest.raises(UsageError, match="explicitly enabled"):
        plan(llama, parse_vllm_flags("--no-disable-hybrid-kv-cache-manager --speculative-config "
                                     "'{\"method\": \"eagle\"}'"), {})


def test_manager_off_prices_sliding_layers_as_full():
    on = plan(load_model("gemma3-27b"), parse_vllm_flags(""), {})
    off = audit_vllm(plan(load_model("gemma3-27b"), parse_vllm_flags("--disable-hybrid-kv-cache-manager"), {}))
    assert {s.kind for s in on.kv.specs} == {"SlidingWindowSpec", "FullAttentionSpec"}
    assert {s.kind for s in off.plan.kv.specs} == {"FullAttentionSpec"}
    memory = [f for f in off.findings if f.severity == "memory"]
    assert len(memory) == 1 and "#39254" in memory[0].detail


def test_tensor_parallel_heads_split_or_replicate_evenly():
    gemma4 = load_model("gemma4-31b")  # 16 KV heads on sliding layers, 4 on full ones
    specs = plan(gemma4, parse_vllm_flags("-tp 8"), {}).kv.specs
    assert {gemma4.layer_types[i]: s.num_kv_heads for i, s in enumerate(specs)} == {"sliding": 2, "full": 1}
    with pytest.raises(UsageError, match="-tp 3"):
        plan(gemma4, parse_vllm_flags("-tp 3"), {})


def test_tokens_per_gpu_from_the_pool():
    launch = plan(load_model("gpt-oss-20b"), parse_vllm_flags("--gpu-memory-utilization 0.5"), {},
                  gpu_memory_gib=64, weights_gib=12)
    rows = {d.decision: d.value for d in launch.decisions}
    available = int(64 * (1 << 30) * 0.5) - 12 * (1 << 30)
    assert rows["blocks in the pool"] == available // launch.kv.bytes_per_block
    assert rows["tokens per GPU"] == rows["blocks in the pool"] * launch.block_size


def test_refusals_outside_the_model():
    with pytest.raises(UsageError, match="ROCm only"):
        plan(load_model("gemma3-27b"), parse_vllm_flags(""), {}, platform="cuda-sm90")
    with pytest.raises(UsageError, match="DiffKV"):
        plan(load_model("mimo-v2-flash"), parse_vllm_flags(""), {})
    with pytest.raises(UsageError, match="mm prefix|multimodal"):
        plan(load_model("gemma3-27b"), parse_vllm_flags("--attention-backend ROCM_ATTN"), {})


def test_cli_engine_vllm_json_and_exit_codes():
    done = _cli("--engine", "vllm", "--model", "gpt-oss-20b", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["engine"] == "vllm"
    assert {r["backend"] for r in report["routes"]} == {"ROCM_AITER_UNIFIED_ATTN"}
    bad = _cli("--engine", "vllm", "--model", "gpt-oss-20b", "--server-args", "--enforce-eager")
    assert bad.returncode == 2 and "--enforce-eager" in bad.stderr
    sglang_only = _cli("--engine", "vllm", "--model", "gpt-oss-20b", "--sglang-version", "before-38756")
    assert sglang_only.returncode == 2 and "--sglang-version" in sglang_only.stderr


def test_default_engine_is_sglang():
    done = _cli("--model", "gpt-oss-20b")
    assert "SGLang" in done.stdout.splitlines()[0] and "vLLM" not in done.stdout.splitlines()[0]


def test_cli_reads_a_launch_file_and_a_saved_config(tmp_path):
    """A file holding the `vllm serve` line, and a config.json as transformers saves it (not a bundled name)."""
    launch = tmp_path / "serve.sh"
    launch.write_text("VLLM_ROCM_USE_AITER=1 vllm serve openai/gpt-oss-20b \\\n"
                      "  --disable-hybrid-kv-cache-manager -tp 2\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(load_model("gpt-oss-20b").hf_config))
    done = _cli("--engine", "vllm", "--hf-config", str(config), "--server-args", str(launch), "--markdown")
    assert done.returncode == 1, done.stderr  # the memory finding of the disabled manager
    assert "**[memory]**" in done.stdout and "tensor_parallel_size=2" in done.stdout
    assert "ROCM_AITER_FA" in done.stdout  # the line's VLLM_ROCM_USE_AITER=1 is read, not dropped
    launch.write_text("VLLM_USE_V1=1 vllm serve openai/gpt-oss-20b")
    unknown = _cli("--engine", "vllm", "--hf-config", str(config), "--server-args", str(launch))
    assert unknown.returncode == 2 and "VLLM_USE_V1" in unknown.stderr


@pytest.mark.parametrize("name", list_models())
def test_every_bundled_model_is_audited_or_refused_by_name(name):
    done = _cli("--engine", "vllm", "--model", name, "--json")
    if name == "mimo-v2-flash":  # K and V head sizes differ: vLLM's model file picks a DiffKV backend itself
        assert done.returncode == 2 and "DiffKV" in done.stderr
        return
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"] in (0, 1)
    assert sum(g["layers"] for g in report["kv_cache_groups"]) == load_model(name).num_layers


def test_gemma4s_config_hook_names_triton_attn_on_rocm():
    """vLLM's Gemma4Config gives every layer TRITON_ATTN when head sizes differ and FA4 is missing (ROCm)."""
    gemma4 = load_model("gemma4-31b")
    chosen = plan(gemma4, parse_vllm_flags(""), {"VLLM_ROCM_USE_AITER": "1"})
    assert {k.kind.name: (k.selection.backend, k.selection.how) for k in chosen.kinds} == \
        {"sliding": ("TRITON_ATTN", "Gemma4Config: head sizes differ, no FA4 on ROCm"),
         "full": ("TRITON_ATTN", "Gemma4Config: head sizes differ, no FA4 on ROCm")}
    named = plan(gemma4, parse_vllm_flags("--attention-backend ROCM_AITER_UNIFIED_ATTN"), {})
    assert {k.selection.backend for k in named.kinds} == {"ROCM_AITER_UNIFIED_ATTN"}  # the flag wins over the hook
    gpt_oss = plan(load_model("gpt-oss-20b"), parse_vllm_flags(""), {})  # one head size: the priority order
    assert {k.selection.how for k in gpt_oss.kinds} == {"priority"}
