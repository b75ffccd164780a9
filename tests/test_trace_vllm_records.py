"""Reading vLLM trace records and holding them against the kit's vLLM plan (no vLLM needed).

The records here are written as :mod:`swa_kit.measure.vllm_trace` writes them; tests/test_trace_vllm.py records them
from vLLM's own backend classes. The launch: a Cohere 2 config saved by transformers' own config class (window 128,
head size 64) on ``ROCM_AITER_FA`` with two speculative tokens, so each aiter kernel has a route: CK varlen prefill,
``paged_attention_v1(sliding_window=W)`` decode on the window-trimmed table, ``unified_attention`` verify.
"""

from __future__ import annotations

import json

import pytest

from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.exit_codes import ExitCode
from swa_kit.launch.vllm_args import parse_vllm_flags
from swa_kit.launch.vllm_plan import plan
from swa_kit.measure import trace, vllm_trace
from swa_kit.measure.bugs import finding_classes
from swa_kit.measure.vllm_audit import audit_vllm
from swa_kit.models.configs import load_hf_config

W, SLIDING, FULL = 128, 0, 3
FLAGS = "--attention-backend ROCM_AITER_FA --speculative-config '{\"method\": \"eagle3\", " \
        "\"num_speculative_tokens\": 2, \"model\": \"draft\"}'"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Cohere2Config

    folder = tmp_path_factory.mktemp("cohere2")
    Cohere2Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_hidden_layers=4,
                  sliding_window=W, intermediate_size=512, vocab_size=1000, eos_token_id=2).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def launch(model_dir):
    return plan(load_hf_config(model_dir), parse_vllm_flags(FLAGS), {})


def record(layer=SLIDING, kernel="aiter paged_attention_v1", window_arg=W, mode="decode",
           method="AiterFlashAttentionImpl.forward", table="window", **more) -> trace.TraceRecord:
    fields = {"layer": layer, "sliding_window_size": W - 1 if layer == SLIDING else -1, "kernel": kernel,
              "window_arg": window_arg, "page_table_shape": [1, 10], "page_table": table, "mode": mode,
              "method": method, "pid": 7, "engine": "vllm", **more}
    return trace.TraceRecord(**fields)


AS_PLANNED = [record(kernel="aiter flash_attn_varlen_func", window_arg=[W - 1, 0], mode="prefill", table=None),
              record(), record(FULL, window_arg=0, table="full"),
              record(kernel="aiter unified_attention", window_arg=[W - 1, 0], mode="verify", table="full")]


def test_the_calls_vllm_plans_agree(launch):
    assert vllm_trace.compare(AS_PLANNED, launch) == []
    findings = audit_vllm(launch, AS_PLANNED).findings
    assert [(f.severity, f.title) for f in findings if f.where == "trace"] == \
        [("info", "the trace agrees with the plan: 4 kernel calls")]


def test_paged_decode_without_its_window_is_wrong_keys(launch):
    """vLLM #28539: aiter's paged_attention_v1 called without sliding_window (its default 0) on a sliding layer."""
    dropped = record(window_arg=0)
    assert trace.traced_keys(dropped.kernel, dropped.window_arg) is None
    assert [(f.field, f.traced, f.planned) for f in vllm_trace.compare([dropped], launch)] == [("window_arg", 0, W)]
    (finding,) = [f for f in audit_vllm(launch, [dropped]).findings if f.where.startswith("trace")]
    assert (finding.severity, finding.title, finding.where) == \
        ("wrong", f"the server's window_arg differs from the plan and gets no window: it attends every key where {W} "
                  "are meant", "trace: layer 0 decode")
    assert finding_classes(finding) == frozenset({"window-not-passed"})
    assert audit_vllm(launch, [dropped]).exit_code == ExitCode.DISAGREES


def test_a_unified_call_one_key_short(launch):
    """SGLang's convention handed to aiter's unified_attention: (W - 2, 0) attends W - 1 keys."""
    short = record(kernel="aiter unified_attention", window_arg=[W - 2, 0], mode="verify", table="full")
    (finding,) = [f for f in audit_vllm(launch, [short]).findings if f.where.startswith("trace")]
    assert (finding.severity, finding_classes(finding)) == ("one-short", frozenset({"one-key-short"}))
    assert f"attends {W - 1} of {W} keys" in finding.title


