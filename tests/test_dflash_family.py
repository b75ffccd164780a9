"""DFLASH, DSPARK and UNO, the draft sink size and the prefix tails, as the kit models them.

The expectations are written out here from SGLang 0.5.23's source, not read back from the kit:
``speculative/dflash_utils.py dflash_draft_cell_size_per_token`` (the draft's KV heads on one GPU x
``(head_dim + v_head_dim)`` x layers x KV bytes), ``pool_configurator.py`` (``HybridSWAPoolConfigurator``: full tokens
= budget // (full cell + ratio x SWA cell + draft cell); ``DefaultPoolConfigurator`` with
``scale_kv_cell_size_per_token_for_dflash``: target cell + draft cell), ``arg_groups/speculative_hook.py``
(``_handle_dflash``, ``_resolve_dflash_draft_attention_backend``) and ``speculative/spec_utils.py
resolve_draft_decode_window``. tests/test_dflash_family_sglang.py holds the same against SGLang's own code.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from swa_kit.errors import LaunchRefusedError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "tests" / "data" / "differential" / "draft-llama-2l.json"
TARGET = json.loads((ROOT / "data" / "models" / "gpt-oss-20b.json").read_text())["hf_config"]
DRAFT_CFG = json.loads(DRAFT.read_text())
MISTRAL = ROOT / "tests" / "data" / "differential" / "mistral-7b-v0.1.json"
STEPS = "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _decide(args: str, platform: str = "cuda-sm90", draft: Path | None = DRAFT, model: str = "gpt-oss-20b"):
    return decide(Launch.from_inputs(model=model, server_args=args, platform=platform, draft_hf_config=draft))


def _layer_bytes(config: dict, tp: int, dtype_bytes: int) -> int:
    return max(1, config["num_key_value_heads"] // tp) * 2 * config["head_dim"] * dtype_bytes


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_dflash_draft_is_priced_at_its_own_geometry_beside_the_full_pool(tp):
    ratio = random.choice([0.3, 0.5, 0.8, 1.0])
    kv, dtype_bytes = random.choice([("auto", 2), ("fp8_e4m3", 1)])
    d = _decide(f"--speculative-algorithm DFLASH {STEPS} --tp {tp} --swa-full-tokens-ratio {ratio} "
                f"--kv-cache-dtype {kv} --attention-backend triton")
    draft_cell = DRAFT_CFG["num_hidden_layers"] * _layer_bytes(DRAFT_CFG, tp, dtype_bytes)
    layers = TARGET["num_hidden_layers"] // 2  # GPT-OSS alternates sliding and full layers
    target_layer = _layer_bytes(TARGET, tp, dtype_bytes)
    budget = d.pools.budget_bytes
    full = int(budget // (layers * target_layer + draft_cell + ratio * layers * target_layer))
    page = d.page_size.value
    assert d.pools.draft.own_cell_bytes == draft_cell
    assert d.full_tokens.value == full // page * page
    assert d.swa_tokens.value == int(d.full_tokens.value * ratio) // page * page
    assert d.draft_layers_in_pool.value == {"full": DRAFT_CFG["num_hidden_layers"], "swa": 0}


def test_a_dflash_draft_in_one_pool_adds_its_own_cell():
    d = _decide(f"--speculative-algorithm DFLASH {STEPS} --disable-hybrid-swa-memory --attention-backend triton")
    one_pool = TARGET["num_hidden_layers"] * _layer_bytes(TARGET, 1, 2)
    draft_cell = DRAFT_CFG["num_hidden_layers"] * _layer_bytes(DRAFT_CFG, 1, 2)
    assert not d.hybrid_swa_memory.value
    assert d.full_tokens.value == d.pools.budget_bytes // (one_pool + draft_cell) // d.page_size.value \
        * d.page_size.value


def test_an_eagle_draft_keeps_the_targets_geometry():
    """The same draft under EAGLE is counted at the target's per-layer size (the EAGLE branch, unchanged)."""
    d = _decide(f"--speculative-algorithm EAGLE {STEPS} --attention-backend triton")
    assert d.pools.draft.own_cell_bytes == 0 and d.pools.draft.full == DRAFT_CFG["num_hidden_layers"]
    layers, target_layer = TARGET["num_hidden_layers"] // 2, _layer_bytes(TARGET, 1, 2)
    assert d.pools.full_cell_bytes == (layers + DRAFT_CFG["num_hidden_layers"]) * target_layer


