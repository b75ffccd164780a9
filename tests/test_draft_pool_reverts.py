"""The draft's own pool before SGLang PRs #29622 and #17630, against arithmetic from the configs alone.

The oracle never calls the kit's pool sizing: it sums KV bytes per token from each layer's heads and head dims
(bf16: 2 bytes per element), solves the hybrid configurator's equation and checks the kit's numbers against it.
"""

from __future__ import annotations

import json

import pytest

from swa_kit.errors import UsageError
from swa_kit.launch.inputs import Launch, Platform, parse_server_args
from swa_kit.measure import bugs
from swa_kit.measure.audit import audit
from swa_kit.models.configs import load_model, parse_hf_config
from swa_kit.sglang_versions import REVERTIBLE_FIXES, SGLANG_VERSION, before, has_fix, reverted_fix

HEAD = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "torch_dtype": "bfloat16"}
EAGLE3 = "--speculative-algorithm EAGLE3 --speculative-draft-model-path head"


def _launch(version: str, args: str = EAGLE3, model: str = "gpt-oss-120b", gib: float = 80.0) -> Launch:
    return Launch(model=load_model(model), server_args=parse_server_args(args),
                  platform=Platform.parse("cuda-sm90", gib), sglang_version=version,
                  draft_model=parse_hf_config(dict(HEAD), where="head"))


def _per_layer_bytes(model: str, sliding: bool) -> int:
    """One token of one layer in bf16, from the bundled config's raw layer list."""
    layout = load_model(model)
    kind = next(k for k in layout.kinds.values() if k.uses_swa_pool == sliding)
    return kind.num_kv_heads * (kind.head_dim + kind.v_head_dim) * 2


def _titles(launch: Launch) -> list[str]:
    return [f.title for f in audit(launch).findings]


def test_the_versions_name_each_fix_once():
    for pr in (29622, 17630):
        assert pr in REVERTIBLE_FIXES and reverted_fix(before(pr)) == pr
        assert not has_fix(before(pr), pr) and has_fix(SGLANG_VERSION, pr) and has_fix(before(38756), pr)
    assert reverted_fix(SGLANG_VERSION) is None
    with pytest.raises(KeyError):
        before(1)


@pytest.mark.parametrize("gib", [40.0, 80.0, 141.0])
def test_before_29622_the_draft_layer_lies_outside_the_budget(gib):
    full_layer, swa_layer = _per_layer_bytes("gpt-oss-120b", False), _per_layer_bytes("gpt-oss-120b", True)
    fixed, reverted = audit(_launch(SGLANG_VERSION, gib=gib)), audit(_launch(before(29622), gib=gib))
    pools, old = fixed.decisions.pools, reverted.decisions.pools
    budget = pools.budget_bytes
    assert budget == old.budget_bytes
    # 0.5.23: target (18 full + 18 SWA layers) and the draft's one full layer solve one budget, ratio 0.8
    cell = 19 * full_layer + 0.8 * 18 * swa_layer
    assert pools.full_tokens == int(budget // cell)  # pages of 1 on this launch
    assert pools.full_tokens * 19 * full_layer + pools.swa_tokens * 18 * swa_layer <= budget
    assert pools.draft_outside_bytes == 0
    # before #29622: the target alone solves the budget; the draft's layer comes on top of it
    assert old.full_tokens == int(budget // (18 * full_layer + 0.8 * 18 * swa_layer))
    assert old.draft_outside_bytes == old.full_tokens * full_layer
    assert old.full_tokens * 18 * full_layer + old.swa_tokens * 18 * swa_layer + old.draft_outside_bytes > budget
    assert "the draft's KV pool is allocated outside the KV budget" in _titles(reverted.launch)
    assert "the draft's KV pool is allocated outside the KV budget" not in _titles(fixed.launch)


def test_before_29622_without_a_draft_layer_there_is_nothing_outside():
    plain = Launch(model=load_model("gpt-oss-120b"), server_args=parse_server_args("--speculative-algorithm EAGLE3"),
                   platform=Platform.parse("cuda-sm90", 80.0), sglang_version=before(29622))
    assert audit(plain).decisions.pools.draft_outside_bytes == 0  # no draft config, no target nextn layers


@pytest.mark.parametrize("ratio, smaller", [(None, True), (0.3, True), (1.0, False)])
def test_before_17630_the_draft_takes_the_one_pool_count(ratio, smaller):
    args = EAGLE3 + ("" if ratio is None else f" --swa-full-tokens-ratio {ratio}")
    full_layer, swa_layer = _per_layer_bytes("gpt-oss-120b", False), _per_layer_bytes("gpt-oss-120b", True)
    old = audit(_launch(before(17630), args)).decisions.pools
    one_pool = 19 * full_layer + 18 * swa_layer  # every layer (the draft's too) at full size
    assert old.draft_full_tokens == int(old.budget_bytes // one_pool)
    assert (old.draft_full_tokens < old.full_tokens) == smaller  # ratio 1: the adjustment changes nothing
    raised = "the draft's full pool is smaller than the target's" in _titles(_launch(before(17630), args))
    assert raised == smaller
    fixed = audit(_launch(SGLANG_VERSION, args)).decisions.pools
    assert fixed.draft_full_tokens == fixed.full_tokens


def test_before_17630_needs_a_draft_that_owns_a_pool():
    frozen = Launch(model=load_model("gpt-oss-120b"), server_args=parse_server_args("--speculative-algorithm "
                                                                                   "FROZEN_KV_MTP"),
                    platform=Platform.parse("cuda-sm90", 80.0), sglang_version=before(17630))
    assert audit(frozen).decisions.pools.draft_full_tokens is None  # it reads the target's pool


def test_an_entrys_draft_config_is_checked(tmp_path):
    raw = json.loads((bugs.BUGS_DIR / "sglang-17630.json").read_text())
    raw["launch"]["draft_model"] = []
    with pytest.raises(UsageError, match="launch.draft_model"):
        bugs.parse_entry(raw, "sglang-17630.json")
    raw["launch"]["draft_model"], raw["launch"]["server_args"] = dict(HEAD), ""
    with pytest.raises(UsageError, match="no --speculative-algorithm"):
        bugs.parse_entry(raw, "sglang-17630.json")
