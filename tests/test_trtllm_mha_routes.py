"""trtllm_mha's routes: window_left keys, and the page table its resolved pool's layers_mapping picks.

Oracles: the model config's own window (Hugging Face's keys, the query counted) for the keys; for the page table,
the kit's real pools built as SGLang wires them, asked the way ``_get_layer_page_table`` asks (the resolved pool's
``layers_mapping[layer_id]``), never the planner's layout rule. SGLang's own ``_resolve_swa_kv_pool`` of trtllm_mha
is held against the fixed resolver in tests/test_resolver_sglang.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from swa_kit.engine.resolver import RESOLVER_BEFORE, RESOLVERS, resolver_for
from swa_kit.engine.routing import plan
from swa_kit.engine.workers import build_workers
from swa_kit.launch.inputs import Launch
from swa_kit.measure.audit import audit
from swa_kit.models.configs import LayerKind, ModelLayout, load_model
from swa_kit.sglang_versions import REVERTIBLE_FIXES, SGLANG_VERSION, before

MODELS = ("gpt-oss-20b", "gemma4-31b", "mimo-v2-flash")
SPECS = ("eagle3", "frozen_kv_mtp")
#: a one-layer full-attention EAGLE3 head (GPT-OSS's attention shape): the full-attention draft these bugs need
HEAD_CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
               "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64}


def _eagle_head(target: ModelLayout) -> ModelLayout:
    """A one-layer full-attention draft shaped like ``target``'s full layer (the draft owns a full pool)."""
    full = next(k for k in target.kinds.values() if k.attention == "full")
    kind = LayerKind("full", "full", full.num_q_heads, full.num_kv_heads, full.head_dim, full.v_head_dim)
    return dataclasses.replace(target, name=f"{target.name}-eagle3-head", architecture="LlamaForCausalLMEagle3",
                               kinds={"full": kind}, layer_types=("full",), sglang_hybrid_swa_pool=False)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", ["prefill", "decode", "verify"])
def test_every_window_is_attended_whole(model, mode):
    layout = load_model(model)
    routes = plan(layout, mode, spec="eagle3" if mode == "verify" else None, backend="trtllm_mha", strict=False)
    for entry in routes.layers:
        assert entry.effective_keys == layout.window_keys(entry.layer), entry  # None on a full layer
        assert entry.window_arg == entry.sliding_window_size and entry.kit_verdict is None


def _expected_table(model: str, spec: str, resolver: str, layer_id: int) -> str:
    """``_get_layer_page_table`` on the real pools: the SWA table where the resolved pool maps the id to SWA."""
    resolved = RESOLVERS[resolver](build_workers(load_model(model), spec).runner("draft"))
    if resolved is None or not resolved.swa_layer_nums:
        return "full"
    return "swa" if resolved.layers_mapping.get(layer_id, (0, False))[1] else "full"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
@pytest.mark.parametrize("mode", ["draft_extend", "draft_decode"])
def test_the_draft_page_table_is_the_resolved_pools(model, spec, resolver, mode):
    draft = _eagle_head(load_model(model)) if spec == "eagle3" else None
    routes = plan(model, mode, spec=spec, backend="trtllm_mha", resolver=resolver, strict=False, draft_model=draft)
    for entry in routes.layers:
        assert entry.page_table == _expected_table(model, spec, resolver, entry.layer), entry
        # the kit judges the slots wrong exactly where the table does not describe the buffer read
        assert (entry.kit_verdict is not None) == (entry.page_table != entry.buffer), entry


def test_the_versions_pick_trtllm_mhas_resolver_and_leave_the_others():
    assert {pr for pr, (backends, _) in RESOLVER_BEFORE.items() if "trtllm_mha" in backends} == {25103, 26966, 27491}
    assert set(RESOLVER_BEFORE) <= set(REVERTIBLE_FIXES)
    assert [resolver_for("trtllm_mha", before(pr)) for pr in (25103, 26966, 27491)] == ["naive", "legacy", "naive"]
    assert resolver_for("trtllm_mha", SGLANG_VERSION) == resolver_for("trtllm_mha", before(38756)) == "fixed"
    assert resolver_for("aiter", before(26966)) == "fixed" and resolver_for("aiter", before(38756)) == "legacy"


@pytest.mark.parametrize("model, spec, version, phrase", [
    ("gpt-oss-120b", "EAGLE3", before(25103), "SWA-translated slot ids would index a full-size buffer"),
    ("gpt-oss-120b", "EAGLE3", before(27491), "SWA-translated slot ids would index a full-size buffer"),
    ("gemma4-31b", "FROZEN_KV_MTP", before(26966), "untranslated full-pool slot ids"),
])
def test_each_reverted_rule_breaks_only_its_draft(model, spec, version, phrase, tmp_path):
    args = f"--attention-backend trtllm_mha --speculative-algorithm {spec}"
    draft = None
    if spec == "EAGLE3":  # the full-attention EAGLE3 head the bugs are about
        (tmp_path / "config.json").write_text(json.dumps(HEAD_CONFIG))
        draft = tmp_path
    wrong = [f for f in audit(Launch.from_inputs(model=model, server_args=args, sglang_version=version,
                                                 platform="cuda-sm100", draft_hf_config=draft)).findings
             if f.severity == "wrong"]
    assert wrong and all(phrase in f.detail and "draft" in f.where for f in wrong)
    fixed = audit(Launch.from_inputs(model=model, server_args=args, platform="cuda-sm100", draft_hf_config=draft))
    assert not [f for f in fixed.findings if f.severity == "wrong"]


@pytest.mark.sglang
def test_sglang_passes_the_layers_window_as_window_left():
    from sglang_support import require_sglang

    backend, = require_sglang("sglang.srt.layers.attention.trtllm_mha_backend")
    source = Path(backend.__file__).read_text()
    assert "window_left=layer.sliding_window_size" in source
    assert "window_left=layer.sliding_window_size - 1" not in source and "window_left=layer.sliding_window_size + 1" \
        not in source
