"""``--engine both``'s mapping against vLLM's own parser: SGLang's flags, written in vLLM's spelling by the kit, mean
the same launch when vLLM 0.34.0's ``EngineArgs`` parser reads them (marker ``vllm``).

The SGLang side's meaning is read by the kit's SGLang parser (held against SGLang's own elsewhere); here vLLM's parser
is the oracle for the words the kit writes, so a misspelt flag or a JSON vLLM would not take fails.
"""

from __future__ import annotations

import inspect
import re
import shlex

import pytest

from vllm_support import require_vllm

pytestmark = pytest.mark.vllm

arg_utils, argparse_utils, cache_config = require_vllm("vllm.engine.arg_utils", "vllm.utils.argparse_utils",
                                                       "vllm.config.cache")

from swa_kit.launch.inputs import parse_server_args  # noqa: E402
from swa_kit.launch.two_engines import pair  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402

PARSER = argparse_utils.FlexibleArgumentParser()
arg_utils.EngineArgs.add_cli_args(PARSER)


@pytest.mark.parametrize(("sglang", "expected"), [
    ("--tp 2", {"tensor_parallel_size": 2}),
    ("--tensor-parallel-size 4 --context-length 32768", {"tensor_parallel_size": 4, "max_model_len": 32768}),
    ("--kv-cache-dtype fp8_e4m3", {"kv_cache_dtype": "fp8_e4m3"}),
    ("--kv-cache-dtype fp8_e5m2", {"kv_cache_dtype": "fp8_e5m2"}),
    ("--kv-cache-dtype bf16", {"kv_cache_dtype": "bfloat16"}),
    ("--disable-hybrid-swa-memory", {"disable_hybrid_kv_cache_manager": True}),
    ("--speculative-algorithm FROZEN_KV_MTP --speculative-num-steps 3",
     {"speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}),
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path /drafts/eagle3",
     {"speculative_config": {"method": "eagle3", "model": "/drafts/eagle3"}}),
    ("--speculative-algorithm NGRAM", {"speculative_config": {"method": "ngram"}}),
])
def test_vllm_reads_the_mapped_flags_as_the_same_launch(sglang, expected):
    paired = pair(parse_server_args(sglang), parse_vllm_flags(""), load_model("gemma4-31b"))
    parsed = vars(PARSER.parse_args(list(paired.vllm_words)))
    assert {k: parsed[k] for k in expected} == expected
    # and the kit's vLLM parser, which the vLLM audit runs on, reads the same words alike
    kit = parse_vllm_flags(shlex.join(paired.vllm_words))
    assert {k: getattr(kit, k) for k in expected} == expected


def test_vllms_fp8_is_sglangs_e4m3():
    """vLLM's CacheDType ``fp8`` is e4m3 on ROCm: the kit writes SGLang's fp8_e4m3 for it."""
    paired = pair(parse_server_args(""), parse_vllm_flags("--kv-cache-dtype fp8"), load_model("gemma4-31b"))
    assert "fp8_e4m3" in paired.sglang_words
    assert re.search(r"ROCm \(AMD GPU\) supports\s+fp8 \(=fp8_e4m3\)", inspect.getsource(cache_config.CacheConfig))


@pytest.mark.parametrize(("name", "sglang"), [
    ("gemma4-31b", "--attention-backend aiter --tp 2"), ("gemma4-31b", "--disable-hybrid-swa-memory"),
    ("gpt-oss-20b", "--tp 2"), ("gpt-oss-120b", "--kv-cache-dtype fp8_e4m3"), ("gemma3-27b", "--context-length 8192"),
    ("llama4-scout", "--tp 4"),
])
def test_the_vllm_columns_memory_is_vllms_own(name, sglang):
    """The two-engine report's vLLM memory figures for a launch given in SGLang's words, against vLLM's own specs,
    groups and bytes per block for the flags the kit wrote (the vLLM differential's helpers)."""
    import test_differential_vllm as differential  # vLLM's own KV-cache planning, driven as the differential does

    from swa_kit.measure.both_audit import audit_both, vllm_memory

    report = audit_both(model=name, server_args=sglang)
    assert report.vllm is not None, report.vllm_refusal
    model = load_model(name)
    answer = differential._vllm_answer(model, report.vllm_flags, {}, report.vllm.plan.kv.hybrid_disabled)
    layers, groups = answer["layers"], answer["groups"]
    full = next((g for g in groups if layers[g[0]][0] == "FullAttentionSpec"), groups[0])
    ours = vllm_memory(report.vllm.plan)
    assert ours["per_context_token"] == answer["bytes_per_block"] / layers[full[0]][1]
    assert ours["every_layer"] == sum(page // block for _, block, page, _ in layers)


def test_a_float32_checkpoint_is_served_in_rocms_first_dtype(monkeypatch):
    """vLLM's ``_resolve_auto_dtype`` on the ROCm platform's dtypes (RocmPlatform keeps the base class's list; its
    module asks the GPU at import, so its source is read as text): the kit's vLLM plan serves the same dtype."""
    import pathlib
    from types import SimpleNamespace

    import torch
    import vllm.config.model as model_config
    from vllm.platforms import interface

    from swa_kit.launch.vllm_plan import served_dtype
    from swa_kit.models.configs import load_hf_config

    rocm_source = (pathlib.Path(interface.__file__).parent / "rocm.py").read_text()
    assert "def supported_dtypes" not in rocm_source
    rocm = SimpleNamespace(supported_dtypes=interface.Platform.supported_dtypes.fget(None))
    monkeypatch.setattr(model_config, "current_platform", rocm)
    resolved = model_config._resolve_auto_dtype("mistral", torch.float32, is_pooling_model=False)
    fp32 = load_hf_config(pathlib.Path(__file__).parent / "data" / "differential" / "mistral-fp32-7b-v0.1.json")
    assert fp32.dtype == "float32" and served_dtype(fp32) == str(resolved).removeprefix("torch.")
