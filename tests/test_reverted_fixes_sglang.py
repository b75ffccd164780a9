"""The 0.5.23 side of each fix the kit undoes, read in SGLang's installed source (``sglang``-marked).

``before-<N>`` changes one rule; these check that the kit's 0.5.23 rule is the one the source has, so that only
the undone side is the kit's model of the thread. Rules a corpus thread replays at 0.5.23 itself are read here too.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest

from sglang_support import REQUIRE_SGLANG
from swa_kit.engine.call_sites import DECLARED_SITES
from swa_kit.launch.refusals import GEMMA4_BACKENDS, LLAMA4_ARCHITECTURES, LLAMA4_BACKENDS
from swa_kit.models.configs import load_model

pytestmark = pytest.mark.sglang


def _source(relative: str) -> str:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        if os.environ.get(REQUIRE_SGLANG) == "1":
            pytest.fail(f"{REQUIRE_SGLANG}=1 but SGLang is not installed", pytrace=False)
        pytest.skip("SGLang is not installed")
    return (Path(list(spec.submodule_search_locations)[0]) / relative).read_text()


def _function(text: str, name: str) -> str:
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(text, node) or ""


def test_trtllm_mha_passes_every_kernel_the_layers_window():
    text = _source("srt/layers/attention/trtllm_mha_backend.py")
    for method in ("forward_decode", "forward_extend"):
        body = _function(text, method)
        passed = re.findall(r"window_left=([\w.]+)", body)
        assert passed and set(passed) == {"layer.sliding_window_size"}, (method, passed)
    assert "self._get_layer_page_table(layer, forward_batch)" in _function(text, "forward_decode")
    for name in ("trtllm_mha.decode", "trtllm_mha.extend"):  # the kit's 0.5.23 sites: window_left = sws, SWA page table
        site = DECLARED_SITES[name]
        assert site.window_arg(127) == 127 and site.swa_page_table and site.keys_of(127) == 128


def test_gemma4_file_passes_w_minus_1_and_lists_aiter():
    text = _source("srt/models/gemma4_causal.py")
    assert "return config.sliding_window - 1" in _function(text, "get_attention_sliding_window_size")
    kind = next(k for k in load_model("gemma4-31b").kinds.values() if k.attention == "sliding")
    assert kind.sliding_window_size == kind.window.keys - 1
    hook = _source("srt/arg_groups/model_hook.py")
    listed = re.search(r"accepted_backends = \(([^)]*)\)", hook)
    assert listed and tuple(re.findall(r'"(\w+)"', listed.group(1))) == GEMMA4_BACKENDS


def test_llama4_allow_list_is_sglangs_and_checks_the_base_backend_off_the_cpu():
    """model_hook.py handle_model_specific_adjustments: Llama-4's assert, its set, what it reads, where it runs."""
    body = _function(_source("srt/arg_groups/model_hook.py"), "handle_model_specific_adjustments")
    tree = ast.parse(body)
    asserts = [n for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.msg is not None
               and "Llama4" in (ast.get_source_segment(body, n.msg) or "")]
    assert len(asserts) == 1 and isinstance(asserts[0].test, ast.Compare)
    test = asserts[0].test
    listed = test.comparators[0]
    assert isinstance(listed, ast.Set) and isinstance(test.left, ast.Name)
    assert {e.value for e in listed.elts if isinstance(e, ast.Constant)} == set(LLAMA4_BACKENDS)
    # the name it tests is the resolved base attention_backend (not the prefill / decode split)
    assert f"{test.left.id} = resolved_view(server_args).attention_backend" in body
    branch = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and asserts[0] in n.body)
    guard = ast.get_source_segment(body, branch.test) or ""
    assert all(f'"{arch}"' in guard for arch in LLAMA4_ARCHITECTURES) and 'cfg.device != "cpu"' in guard


def test_aiter_extend_takes_unified_before_ck():
    body = _function(_source("srt/layers/attention/aiter_backend.py"), "forward_extend")
    unified = body.index("if self.use_triton_unified_attention:")
    assert unified < body.index("o = mha_batch_prefill_func(")
    assert body.index("if self.kv_cache_is_vectorized_5d:") < unified  # the 5D extend comes first, CK inside it


def test_triton_extend_bounds_the_window_by_draft_row():
    """kernels/ops/attention/extend_attention.py _fwd_kernel: the prefix window mask takes q = prefix + row, with no
    tree depth or position read (SGLang PR #39287, open), and the kit's Triton extend site says so for trees."""
    body = _function(_source("kernels/ops/attention/extend_attention.py"), "_fwd_kernel")
    flat = " ".join(body.split())
    assert "window_mask = ( cur_seq_len_prefix + cur_block_m * BLOCK_M + offs_m[:, None] ) <= " \
           "(start_n + offs_n_prefix[None, :] + SLIDING_WINDOW_SIZE)" in flat
    assert not re.search(r"\b(depth|positions?)\b", body)
    extend = _function(_source("srt/layers/attention/triton_backend.py"), "forward_extend")
    assert "sliding_window_size=sliding_window_size" in extend and "self.forward_metadata.custom_mask" in extend
    site = DECLARED_SITES["triton.extend"]
    assert "tree" in site.modes and "not its depth" in site.tree_rows
