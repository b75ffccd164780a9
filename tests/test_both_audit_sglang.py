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
