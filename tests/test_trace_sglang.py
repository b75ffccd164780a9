"""swa_kit.measure.trace on SGLang's own aiter backend, on a CPU.

SGLang's real ``AiterAttnBackend`` is built (its ``__init__`` runs: resolver, unified switch, buffers) over
SGLang's own pools, and its real ``forward_decode`` is called. aiter does not import off ROCm, so the
kernel names the backend module imports from it are supplied by the kit: aiter's Triton
``unified_attention`` by the kit's float64 reference (``reference_attention``, reading the window through
the ``aiter_unified`` convention: ``1 + left`` keys) and ``paged_attention_ragged`` by the kit's emulation
(no window, as the real op). ``init_forward_metadata`` builds its page tables with GPU Triton kernels, so
the test sets ``forward_metadata`` itself: the full table is ``req_to_token``'s row (flat for paged decode,
``decode_uses_page_table``), the SWA table its translation through the pool's mapping (what SGLang's builder computes).
"""

from __future__ import annotations

import json

import pytest
import torch
from sglang_support import require_sglang

from swa_kit.engine import routing
from swa_kit.measure import trace
from swa_kit.attention.aiter.emulated import paged_attention_ragged
from swa_kit.attention.batch import AttentionBatch
from swa_kit.attention.reference import reference_attention
from swa_kit.launch import sglang_oracle
from swa_kit.launch.inputs import Launch
from swa_kit.window import to_keys

backend_mod, memory_pool, swa_pool, swa_alloc, spec_info = require_sglang(
    "sglang.srt.layers.attention.aiter_backend", "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.swa_memory_pool", "sglang.srt.mem_cache.allocator.swa", "sglang.srt.speculative.spec_info")
pytestmark = pytest.mark.sglang

W = 1024  # Gemma-4 31B's window: its layer 0 is sliding (sws = W - 1), layer 5 full
SLIDING, FULL = 0, 5
HQ, HKV, D = 4, 2, 8


def reference_unified_attention(q, k, v, out, cu_seqlens_q, seqused_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                causal, window_size, block_table, **unused):
    """aiter's unified_attention signature over the kit's float64 reference (page size 1)."""
    assert causal and k.shape[1] == 1
    lens = seqused_k.tolist()
    indices = torch.cat([block_table[b, :n] for b, n in enumerate(lens)])
    batch = AttentionBatch(q=q, k_buffer=k[:, 0], v_buffer=v[:, 0], qo_indptr=cu_seqlens_q.long(),
                           kv_indptr=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()]), kv_indices=indices,
                           sm_scale=softmax_scale)
    out.copy_(reference_attention(batch, to_keys("aiter_unified", tuple(window_size))).out.to(out.dtype))


class Layer:
    def __init__(self, layer_id: int, sws: int) -> None:
        self.layer_id, self.sliding_window_size = layer_id, sws
        self.tp_q_head_num, self.tp_k_head_num, self.tp_v_head_num = HQ, HKV, HKV
        self.qk_head_dim = self.v_head_dim = D
        self.logit_cap, self.scaling, self.k_scale, self.v_scale = 0.0, D ** -0.5, None, None


@pytest.fixture(scope="module")
def session():
    launch = Launch.from_inputs(model="gemma4-31b", server_args="--attention-backend aiter", platform="rocm-gfx942")
    with sglang_oracle.sglang_session(launch) as model_dir:
        sglang_oracle.resolve(launch, model_dir)  # publishes SGLang's runtime context (page size 1, no spec)
        saved = {n: backend_mod.__dict__.get(n) for n in ("unified_attention", "paged_attention_ragged")}
        backend_mod.unified_attention = reference_unified_attention
        backend_mod.paged_attention_ragged = paged_attention_ragged
        try:
            yield launch
        finally:
            for name, value in saved.items():
                if value is None:
                    backend_mod.__dict__.pop(name, None)
                else:
                    setattr(backend_mod, name, value)


def _runner(pool, allocator):
    config = type("ModelConfig", (), {"dtype": torch.float32, "is_multimodal": False, "num_attention_heads": HQ,
                                      "head_dim": D, "attention_arch": None, "context_len": 4096,
                                      "get_num_kv_heads": staticmethod(lambda tp: HKV)})()
    runner = type("Runner", (), {})()
    runner.__dict__.update(model_config=config, device="cpu", kv_cache_dtype=torch.float32, dtype=torch.float32,
                           req_to_token_pool=memory_pool.ReqToTokenPool(2, 2048, "cpu", False),
                           kv_index_translator=None,
                           token_to_kv_pool=pool, token_to_kv_pool_allocator=allocator, is_draft_worker=False,
                           spec_algorithm=spec_info.SpeculativeAlgorithm.NONE, sliding_window_size=W - 1)
    return runner


def _decode(backend, pool, full_ids, swa_ids, layers, tracer_path):
    """One decode step of one request over ``len(full_ids)`` keys: SGLang's forward_decode per layer."""
    seq_len = len(full_ids)
    for layer in layers:
        k, v = torch.randn(seq_len, HKV, D), torch.randn(seq_len, HKV, D)
        pool.set_kv_buffer(layer, memory_pool.KVWriteLoc(full_ids, swa_loc=swa_ids), k, v)
    backend.forward_metadata = backend_mod.ForwardMetadata(
        kv_indptr=torch.tensor([0, seq_len], dtype=torch.int32),
        kv_indices=full_ids[None].int() if backend.decode_uses_page_table else full_ids.int(),  # SGLang's layouts
        qo_indptr=torch.tensor([0, 1], dtype=torch.int32), kv_last_page_len=torch.ones(1, dtype=torch.int32),
        max_q_len=1, max_kv_len=seq_len,
        swa_page_table=None if swa_ids is None else swa_ids[None].int())
    batch = type("ForwardBatch", (), {})()
    batch.__dict__.update(batch_size=1, seq_lens=torch.tensor([seq_len], dtype=torch.int32),
                          forward_mode=type("Mode", (), {"name": "DECODE"})())
    tracer = trace.install(tracer_path, module=backend_mod)
    outs = {}
    try:
        for layer in layers:
            q = torch.randn(1, HQ * D)
            outs[layer.layer_id] = (q, backend.forward_decode(q, None, None, layer, batch, save_kv_cache=False))
    finally:
        tracer.uninstall()
    return tracer, outs


