"""Per-GPU pools under TP / DP attention / PP, draft layers in the cell, SGLang's memory fraction and KV dtype.

Every expected number is computed here by hand from SGLang 0.5.23's formulas (pool_configurator.py
HybridSWAPoolConfigurator / DefaultPoolConfigurator, model_config.py get_num_kv_heads, memory_hook.py,
attention_hook.py, kv_cache_dtype.py), on configs written fresh into a temporary directory.
"""

from __future__ import annotations

import json
import random

import pytest

from swa_kit.errors import LaunchRefusedError, UsageError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import GIB, Launch
from swa_kit.launch.memory_fraction import estimated_fraction
from swa_kit.launch.parallel import parallel_of
from swa_kit.launch.inputs import parse_server_args


def _gemma4_like(tmp_path, name, layers, sliding_every, kv, swa_kv, head, swa_head, dtype="bfloat16", **extra):
    types = ["full_attention" if (i + 1) % sliding_every == 0 else "sliding_attention" for i in range(layers)]
    text = {"model_type": "gemma4_text", "num_hidden_layers": layers, "layer_types": types,
            "num_attention_heads": 32, "num_key_value_heads": swa_kv, "num_global_key_value_heads": kv,
            "head_dim": swa_head, "global_head_dim": head, "sliding_window": 1024,
            "max_position_embeddings": 262144, "hidden_size": 4096, "attention_k_eq_v": True, "dtype": dtype,
            **extra}
    config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": text}
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_kv_heads_split_over_tp_and_replicate_below_one_per_rank():
    for tp, heads, want in ((1, 8, 8), (2, 8, 4), (8, 8, 1), (16, 8, 1), (4, 2, 1), (3, 8, 2)):
        assert parallel_of(parse_server_args(f"--tp {tp}")).kv_heads_per_gpu(heads) == want
    dp = parallel_of(parse_server_args("--tp-size 8 --dp-size 4 --enable-dp-attention"))
    assert (dp.attn_dp_size, dp.dp_size, dp.attn_tp_size, dp.gpus) == (4, 1, 2, 8)  # handle_deprecated_dp_attention
    replicas = parallel_of(parse_server_args("--tp 2 --dp 3"))
    assert (replicas.attn_tp_size, replicas.gpus) == (2, 6)
    assert [len(r) for r in parallel_of(parse_server_args("--pp-size 4")).stage_layers(10)] == [2, 2, 3, 3]
    with pytest.raises(UsageError, match="multiple"):
        parallel_of(parse_server_args("--tp 6 --attn-dp-size 4"))