@pytest.mark.parametrize(("platform", "args", "backend"), [
    ("rocm-gfx950", "--attention-backend aiter", "triton"),  # aiter is no draft backend: ROCm falls back to triton
    ("cuda-sm90", "--attention-backend fa3", "fa3"),
    ("cuda-sm90", "--attention-backend fa3 --speculative-draft-attention-backend triton", "triton"),
    ("cuda-sm90", "--prefill-attention-backend torch_native --decode-attention-backend triton", "flashinfer"),
])
def test_the_dflash_draft_backend_is_never_aiter(platform, args, backend):
    """A prefill backend no draft runs on falls back to triton on ROCm, flashinfer on CUDA (read on Mistral: GPT-OSS
    allows neither torch_native nor flashinfer)."""
    model = "gpt-oss-20b" if "torch_native" not in args else None
    d = decide(Launch.from_inputs(model=model, hf_config=None if model else MISTRAL, platform=platform,
                                  server_args=f"--speculative-algorithm DFLASH {STEPS} {args}", draft_hf_config=DRAFT))
    assert d.draft_pool.value.backend == backend
    assert d.draft_pool.value.pool == "own full pool"


def test_dflash_plans_the_targets_routes_as_eagles_and_names_its_draft_block():
    args = f"{STEPS} --speculative-draft-model-path /d --attention-backend aiter"
    dflash = _decide(f"--speculative-algorithm DFLASH {args}", platform="rocm-gfx950")
    eagle = _decide(f"--speculative-algorithm EAGLE {args}", platform="rocm-gfx950")
    assert set(dflash.routes) == {("target", m) for m in ("prefill", "extend", "decode", "verify")}
    for key, plan in dflash.routes.items():
        ours = [(e.kernel, e.window_arg, e.page_table, e.effective_keys) for e in plan.layers]
        assert ours == [(e.kernel, e.window_arg, e.page_table, e.effective_keys) for e in eagle.routes[key].layers]
    assert "draft block on triton" in dflash.route_note


def test_dflash_drafts_one_chain_whatever_topk_is_given():
    d = _decide("--speculative-algorithm DFLASH --speculative-num-steps 3 --speculative-eagle-topk 4 "
                "--speculative-num-draft-tokens 8 --attention-backend aiter", platform="rocm-gfx950")
    assert d.routes[("target", "verify")].topk == 1


@pytest.mark.parametrize(("args", "platform", "match"), [
    (STEPS, "cpu", "DFLASH runs on cuda, npu, xpu devices only, got cpu.*_handle_dflash"),
    (f"{STEPS} --pp-size 2", "cuda-sm90", "DFLASH runs on one pipeline stage only, got --pp-size 2"),
    (f"{STEPS} --speculative-draft-window-size 3", "cuda-sm90",
     "--speculative-draft-window-size 3 is below the DFLASH block .*--speculative-num-draft-tokens 4"),
])
def test_dflash_start_up_refusals(args, platform, match):
    with pytest.raises(LaunchRefusedError, match=match):
        _decide(f"--speculative-algorithm DFLASH {args}", platform=platform)
    with pytest.raises(LaunchRefusedError, match="DFLASH requires --speculative-draft-model-path"):
        _decide(f"--speculative-algorithm DFLASH {STEPS}", draft=None)


