"""The vLLM bugs' fixes as vLLM 0.34.0's own code has them: what the kit's 0.34.0 rules say, read from vLLM.

Each corpus entry with ``"engine": "vllm"`` is replayed at ``before-<N>`` and at 0.34.0 in tests/test_bugs_vllm.py.
Here the 0.34.0 side is held against vLLM itself:

* vllm-28539 / vllm-31625 / vllm-46847: ``AiterFlashAttentionImpl.forward`` read with ``ast`` (the call it makes needs
  a ROCm GPU): the single-token sliding decode passes ``self.sliding_window[0] + 1`` to ``paged_attention_v1``, a
  multi-token decode goes to ``unified_attention`` with its real ``max_seqlen_q``, and that branch asserts the
  shuffled layout is off;
* vllm-39254: vLLM's own ``FullAttentionSpec.max_memory_usage_bytes`` sizes a promoted sliding spec for the whole
  context;
* vllm-41830 / vllm-42024: vLLM's own ``KVConnectorFactory.supports_hma_config`` and ``VllmConfig.__post_init__``
  decide the hybrid manager's switch per connector as the kit does.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from types import SimpleNamespace

import pytest

from vllm_support import require_vllm

pytestmark = pytest.mark.vllm

(cpu, config, kv, factory, rocm_aiter_fa, transfer) = require_vllm(
    "vllm.platforms.cpu", "vllm.config", "vllm.v1.kv_cache_interface",
    "vllm.distributed.kv_transfer.kv_connector.factory", "vllm.v1.attention.backends.rocm_aiter_fa",
    "vllm.config.kv_transfer")

from swa_kit.errors import UsageError  # noqa: E402
from swa_kit.launch.vllm_args import VLLM_KV_CONNECTORS, parse_vllm_flags  # noqa: E402
from swa_kit.launch.vllm_plan import plan  # noqa: E402
from swa_kit.launch.vllm_routes import route  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402


# -- AiterFlashAttentionImpl.forward, read --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def forward() -> ast.FunctionDef:
    source = textwrap.dedent(inspect.getsource(rocm_aiter_fa.AiterFlashAttentionImpl.forward))
    tree = ast.parse(source)
    assert isinstance(tree.body[0], ast.FunctionDef)
    return tree.body[0]


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(name)]


def _branch(forward: ast.FunctionDef, test_holds: str) -> ast.If:
    """The ``if`` whose test's source holds ``test_holds``."""
    found = [n for n in ast.walk(forward) if isinstance(n, ast.If) and test_holds in ast.unparse(n.test)]
    assert len(found) == 1, f"{len(found)} branches test {test_holds!r}"
    return found[0]


def test_the_sliding_decode_passes_its_window_to_paged_attention_v1(forward):
    """vllm-28539 after #29234: ``paged_attention_v1``'s last argument is ``1 + self.sliding_window[0]`` = W."""
    (call,) = _calls(forward, "aiter.paged_attention_v1")
    assert ast.unparse(call.args[-1]) == "self.sliding_window[0] + 1"
    swa_paged = next(n for n in ast.walk(forward) if isinstance(n, ast.Assign)
                     and ast.unparse(n.targets[0]) == "use_swa_paged")
    guard = ast.unparse(swa_paged.value)
    assert "self.sliding_window[0] != -1" in guard and "decode_max_query_len == 1" in guard
    assert "self.head_size >= 64" in guard and "not rocm_aiter_ops.is_shuffle_kv_cache_enabled()" in guard
    kit = route("ROCM_AITER_FA", "decode", 1024, 128, has_sink=False, shuffle=False)
    assert (kit.kernel, kit.window_arg, kit.keys) == ("aiter paged_attention_v1", 1024, 1024)


def test_a_multi_token_decode_goes_to_unified_attention_with_its_query_length(forward):
    """vllm-31625 after #32877: ``decode_max_query_len > 1`` routes to ``unified_attention(max_seqlen_q=...)``."""
    branch = _branch(forward, "decode_max_query_len > 1")
    (call,) = _calls(branch, "unified_attention")
    given = {k.arg: ast.unparse(k.value) for k in call.keywords}
    assert given["max_seqlen_q"] == "decode_max_query_len" and given["window_size"] == "self.sliding_window"
    for mode_keys in ((None, 64), (128, 64), (1024, 128)):
        kit = route("ROCM_AITER_FA", "verify", mode_keys[0], mode_keys[1], has_sink=False, shuffle=False)
        assert kit.kernel == "aiter unified_attention" and kit.wrong is None


