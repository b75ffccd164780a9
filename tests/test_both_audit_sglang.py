"""``--engine both``'s mapping against SGLang's own parser: vLLM's flags, written in SGLang's spelling by the kit, mean
the same launch when SGLang 0.5.23's ``prepare_server_args`` reads them (marker ``sglang``).

SGLang's parser is the oracle for the words the kit writes: a misspelt flag or a value SGLang would not take fails.
"""

from __future__ import annotations

import json

import pytest

from sglang_support import require_sglang

pytestmark = pytest.mark.sglang

(server_args,) = require_sglang("sglang.srt.server_args")

from swa_kit.launch.inputs import parse_server_args  # noqa: E402
from swa_kit.launch.two_engines import pair  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402


@pytest.mark.parametrize(("vllm", "expected"), [
    ("-tp 2 --max-model-len 8k", {"tp_size": 2, "context_length": 8000}),
    ("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8_e4m3"}),
    ("--kv-cache-dtype bfloat16", {"kv_cache_dtype": "bfloat16"}),
    ("--disable-hybrid-kv-cache-manager", {"disable_hybrid_swa_memory": True}),
    ("--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'",
     {"speculative_algorithm": "FROZEN_KV_MTP", "speculative_num_steps": 2}),
])
def test_sglang_reads_the_mapped_flags_as_the_same_launch(vllm, expected, tmp_path):
    model = load_model("gemma4-31b")
    (tmp_path / "config.json").write_text(json.dumps(model.hf_config))
    paired = pair(parse_server_args(""), parse_vllm_flags(vllm), model)
    parsed = server_args.prepare_server_args(["--model-path", str(tmp_path), "--skip-tokenizer-init", "--device",
                                              "cpu", *paired.sglang_words])
    assert {k: getattr(parsed, k) for k in expected} == expected


@pytest.mark.parametrize(("name", "sglang", "vllm"), [
    ("gemma4-31b", "--attention-backend aiter", "-tp 2"),
    ("gpt-oss-20b", "", "--kv-cache-dtype fp8 --max-model-len 32k"),
])
def test_the_sglang_columns_pools_are_sglangs_own(name, sglang, vllm, tmp_path):
    """The two-engine report's SGLang pool sizes, for a launch partly given in vLLM's words, against SGLang's own
    parser, resolution and pool configurator on the flags the kit wrote (swa_kit.launch.sglang_oracle)."""
    import shlex

    from swa_kit.launch.inputs import PLATFORMS
    from swa_kit.launch.sglang_oracle import ask_sglang
    from swa_kit.measure.both_audit import audit_both, sglang_memory

    model = load_model(name)
    (tmp_path / "config.json").write_text(json.dumps(model.hf_config))
    report = audit_both(model=name, server_args=sglang, vllm_args=vllm)
    assert report.sglang is not None, report.sglang_refusal
    answer = ask_sglang(["--model-path", str(tmp_path), *shlex.split(report.sglang_flags)], "rocm-gfx942",
                        PLATFORMS["rocm-gfx942"][1])
    assert answer.refused is None, answer.refused
    ours = sglang_memory(report.sglang)
    assert (ours["tokens"], report.sglang.decisions.pools.swa_tokens) == \
        (answer.fields["full_tokens"], answer.fields["swa_tokens"])
    assert ours["heads"] == {kind: answer.fields["kv_heads_per_gpu"]["swa" if kind != "full" else "full"]
                             for kind in model.kinds}
