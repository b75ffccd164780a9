"""A hybrid-SWA draft's own pool follows the target's resolved hybrid switch, the flag or the target's override.

SGLang 0.5.23 builds the draft's ``ModelConfig`` from the resolved server arguments (``ModelConfig.from_server_args``
passes ``disable_hybrid_swa_memory`` as resolved), so Gemma-2/3's override (``model_overrides/gemma2_gemma3.py``)
turns a hybrid-SWA draft's SWA pool off too, and a target that is not hybrid-SWA (Mistral) leaves it on. The
expected numbers are worked out here by hand; the SGLang check asks SGLang's own resolution for the same launches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch

DATA = Path(__file__).resolve().parent / "data" / "differential"
DRAFT = DATA / "draft-gpt-oss-2l.json"  # GptOssForCausalLM: layer 0 sliding, layer 1 full
SPEC = ("--speculative-algorithm STANDALONE --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4")
GPT_OSS_LAYER_BYTES = 8 * (64 + 64) * 2  # the draft's KV heads x (K + V head dims) x bf16, one layer, one token

#: target -> (the draft owns an SWA pool, its SWA layers counted in the target's SWA cell)
CASES = {
    "gemma3-27b": (False, 0),  # bundled Gemma-3: the override turns hybrid SWA memory off for both models
    "gemma2-9b": (False, 0),
    "gemma3-1b": (False, 0),
    "gpt-oss-20b": (True, 1),  # hybrid target and draft: the draft's sliding layer joins the SWA cell
    "mistral-7b-v0.1": (True, 1),  # not hybrid in SGLang, no override: the draft keeps its SWA pool (one-pool target)
}


def _launch(target: str, extra: str = "", platform: str = "rocm-gfx942") -> Launch:
    where = {"hf_config": DATA / f"{target}.json"} if (DATA / f"{target}.json").exists() else {"model": target}
    return Launch.from_inputs(**where, server_args=f"{SPEC} {extra}".strip(), platform=platform,
                              draft_hf_config=DRAFT, gpu_memory_gib=192)


@pytest.mark.parametrize("target", sorted(CASES))
def test_draft_pool_follows_the_resolved_switch(target):
    own_swa, swa_layers = CASES[target]
    d = decide(_launch(target))
    pool = d.draft_pool.value.pool
    assert pool.startswith("own SWA pool") == own_swa, pool
    assert (d.pools.draft.full, d.pools.draft.swa) == (2 - swa_layers, swa_layers)
    if not own_swa:  # says what turned it off: the target's override, not the user
        assert "gemma2_gemma3.py" in pool and "--disable-hybrid-swa-memory" not in pool, pool


def test_user_flag_turns_the_draft_pool_off_behind_a_hybrid_target():
    d = decide(_launch("gpt-oss-20b", "--disable-hybrid-swa-memory"))
    assert d.draft_pool.value.pool == "own full pool (hybrid-SWA draft, hybrid SWA memory off by " \
                                      "--disable-hybrid-swa-memory)"
    assert (d.pools.draft.full, d.pools.draft.swa) == (2, 0)


def test_draft_layers_by_hand_in_the_hybrid_cells():
    """GPT-OSS-20B behind the 2-layer draft: one layer more in each of the full and SWA cells than without it."""
    alone = decide(Launch.from_inputs(model="gpt-oss-20b", server_args="", platform="rocm-gfx942",
                                      gpu_memory_gib=192)).pools
    with_draft = decide(_launch("gpt-oss-20b")).pools
    assert with_draft.full_cell_bytes - alone.full_cell_bytes == GPT_OSS_LAYER_BYTES
    assert with_draft.swa_cell_bytes - alone.swa_cell_bytes == GPT_OSS_LAYER_BYTES


@pytest.mark.parametrize("target", ["gemma3-27b", "mistral-7b-v0.1"])
def test_draft_routes_see_the_draft_pool_decided(target):
    """The draft worker's plans read an SWA pool of its own exactly where its pool is one (the switch, not whether the
    target is hybrid-SWA: behind Mistral the switch stays on)."""
    plans = decide(_launch(target, "--attention-backend triton")).routes
    draft_plans = [plan for (worker, _), plan in plans.items() if worker == "draft"]
    assert draft_plans, list(plans)
    assert {plan.pool.own_swa_pool for plan in draft_plans} == {CASES[target][0]}