def test_random_gemma4_configs_per_gpu_pools_by_hand(tmp_path):
    draw = random.Random(34)
    for case in range(6):
        every = draw.choice((4, 5, 6))
        layers = every * draw.randint(2, 8)
        kv, swa_kv = draw.choice((1, 2, 4)), draw.choice((4, 8, 16))
        head, swa_head = draw.choice((256, 512)), draw.choice((128, 256))
        tp = draw.choice((1, 2, 4, 8))
        path = _gemma4_like(tmp_path, f"m{case}", layers, every, kv, swa_kv, head, swa_head)
        launch = Launch.from_inputs(hf_config=path, server_args=f"--tp {tp} --mem-fraction-static 0.8",
                                    gpu_memory_gib=192, weights_gib=10)
        d = decide(launch)
        n_full = layers // every
        full_cell = n_full * max(1, kv // tp) * 2 * head * 2
        swa_cell = (layers - n_full) * max(1, swa_kv // tp) * 2 * swa_head * 2
        budget = int(192 * GIB * 0.8) - 10 * GIB
        full = int(budget // (full_cell + 0.8 * swa_cell))
        assert (d.pools.full_cell_bytes, d.pools.swa_cell_bytes) == (full_cell, swa_cell), case
        assert (d.full_tokens.value, d.swa_tokens.value) == (full, int(full * 0.8)), case


def test_draft_layers_enter_the_full_and_swa_cells(tmp_path):
    target = _gemma4_like(tmp_path, "target", 12, 6, 4, 16, 512, 256)
    draft = _gemma4_like(tmp_path, "draft", 4, 2, 4, 16, 512, 256)  # hybrid: 2 SWA + 2 full layers
    args = f"--speculative-algorithm STANDALONE --speculative-draft-model-path {draft} --mem-fraction-static 0.7"
    d = decide(Launch.from_inputs(hf_config=target, server_args=args, gpu_memory_gib=100))
    full_layer, swa_layer = 4 * 1024 * 2, 16 * 512 * 2
    assert (d.pools.draft.full, d.pools.draft.swa) == (2, 2)
    assert d.pools.full_cell_bytes == (2 + 2) * full_layer and d.pools.swa_cell_bytes == (10 + 2) * swa_layer
    full = int(int(100 * GIB * 0.7) // (4 * full_layer + 0.8 * 12 * swa_layer))
    assert d.full_tokens.value == full
    # the same draft given as a config.json path, or by --draft-hf-config, counts the same
    for extra in ({"server_args": args.replace(str(draft), str(draft / "config.json"))},
                  {"server_args": "--speculative-algorithm STANDALONE --mem-fraction-static 0.7",
                   "draft_hf_config": draft / "config.json"}):
        again = decide(Launch.from_inputs(hf_config=target, gpu_memory_gib=100, **extra))
        assert again.full_tokens.value == full
    # under --disable-hybrid-swa-memory: one pool, every layer at ModelConfig's one (full-attention) geometry
    # (pool_configurator.py DefaultPoolConfigurator._compute_cell_size), the draft adding int(cell x 4 / 12)
    off = decide(Launch.from_inputs(hf_config=target, server_args=args + " --disable-hybrid-swa-memory",
                                    gpu_memory_gib=100))
    cell = 12 * full_layer
    assert off.pools.full_cell_bytes == cell + int(cell * 4 / 12)
    assert off.full_tokens.value == int(100 * GIB * 0.7) // (cell + int(cell * 4 / 12))
    assert d.pools.one_pool_cell_bytes == (2 + 2) * full_layer + (10 + 2) * swa_layer  # the real bytes, for savings
    assert d.pools.default_pool_cell_bytes == off.pools.full_cell_bytes
    # a hub name is not on this machine: no layers counted, and said so
    hub = decide(Launch.from_inputs(hf_config=target, gpu_memory_gib=100, server_args=(
        "--speculative-algorithm EAGLE --speculative-draft-model-path org/draft --mem-fraction-static 0.7")))
    assert hub.pools.draft.total == 0 and "ASSUMED" in hub.pools.draft.how
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no config.json"):
        Launch.from_inputs(hf_config=target, server_args=(
            f"--speculative-algorithm EAGLE --speculative-draft-model-path {tmp_path / 'empty'}"))


def test_memory_fraction_estimate_and_aiter_cut(tmp_path):
    path = _gemma4_like(tmp_path, "m", 12, 6, 4, 16, 512, 256)
    for gib, chunked, tp, max_bs in ((80, 8192, 1, 256), (80, 8192, 8, 512), (192, 16384, 1, 512),
                                     (40, 4096, 1, 32)):
        mib = gib * 1024
        reserved = 512 + chunked * 1.5 + tp / 8 * 1024 + max_bs * 2
        reserved = max(reserved, 10 * 1024) if mib > 60 * 1024 else reserved
        assert estimated_fraction(gib * GIB, chunked, parallel_of(parse_server_args(f"--tp {tp}"))) == \
            round((mib - reserved) / mib, 3)
    # aiter with a context over 8192 cuts a given fraction to 0.85 of itself; 8192 or less keeps it
    for context, fraction in ((262144, 0.85 * 0.85), (8192, 0.85)):
        d = decide(Launch.from_inputs(hf_config=path, gpu_memory_gib=100, server_args=(
            f"--attention-backend aiter --mem-fraction-static 0.85 --context-length {context}")))
        assert d.pools.budget_bytes == int(100 * GIB * fraction)


def test_float32_checkpoint_sizes_a_two_byte_kv_cache(tmp_path):
    f32 = _gemma4_like(tmp_path, "f32", 12, 6, 4, 16, 512, 256, dtype="float32")
    bf16 = _gemma4_like(tmp_path, "bf16", 12, 6, 4, 16, 512, 256)
    cells = [decide(Launch.from_inputs(hf_config=p, gpu_memory_gib=100)).pools.full_cell_bytes for p in (f32, bf16)]
    assert cells[0] == cells[1] == 2 * 4 * 1024 * 2


def test_budget_below_zero_is_a_start_up_refusal(tmp_path):
    path = _gemma4_like(tmp_path, "m", 12, 6, 4, 16, 512, 256)
    with pytest.raises(LaunchRefusedError, match="refuses this launch.*--tp-size"):
        decide(Launch.from_inputs(hf_config=path, gpu_memory_gib=80, weights_gib=79))


def test_start_up_refusals_sglang_makes():
    with pytest.raises(UsageError, match="fa9.*choices.py"):
        decide(Launch.from_inputs(model="gpt-oss-20b", server_args="--attention-backend fa9"))
    with pytest.raises(LaunchRefusedError, match="trtllm_mha needs an SM90.*aiter"):
        decide(Launch.from_inputs(model="gpt-oss-20b", server_args="--attention-backend trtllm_mha"))
    assert decide(Launch.from_inputs(model="gpt-oss-20b", server_args="--attention-backend trtllm_mha",
                                     platform="cuda-sm90")).decode_attention_backend.value == "trtllm_mha"
    with pytest.raises(LaunchRefusedError, match="Gemma-4 runs only on"):
        decide(Launch.from_inputs(model="gemma4-31b", server_args="--attention-backend fa3", platform="cuda-sm90"))


def test_context_length_above_the_models_own_is_refused(tmp_path):
    """configs/model_config.py ModelConfig._derive_context_length raises unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is on; the model's own length is get_context_length's."""
    path = _gemma4_like(tmp_path, "m", 12, 6, 4, 16, 512, 256, max_position_embeddings=8192)
    with pytest.raises(LaunchRefusedError, match="--context-length 32768 is above the model's own 8192.*"
                                                 "_derive_context_length.*SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        decide(Launch.from_inputs(hf_config=path, server_args="--context-length 32768"))
    assert decide(Launch.from_inputs(hf_config=path, server_args="--context-length 8192")).full_tokens.value
    allowed = Launch.from_inputs(hf_config=path, server_args="--context-length 32768",
                                 env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    assert decide(allowed).full_tokens.value


@pytest.mark.parametrize("name,layers", [("gpt-oss-120b", 36), ("gpt-oss-20b", 24)])
def test_bundled_gpt_oss_default_aiter_launch_gets_the_cut(name, layers):
    """The spec's max_position_embeddings (131072) is over 8192, so aiter's 0.85 cut applies to SGLang's estimate.

    By hand: MI300X 192e9 bytes; memory_hook.py reserves 512 + 16384 x 1.5 (chunked prefill on a GPU over 160 GiB)
    + 1 x 1 / 8 x 1024 + 512 x 2 (decode graph max_bs 512) MiB; then x 0.85; then
    HybridSWAPoolConfigurator: full = budget // (full cell + 0.8 x SWA cell), half the layers each, 8 KV heads of 64.
    """
    d = decide(Launch.from_inputs(model=name))
    mib = 192e9 / (1 << 20)
    fraction = round((mib - (512 + 16384 * 1.5 + 1024 / 8 + 512 * 2)) / mib, 3) * 0.85
    assert "context 131072" in d.full_tokens.source
    assert d.pools.budget_bytes == int(192e9 * fraction)
    cell = layers // 2 * 8 * 64 * 2 * 2
    assert (d.pools.full_cell_bytes, d.pools.swa_cell_bytes) == (cell, cell)
    assert d.full_tokens.value == int(int(192e9 * fraction) // (cell + 0.8 * cell))
    # --context-length 8192 is not over 8192: no cut
    kept = decide(Launch.from_inputs(model=name, server_args="--context-length 8192"))
    assert kept.pools.budget_bytes == int(192e9 * (fraction / 0.85))


def test_mxfp4_on_gfx942_is_refused_at_model_load(tmp_path, capsys):
    """Mxfp4Config.from_config raises on a HIP GPU without gfx95: from the config's quantization_config or the flag."""
    from swa_kit.cli import main
    from swa_kit.models.configs import MODELS_DIR

    raw = json.loads((MODELS_DIR / "gpt-oss-120b.json").read_text())["hf_config"]
    raw["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(LaunchRefusedError, match="MXFP4 on rocm-gfx942.*Mxfp4Config.from_config"):
        decide(Launch.from_inputs(hf_config=tmp_path))
    with pytest.raises(LaunchRefusedError, match="MXFP4"):
        decide(Launch.from_inputs(model="gpt-oss-20b", server_args="--quantization mxfp4"))
    for platform in ("rocm-gfx950", "cuda-sm90", "cuda-sm100"):
        assert decide(Launch.from_inputs(hf_config=tmp_path, platform=platform)).full_tokens.value > 0
    assert decide(Launch.from_inputs(model="gpt-oss-20b", server_args="--quantization fp8")).full_tokens.value > 0
    assert main(["audit", "--hf-config", str(tmp_path), "--platform", "rocm-gfx942"]) == 2
    assert "MXFP4" in capsys.readouterr().err