def test_uno_has_no_draft_model_and_no_draft_pool():
    d = _decide("--speculative-algorithm UNO --uno-lora-path /l --speculative-num-draft-tokens 4 "
                "--attention-backend fa3", draft=None)
    assert d.draft_pool.value.pool == "none (no draft model)" and d.draft_pool.value.layout is None
    assert d.draft_layers_in_pool.value == {"full": 0, "swa": 0}
    plain = _decide("--attention-backend fa3", draft=None)
    assert (d.full_tokens.value, d.swa_tokens.value) == (plain.full_tokens.value, plain.swa_tokens.value)


@pytest.mark.parametrize(("backend", "arch", "applied"), [
    ("triton", "LlamaForCausalLMEagle", True), ("fa3", "LlamaForCausalLMEagle", False),
    ("triton", "LlamaForCausalLMEagle3", False),  # EAGLE-3 routes the window into its own layers
])
def test_the_draft_sink_applies_where_the_draft_decode_reads_it(tmp_path, backend, arch, applied):
    sink = random.randint(1, 32)
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps({**DRAFT_CFG, "architectures": [arch]}))
    spec = "EAGLE3" if arch.endswith("3") else "EAGLE"
    base = f"--speculative-algorithm {spec} {STEPS} --attention-backend {backend} --speculative-draft-window-size 64"
    d = _decide(f"{base} --speculative-draft-sink-size {sink}", draft=draft)
    assert d.draft_pool.value.sink_size == (sink if applied else 0)
    assert ("reads the first" if applied else "ignored") in d.draft_pool.value.source
    without = _decide(base, draft=draft)  # the sink cuts what a step reads, never a pool
    assert (d.full_tokens.value, d.swa_tokens.value) == (without.full_tokens.value, without.swa_tokens.value)


@pytest.mark.parametrize("model", ["gpt-oss-20b", "gemma4-31b", "mimo-v2-flash"])
def test_the_prefix_tails_change_no_pool_of_a_model_the_kit_reads(model):
    tails = random.randint(0, 64)
    for args in ("", "--max-running-requests 8 --disable-radix-cache"):  # ratio and request-cap configurators
        plain = _decide(args, platform="rocm-gfx942", draft=None, model=model)
        tailed = _decide(f"{args} --swa-prefix-tails {tails}", platform="rocm-gfx942", draft=None, model=model)
        assert (tailed.full_tokens.value, tailed.swa_tokens.value) == (plain.full_tokens.value, plain.swa_tokens.value)


def test_the_guides_figures_are_the_kits():
    """swa_kit/docs/sglang-and-aiter.md quotes the DFLASH draft's bytes and the tokens it costs GPT-OSS-20B."""
    guide = (ROOT / "swa_kit" / "docs" / "sglang-and-aiter.md").read_text()
    dflash = _decide(f"--speculative-algorithm DFLASH {STEPS} --attention-backend triton")
    plain = _decide("--attention-backend triton", draft=None)
    draft, target = dflash.pools.draft.own_cell_bytes, plain.pools.bytes_per_context_token
    fewer = round(100 * (1 - dflash.full_tokens.value / plain.full_tokens.value))
    assert f"{draft:,} B per token beside the target's {round(target):,} (ratio 0.8)" in guide
    assert f"about {fewer}% fewer tokens" in guide


@pytest.mark.parametrize(("args", "capped"), [
    (f"--speculative-algorithm DFLASH {STEPS}", True), (f"--speculative-algorithm EAGLE {STEPS}", True),
    ("--speculative-algorithm UNO --uno-lora-path /l --speculative-num-draft-tokens 4", False), ("", False)])
def test_a_speculative_handlers_48_requests_cap_the_swa_pool_with_the_radix_cache_off(args, capped):
    """_handle_dflash, _handle_eagle_family, ... declare max_running_requests 48 when unset (not _handle_uno), and
    SWARequestCapPoolConfigurator.is_applicable needs it with the radix cache off."""
    d = _decide(f"{args} --attention-backend fa3 --disable-radix-cache", draft=None if "UNO" in args or not args
                else DRAFT)
    assert d.pool_configurator.value == ("SWARequestCapPoolConfigurator" if capped else "HybridSWAPoolConfigurator")
