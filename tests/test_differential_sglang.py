"""The kit against SGLang 0.5.23's own code on the RAW launch (tests/differential.py), field by field.

Every launch's disagreements must be exactly those listed in tests/data/differential/expected.json, each with
its class: a new disagreement fails, and so does a listed one that now agrees (remove it from the list then).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sglang_support import require_sglang

require_sglang("sglang.srt.server_args", "sglang.srt.arg_groups.pipeline",
               "sglang.srt.model_executor.pool_configurator", "sglang.srt.models.registry")

sys.path.insert(0, str(Path(__file__).parent))
import differential  # noqa: E402

pytestmark = pytest.mark.sglang
EXPECTED = json.loads(differential.EXPECTED.read_text())
LAUNCHES = differential.launches()


def test_the_launch_set_is_wide_enough():
    assert len(LAUNCHES) >= 200
    launched = {model for model, _, _ in LAUNCHES}
    architectures = {differential.architecture(m) for m in launched}
    bundled = {differential.architecture(m) for m in launched if differential.bundled(m)}
    assert len(architectures) >= 12, sorted(architectures)
    assert len(architectures - bundled) >= 4, sorted(architectures - bundled)
    assert {args.split("--tp ")[1].split()[0] for _, _, args in LAUNCHES if "--tp " in args} == {"1", "2", "4", "8"}
    assert set(differential.PLATFORMS) == {p for _, p, _ in LAUNCHES}
    assert all(f"--attention-backend {b}" in " ".join(a for *_, a in LAUNCHES) for b in differential.BACKENDS if b)


def test_the_set_holds_a_hybrid_swa_draft_and_a_float32_checkpoint():
    """Without them the mutation check's draft-SWA-layers and float32-KV-bytes rules go unexercised."""
    def field(path: Path, name: str) -> Any:
        raw = json.loads(path.read_text())
        return raw.get("hf_config", raw).get(name)

    drafts = {w for *_, args in LAUNCHES for w in args.split() if w in differential.DRAFTS}
    assert "GptOssForCausalLM" in {field(differential.DRAFTS[w], "architectures")[0] for w in drafts}
    assert "float32" in {field(differential.CONFIGS[model], "dtype") for model, *_ in LAUNCHES}


def test_routes_guard_and_draft_pool_come_from_sglangs_own_backend():
    """The route and draft fields are answered by SGLang, not left empty: a hybrid aiter launch with a draft has
    per-layer prefill, extend, decode, verify and draft decode routes and a draft pool; Command R7B's sliding
    layers meet the guard."""
    from swa_kit.measure.sglang_routes import GUARD

    hybrid = next(c for c in LAUNCHES if c[0] == "gpt-oss-120b" and "--attention-backend aiter" in c[2]
                  and "DRAFT" in c[2] and "--disable-hybrid-swa-memory" not in c[2])
    refused, fields = differential.sglang_answer(*hybrid)
    assert refused is None and set(fields["routes"]) == {"prefill", "extend", "decode", "verify", "draft_decode"}
    assert all(len(fields["routes"][mode]) == 36 for mode in ("prefill", "extend", "decode", "verify"))
    assert fields["routes"]["draft_decode"] == {i: ["paged_attention_ragged", None, "full", None] for i in (0, 1)}
    assert fields["routes"]["decode"][0][:3] == ["unified_attention", [126, 0], "swa"]
    assert fields["draft_pool"] == {"architecture": "LlamaForCausalLMEagle", "hybrid_swa": False}
    guarded = next(c for c in LAUNCHES if c[0] == "command-r7b" and "--attention-backend aiter" in c[2])
    routes = differential.sglang_answer(*guarded)[1]["routes"]
    assert routes["decode"][0] == GUARD and routes["decode"][3][0] == "paged_attention_ragged"


def test_triton_routes_come_from_sglangs_own_triton_backend():
    """A hybrid Triton launch with a draft has per-layer routes from SGLang's TritonAttnBackend: the window layers
    read the SWA rail cut at the runner's window; Gemma-3n's read the runner's W - 1; Command R7B's window layers
    meet SGLang's own assertion (no window rail)."""
    from swa_kit.measure.sglang_triton_routes import NO_RAIL

    def triton(model: str, *words: str) -> dict:
        case = next(c for c in LAUNCHES if c[0] == model and "--attention-backend triton" in c[2]
                    and all(w in c[2] for w in words))
        refused, fields = differential.sglang_answer(*case)
        assert refused is None, refused
        return fields["routes"]

    routes = triton("gpt-oss-120b", "DRAFT --context-length")  # hybrid: its pool is on
    assert set(routes) == {"prefill", "extend", "decode", "verify", "draft_decode"}
    assert routes["decode"][0] == ["decode_attention_fwd", 127, "swa", 127]
    assert routes["verify"][0] == ["extend_attention_fwd", 127, "swa", 128]
    assert routes["decode"][1] == ["decode_attention_fwd", -1, "full", None]
    assert routes["draft_decode"] == {i: ["decode_attention_fwd", -1, "full", None] for i in (0, 1)}
    assert triton("gemma3n-e4b")["decode"][0] == ["decode_attention_fwd", 511, "full", 511]
    assert triton("command-r7b")["prefill"][0] == NO_RAIL


def test_every_listed_disagreement_names_a_launch_of_the_set():
    ids = {differential.launch_id(*case) for case in LAUNCHES}
    assert set(EXPECTED) <= ids


@pytest.mark.parametrize("case", LAUNCHES, ids=[differential.launch_id(*c) for c in LAUNCHES])
def test_the_kit_agrees_with_sglang_or_the_disagreement_is_listed(case):
    differ = differential.compare(*case)
    listed = EXPECTED.get(differential.launch_id(*case), {})
    unlisted = {f: v for f, v in differ.items() if f not in listed}
    now_agree = sorted(set(listed) - set(differ))
    assert not unlisted, f"new disagreements (kit, SGLang): {unlisted}"
    assert not now_agree, f"listed disagreements that now agree, remove them from expected.json: {now_agree}"
