"""The kit's plan of SGLang's Triton backend reads window layers through the runner's one window, as
``triton_backend.py`` does (``update_sliding_window_buffer`` cuts one rail at the runner's ``sliding_window_size``).

Gemma-3n's layers get the whole window W (512) but its runner W - 1 (``gemma3n_causal.py``
``get_attention_sliding_window_size``): decode attends 511 keys, an extend's first query 512, a prefill 513.
A window layer whose runner has no window (Command R7B's, which gets no hybrid pool; any model without its own
``get_attention_sliding_window_size`` once the hybrid pool is off) meets SGLang's assertion. The same routes are
held against SGLang's own backend in tests/test_differential_sglang.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import differential  # noqa: E402

from swa_kit.launch.decide import decide  # noqa: E402
from swa_kit.launch.inputs import Launch  # noqa: E402
from swa_kit.measure.sglang_triton_routes import NO_RAIL  # noqa: E402


def _routes(model: str, args: str) -> dict:
    refused, fields = differential.kit_answer(model, "cuda-sm90", args)
    assert refused is None, refused
    return fields["routes"]


def test_gemma3n_window_layers_read_the_runners_shorter_rail():
    routes = _routes("gemma3n-e4b", "--attention-backend triton")
    assert routes["decode"][0] == ["decode_attention_fwd", 511, "full", 511]
    assert routes["prefill"][0] == ["extend_attention_fwd", 512, "full", 513]
    assert routes["extend"][0] == ["extend_attention_fwd", 512, "full", 512]


def test_gpt_oss_window_layers_read_the_swa_rail_at_their_own_window():
    routes = _routes("gpt-oss-20b", "--attention-backend triton")
    assert routes["decode"][0] == ["decode_attention_fwd", 127, "swa", 127]
    assert routes["extend"][0] == ["extend_attention_fwd", 127, "swa", 128]
    assert routes["decode"][1] == ["decode_attention_fwd", -1, "full", None]


def test_a_window_layer_without_a_runner_window_meets_sglangs_assertion():
    routes = _routes("command-r7b", "--attention-backend triton")
    assert routes["decode"][0] == routes["prefill"][0] == NO_RAIL
    assert routes["decode"][3] == ["decode_attention_fwd", -1, "full", None]  # a full layer reads the full rail


def test_turning_the_hybrid_pool_off_takes_the_runners_window_and_names_the_way_back():
    assert _routes("mimo-v2-flash", "--attention-backend triton --tp 8")["decode"][1][0] == "decode_attention_fwd"
    launch = Launch.from_inputs(model="mimo-v2-flash", platform="cuda-sm90",
                                server_args="--attention-backend triton --tp 8 --disable-hybrid-swa-memory")
    layer = decide(launch).routes[("target", "decode")].layer(1)
    assert layer.sglang_verdict is not None and "builds no window_kv_indices" in layer.sglang_verdict.problem
    assert any("hybrid" in way for way in layer.sglang_verdict.ways_out), layer.sglang_verdict.ways_out