def test_that_branch_asserts_the_shuffled_layout_is_off(forward):
    """vllm-46847 (open): the branch of sliding, sinks and multi-token decodes asserts the shuffled layout is off."""
    branch = _branch(forward, "decode_max_query_len > 1")
    asserts = [ast.unparse(a.test) for a in ast.walk(branch) if isinstance(a, ast.Assert)]
    assert "not rocm_aiter_ops.is_shuffle_kv_cache_enabled()" in asserts
    kit = route("ROCM_AITER_FA", "decode", 1024, 128, has_sink=False, shuffle=True)
    assert kit.raises and "Shuffle KV cache layout is not supported" in kit.raises


# -- FullAttentionSpec's memory, run ---------------------------------------------------------------------------------


def test_a_promoted_sliding_spec_is_sized_for_the_whole_context():
    """vllm-39254: vLLM 0.34's ``max_memory_usage_bytes`` does not read the window the promoted spec keeps."""
    import torch

    context = SimpleNamespace(model_config=SimpleNamespace(max_model_len=131072),
                              parallel_config=SimpleNamespace(decode_context_parallel_size=1),
                              max_in_flight_tokens=8192)  # one batch of tokens in flight
    shape = dict(block_size=64, num_kv_heads=8, head_size=64, dtype=torch.bfloat16)
    promoted = kv.FullAttentionSpec(**shape, sliding_window=128)
    assert promoted.max_memory_usage_bytes(context) == kv.FullAttentionSpec(**shape).max_memory_usage_bytes(context)
    windowed = kv.SlidingWindowSpec(**shape, sliding_window=128).max_memory_usage_bytes(context)
    kept = 128 - 1 + context.max_in_flight_tokens  # W - 1 + in-flight tokens, in blocks, plus one for alignment
    assert windowed == (-(-kept // 64) + 1) * promoted.page_size_bytes < promoted.max_memory_usage_bytes(context) // 10
    kit = plan(load_model("gpt-oss-20b"), parse_vllm_flags("--disable-hybrid-kv-cache-manager"), {}).kv
    assert {s.kind for s in kit.specs} == {"FullAttentionSpec"}  # every sliding layer promoted, as vLLM does


# -- the connector's switch, run --------------------------------------------------------------------------------------


def _registered() -> dict[str, tuple[str, str]]:
    """Every ``register_connector(name, module, class)`` call in vLLM's factory module, read from its source."""
    tree = ast.parse(inspect.getsource(factory))
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith("register_connector")
             and len(c.args) == 3]
    return {c.args[0].value: (c.args[1].value, c.args[2].value) for c in calls}  # type: ignore[attr-defined]


def _importable(name: str) -> bool:
    try:
        factory.KVConnectorFactory.get_connector_class(transfer.KVTransferConfig(kv_connector=name,
                                                                                 kv_role="kv_both"))
    except ImportError:  # its module needs a package CI's vLLM venv does not hold (msgpack, lmcache, ...)
        return False
    return True


def _declares_hma(name: str) -> bool:
    """Where the connector's module cannot import: does its class list ``SupportsHMA`` among its bases?"""
    import importlib.util

    module_path, class_name = _registered()[name]
    spec = importlib.util.find_spec(module_path)
    assert spec is not None and spec.origin is not None, module_path
    with open(spec.origin) as source:
        tree = ast.parse(source.read())
    (cls,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name]
    return "SupportsHMA" in {ast.unparse(b) for b in cls.bases}


def test_the_kits_connector_table_is_vllms():
    registered = set(factory.KVConnectorFactory._registry)
    assert registered == set(_registered())
    assert set(VLLM_KV_CONNECTORS) | {"MultiConnector", "LMCacheMPConnector"} == registered
    imported = 0
    for name, supports in VLLM_KV_CONNECTORS.items():
        if _importable(name):
            imported += 1
            config_ = transfer.KVTransferConfig(kv_connector=name, kv_role="kv_both")
            assert factory.KVConnectorFactory.supports_hma_config(config_) is supports, name
        else:
            assert _declares_hma(name) is supports, name
    assert imported >= 10  # most are read from vLLM's own classes, not from their source


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    answers = pytest.MonkeyPatch()  # what a ROCm GPU would answer, as in tests/test_hybrid_switch_vllm.py
    answers.setattr(cpu.CpuPlatform, "check_and_update_config", classmethod(lambda cls, vllm_config: None))
    answers.setattr(cpu.CpuPlatform, "support_hybrid_kv_cache", classmethod(lambda cls: True))
    folder = tmp_path_factory.mktemp("gpt-oss-20b")
    (folder / "config.json").write_text(json.dumps(load_model("gpt-oss-20b").hf_config))
    yield config.ModelConfig(model=str(folder), skip_tokenizer_init=True)
    answers.undo()


@pytest.mark.parametrize("connector", ["NixlConnector", "SimpleCPUOffloadConnector", "LMCacheConnectorV1",
                                       "ExampleConnector", "OffloadingConnector"])
def test_the_switch_per_connector_is_vllms(gpt_oss, connector):
    """vllm-42024 / vllm-41830 after #41847: the manager stays on exactly for a connector that supports it."""
    text = json.dumps({"kv_connector": connector, "kv_role": "kv_both"})
    scheduler = config.SchedulerConfig(disable_hybrid_kv_cache_manager=None, is_encoder_decoder=False,
                                       max_model_len=gpt_oss.max_model_len)
    built = config.VllmConfig(model_config=gpt_oss, scheduler_config=scheduler,
                              kv_transfer_config=transfer.KVTransferConfig(kv_connector=connector, kv_role="kv_both"))
    kit = plan(load_model("gpt-oss-20b"), parse_vllm_flags(f"--kv-transfer-config '{text}'"), {}).kv
    assert kit.hybrid_disabled is built.scheduler_config.disable_hybrid_kv_cache_manager
    assert kit.hybrid_disabled is not VLLM_KV_CONNECTORS[connector]


def test_the_manager_forced_on_with_a_connector_that_cannot_is_refused_as_vllm_does(gpt_oss):
    text = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    scheduler = config.SchedulerConfig(disable_hybrid_kv_cache_manager=False, is_encoder_decoder=False,
                                       max_model_len=gpt_oss.max_model_len)
    built = config.VllmConfig(model_config=gpt_oss, scheduler_config=scheduler,
                              kv_transfer_config=transfer.KVTransferConfig(kv_connector="LMCacheConnectorV1",
                                                                           kv_role="kv_both"))
    with pytest.raises(ValueError, match="does not support HMA"):
        factory.KVConnectorFactory.create_connector(built, None, None)
    with pytest.raises(UsageError, match="does not support HMA"):
        plan(load_model("gpt-oss-20b"), parse_vllm_flags(f"--no-disable-hybrid-kv-cache-manager "
                                                         f"--kv-transfer-config '{text}'"), {})


# -- every vLLM entry's evidence, found where it says -----------------------------------------------------------------


def _spans(tree: ast.AST, name: str) -> list[tuple[int, int]]:
    """The line spans of every function or class called ``name``."""
    return [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]


def test_each_vllm_entrys_evidence_at_0_34_is_in_vllms_source():
    """The file, and the line inside the function or class it names (``Class.method`` or ``name``), or for a
    ``Class.field`` the line of that field in that class, in the vLLM installed here."""
    import re
    from pathlib import Path

    import vllm

    from swa_kit.measure import bugs

    root = Path(vllm.__file__).parent.parent
    checked = 0
    for entry in (e for e in bugs.load_corpus() if e.engine == "vllm"):
        for ev in (e for e in entry.evidence if e.at == "vllm 0.34.0"):
            source = (root / ev.file).read_text()
            tree = ast.parse(source)
            parts = re.split(r"[ (]", ev.function)[0].split(".")

            line = ev.line or 0
            inside = any(lo <= line <= hi for lo, hi in _spans(tree, parts[-1]))
            field = len(parts) > 1 and any(lo <= line <= hi for lo, hi in _spans(tree, parts[0])) \
                and parts[-1] in source.splitlines()[line - 1]
            assert inside or field, f"{entry.id}: line {ev.line} of {ev.file} is not inside {'.'.join(parts)}"
            checked += 1
    assert checked >= 10