def test_trace_of_sglangs_unified_decode_matches_the_plan(session, tmp_path):
    pool = swa_pool.SWAKVPool(size=2048, size_swa=1536, page_size=1, dtype=torch.float32, head_num=HKV, head_dim=D,
                              swa_attention_layer_ids=[SLIDING], full_attention_layer_ids=[FULL], device="cpu")
    allocator = swa_alloc.SWATokenToKVPoolAllocator(2048, 1536, 1, torch.float32, "cpu", pool, False)
    backend = backend_mod.AiterAttnBackend(_runner(pool, allocator))
    assert backend.use_sliding_window_kv_pool and backend.use_triton_unified_attention  # SGLang's own switch
    seq_len = W + 37
    full_ids = allocator.alloc(seq_len)
    swa_ids = pool.translate_loc_from_full_to_swa(full_ids)
    layers = [Layer(SLIDING, W - 1), Layer(FULL, -1)]
    tracer, outs = _decode(backend, pool, full_ids, swa_ids, layers, tmp_path / "trace.jsonl")

    records = trace.read_records(tmp_path / "trace.jsonl")
    assert [r.to_json() for r in records] == [r.to_json() for r in tracer.records]
    sliding, full = records
    assert (sliding.kernel, sliding.window_arg, sliding.page_table, sliding.page_table_shape) == \
        ("unified_attention", [W - 2, 0], "swa", [1, seq_len])
    expected = ("unified_attention", [-1, -1], "full", "decode")
    assert (full.kernel, full.window_arg, full.page_table, full.mode) == expected
    assert trace.compare(records, routing.plan("gemma4-31b", "decode", strict=False)) == []

    # Independent of the stub: the traced sliding layer attended W - 1 keys of the SWA buffer.
    q, out = outs[SLIDING]
    k_buf, v_buf = pool.get_key_buffer(SLIDING), pool.get_value_buffer(SLIDING)
    keys = slice(seq_len - (W - 1), seq_len)
    k, v = k_buf[swa_ids[keys]].double(), v_buf[swa_ids[keys]].double()
    scores = torch.einsum("hd,khd->hk", q.view(HQ, D).double(), k.repeat_interleave(HQ // HKV, 1)) * D ** -0.5
    expected = torch.einsum("hk,khd->hd", scores.softmax(-1), v.repeat_interleave(HQ // HKV, 1))
    torch.testing.assert_close(out.view(HQ, D).double(), expected, rtol=1e-5, atol=1e-5)


def test_compare_names_what_differs(session, tmp_path):
    record = trace.TraceRecord(layer=SLIDING, sliding_window_size=W - 1, kernel="unified_attention",
                               window_arg=[W - 1, 0], page_table_shape=[1, W], page_table="full", mode="decode",
                               method="forward_decode", pid=1)
    findings = trace.compare([record], routing.plan("gemma4-31b", "decode", strict=False))
    assert {(f.field, json.dumps(f.traced)) for f in findings} == {("window_arg", f"[{W - 1}, 0]"),
                                                                   ("page_table", '"full"')}
    stray = trace.compare([trace.TraceRecord(**{**record.to_json(), "mode": "verify"})],
                          routing.plan("gemma4-31b", "decode", strict=False))
    assert [f.field for f in stray] == ["mode"]


def test_paged_decode_without_a_hybrid_pool(session, tmp_path):
    """One pool, unified off: SGLang's guard refuses the sliding layer; the full layer is traced to paged decode."""
    pool = memory_pool.MHATokenToKVPool(size=256, page_size=1, dtype=torch.float32, head_num=HKV, head_dim=D,
                                        layer_num=6, device="cpu", enable_memory_saver=False)
    allocator = type("Allocator", (), {"get_kvcache": lambda self: pool})()
    backend = backend_mod.AiterAttnBackend(_runner(pool, allocator))
    assert not backend.use_triton_unified_attention
    full_ids = torch.arange(1, 41)
    with pytest.raises(ValueError, match="sliding_window_size"):
        _decode(backend, pool, full_ids, None, [Layer(SLIDING, W - 1)], tmp_path / "t.jsonl")
    tracer, _ = _decode(backend, pool, full_ids, None, [Layer(FULL, -1)], tmp_path / "t.jsonl")
    (record,) = tracer.records
    assert (record.kernel, record.window_arg, record.page_table, record.page_table_shape) == \
        ("paged_attention_ragged", None, "full", [40])
    planned = routing.plan("gemma3-27b", "decode", strict=False)
    assert planned.layer(FULL).kernel == "paged_attention_ragged"
    assert trace.compare([record], planned) == []


def test_install_refuses_a_backend_without_aiter_kernels(session, monkeypatch):
    monkeypatch.delitem(backend_mod.__dict__, "unified_attention")
    monkeypatch.delitem(backend_mod.__dict__, "paged_attention_ragged")
    with pytest.raises(trace.UsageError, match="none of aiter's kernels"):
        trace.install(None, module=backend_mod)
    assert "traced" not in repr(backend_mod.AiterAttnBackend.forward_decode)