def test_a_one_call_backends_batch_is_held_against_prefill_and_verify(model_dir):
    unified = plan(load_hf_config(model_dir), parse_vllm_flags(FLAGS.replace("ROCM_AITER_FA", "TRITON_ATTN")), {})
    mixed = record(kernel="vLLM Triton unified_attention", window_arg=[W - 1, 0], mode="mixed",
                   method="TritonAttentionImpl.forward", table="full")
    assert vllm_trace.compare([mixed], unified) == []
    no_spec = plan(load_hf_config(model_dir), parse_vllm_flags("--attention-backend ROCM_AITER_FA"), {})
    verify = AS_PLANNED[-1]  # a verify in a launch without speculative decoding: the plan covers no such call
    assert [(f.field, f.traced) for f in vllm_trace.compare([verify], no_spec)] == [("mode", "verify")]


def test_calls_the_plan_does_not_cover_are_findings(launch):
    stray = [record(layer=None), record(layer=4), record(mode=None), record(engine="sglang")]
    assert [f.field for f in vllm_trace.compare(stray, launch)] == ["layer", "layer", "mode", "mode"]
    assert {f.severity for f in audit_vllm(launch, stray).findings if f.where.startswith("trace")} == {"info"}


def test_layer_index_follows_vllms_rule():
    assert vllm_trace.layer_index("model.layers.12.self_attn.attn") == 12
    assert vllm_trace.layer_index("model.layers.1.experts.3.attn") is None  # two numbers: vLLM asserts one
    assert vllm_trace.layer_index("lm_head") is None and vllm_trace.layer_index(None) is None


def test_window_lengths_are_read_as_vllms_kernels_read_them():
    assert trace.traced_keys("aiter paged_attention_v1", W) == W
    assert trace.traced_keys("chunked_prefill_paged_decode", W) == W
    for off in (0, -1):  # chunked_prefill_paged_decode turns any value <= 0 into 0: no window
        assert trace.traced_keys("chunked_prefill_paged_decode", off) is None
    assert trace.traced_keys("vLLM Triton unified_attention", [W - 1, 0]) == W


def _write(path, records):
    path.write_text("".join(json.dumps(r if isinstance(r, dict) else r.to_json()) + "\n" for r in records))
    return str(path)


def test_read_records_keeps_engines_apart(tmp_path):
    vllm_file = _write(tmp_path / "vllm.jsonl", AS_PLANNED)
    assert trace.read_records(vllm_file, "vllm") == AS_PLANNED
    with pytest.raises(UsageError, match="a call vllm made, but the audit is of a sglang launch; way out: --engine vl"):
        trace.read_records(vllm_file, "sglang")
    old = {k: v for k, v in AS_PLANNED[0].to_json().items() if k != "engine"}  # recorded before vLLM was traced
    assert trace.read_records(_write(tmp_path / "old.jsonl", [old]))[0].engine == "sglang"
    with pytest.raises(UsageError, match="line 1: engine is 'trtllm'; a trace record's engine is one of sglang, vllm"):
        trace.read_records(_write(tmp_path / "bad.jsonl", [{**old, "engine": "trtllm"}]))
    with pytest.raises(UsageError, match=r"engine is None"):
        trace.read_records(_write(tmp_path / "null.jsonl", [{**old, "engine": None}]))


def test_the_cli_holds_a_vllm_trace(model_dir, tmp_path, capsys):
    args = ["audit", "--engine", "vllm", "--hf-config", str(model_dir), "--server-args", FLAGS, "--json"]
    assert main([*args, "--trace", _write(tmp_path / "ok.jsonl", AS_PLANNED)]) == ExitCode.OK
    assert any(f["title"] == "the trace agrees with the plan: 4 kernel calls"
               for f in json.loads(capsys.readouterr().out)["findings"])
    assert main([*args, "--trace", _write(tmp_path / "bad.jsonl", [record(window_arg=0)])]) == ExitCode.DISAGREES
    assert json.loads(capsys.readouterr().out)["findings"][0]["severity"] == "wrong"
    sglang_trace = _write(tmp_path / "sglang.jsonl", [{**AS_PLANNED[0].to_json(), "engine": "sglang"}])
    assert main([*args, "--trace", sglang_trace]) == ExitCode.BAD_INPUT
    assert "a call sglang made, but the audit is of a vllm launch" in capsys.readouterr().err
