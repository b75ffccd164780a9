"""swa_kit.measure.vllm_trace on vLLM 0.34's own ROCm attention backends, on a CPU.

vLLM's real impl classes (``AiterFlashAttentionImpl``, ``RocmAttentionImpl``, ``RocmAiterUnifiedAttentionImpl``,
``TritonAttentionImpl``) are built for a sliding layer (window W = 128 keys) and a full layer of a small Cohere 2
model, their real metadata builders build each batch from vLLM's ``CommonAttentionMetadata``, and their real
``forward`` runs a prefill, a decode, a decode of three query tokens (a verify: the launch has two speculative
tokens) and a batch of a decode and a prefill. The tracer is installed as in a server, and the records are held
against the kit's vLLM plan of the same launch; the outputs against the kit's reference attention with the window
vLLM means (W keys).

What is patched, and why:

* aiter does not install off ROCm. The kit's float64 reference kernels stand in for the three aiter kernels vLLM
  calls, where vLLM looks them up: ``aiter.flash_attn_varlen_func`` and ``aiter.ops.triton.unified_attention`` are
  stand-in modules in ``sys.modules``, and ``paged_attention_v1`` is registered as the torch op
  ``torch.ops.aiter.paged_attention_v1`` with aiter's signature. Each reads its window argument in the kernel's own
  convention (the kit's converters in :mod:`swa_kit.window`).
* vLLM's own Triton kernels (``chunked_prefill_paged_decode`` in ``rocm_attn.py``, ``unified_attention`` in
  ``triton_attn.py``) need a GPU: the module globals the backends call are replaced by reference stand-ins before
  the tracer is installed (so the tracer wraps them as it wraps the real kernels).
* ``vllm/platforms/rocm.py`` reads the GPU's architecture at import (``_get_gcn_arch``: amdsmi, then
  ``torch.cuda.get_device_properties``). For that one import, ``torch.cuda.get_device_properties`` answers as an
  MI300X does (gfx942); the real module then serves ``on_gfx1250`` / ``on_gfx11``, which the unified backend asks.
  vLLM's current platform stays its CPU platform (tests/vllm_support.py), so the aiter switches read off (no
  shuffled KV layout, vLLM's default) and no Triton pointer-range hints are set.
* The KV cache is written by the test in the layout each ``forward`` splits it into, because vLLM's cache writers
  are compiled (``vllm._C``) or Triton ops; ``Attention`` layers are bare modules holding the impl and the scales
  ``forward`` reads (``Attention.__init__`` needs a whole ``VllmConfig`` and forward context); the builders get a
  ``vllm_config`` namespace holding the fields they read.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from vllm_support import import_rocm_platform, require_vllm

pytestmark = pytest.mark.vllm

(backend_api, kv_interface, attention_layer, aiter_fa, rocm_attn, triton_attn,
 triton_ops) = require_vllm(
    "vllm.v1.attention.backend", "vllm.v1.kv_cache_interface", "vllm.model_executor.layers.attention.attention",
    "vllm.v1.attention.backends.rocm_aiter_fa", "vllm.v1.attention.backends.rocm_attn",
    "vllm.v1.attention.backends.triton_attn", "vllm.v1.attention.ops.triton_unified_attention")

from swa_kit.attention.batch import AttentionBatch  # noqa: E402
from swa_kit.attention.reference import reference_attention  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.launch.vllm_plan import plan  # noqa: E402
from swa_kit.measure import trace, vllm_trace  # noqa: E402
from swa_kit.measure.vllm_audit import audit_vllm  # noqa: E402
from swa_kit.models.configs import load_hf_config  # noqa: E402
from swa_kit.window import to_keys  # noqa: E402

W = 128  # keys a sliding layer attends (the config's sliding_window)
HQ, HKV, D, BLOCK = 4, 2, 64, 16  # head_size 64: the smallest aiter's paged_attention_v1 (ll4mi) takes
SLIDING, FULL = 0, 3  # Cohere 2 with 4 layers: three sliding, then one full
SPEC = '{"method": "eagle3", "num_speculative_tokens": 2, "model": "draft"}'
BACKENDS = ("ROCM_AITER_FA", "ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN")


# -- the kit's reference kernels in the kernels' signatures ------------------------------------------------------


def _paged(q, k_tokens, v_tokens, cu_seqlens_q, seq_lens, block_table, scale, keys):
    """Reference attention over a paged cache given as token rows (slot = block * BLOCK + offset)."""
    lens = [int(n) for n in seq_lens]
    slots = torch.cat([block_table[b, torch.arange(n) // BLOCK].long() * BLOCK + torch.arange(n) % BLOCK
                       for b, n in enumerate(lens)])
    batch = AttentionBatch(q=q, k_buffer=k_tokens, v_buffer=v_tokens, qo_indptr=cu_seqlens_q.long(),
                           kv_indptr=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()]), kv_indices=slots,
                           sm_scale=scale)
    return reference_attention(batch, keys).out


def _tokens(cache):  # [blocks, BLOCK, Hkv, D] (what aiter's and vLLM's unified kernels take) -> token rows
    return cache.reshape(-1, cache.shape[-2], cache.shape[-1])


def aiter_unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
                            window_size, block_table, sinks=None, **unused):
    """aiter's Triton unified_attention: keeps q - k < 1 + window_size[0] (the ``aiter_unified`` convention)."""
    assert causal and sinks is None
    keys = to_keys("aiter_unified", tuple(window_size))
    out.copy_(_paged(q, _tokens(k), _tokens(v), cu_seqlens_q, seqused_k, block_table, softmax_scale, keys))


def vllm_triton_unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                                  causal, window_size, block_table, sinks=None, **unused):
    """vLLM's Triton unified_attention: ``SLIDING_WINDOW = 1 + window_size[0]``, masks ``dist < SLIDING_WINDOW``
    (vllm/v1/attention/ops/triton_unified_attention.py), i.e. aiter's reading of the pair."""
    aiter_unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                            causal, window_size, block_table, sinks)


def aiter_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, min_seqlen_q=None,
                                 dropout_p=0.0, softmax_scale=None, causal=False, window_size=None, alibi_slopes=None,
                                 return_lse=False, out=None, sink_ptr=None):
    """aiter's CK varlen prefill over contiguous K/V: FlashAttention's (left, right) pair, left + 1 keys."""
    assert causal and sink_ptr is None and not return_lse
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    batch = AttentionBatch(q=q, k_buffer=k, v_buffer=v, qo_indptr=cu_seqlens_q.long(),
                           kv_indptr=cu_seqlens_k.long(), kv_indices=torch.arange(sum(lens)), sm_scale=softmax_scale)
    out.copy_(reference_attention(batch, to_keys("flash_attn", tuple(window_size))).out)
    return out


def aiter_paged_attention_v1(out, workspace_buffer, query, key_cache, value_cache, scale, block_tables,
                             cu_query_lens, context_lens, max_context_len, alibi_slopes, kv_cache_dtype,
                             kv_cache_layout, logits_soft_cap, k_scale, v_scale, fp8_out_scale=None,
                             partition_size=256, mtp=1, sliding_window=0):
    """aiter's paged_attention_v1 (one query per sequence): ``sliding_window`` W keys, 0 off (``aiter_v1``)."""
    assert kv_cache_layout == "NHD" and mtp == 1
    keys = to_keys("aiter_v1", sliding_window)
    cu_q = torch.arange(len(context_lens) + 1)
    out.copy_(_paged(query, _tokens(key_cache), _tokens(value_cache), cu_q, context_lens, block_tables, scale, keys))


def chunked_prefill_paged_decode(query, key, value, output, kv_cache_dtype, key_cache, value_cache, block_table,
                                 query_start_loc, seq_lens, max_seq_len, max_query_len, k_scale, v_scale,
                                 alibi_slopes=None, sliding_window=None, sm_scale=None, sinks=None, causal=True,
                                 **unused):
    """vLLM's chunked_prefill_paged_decode on ROCM_ATTN's split cache (K ``[blocks, Hkv, D/x, BLOCK, x]``, V
    ``[blocks, Hkv, D, BLOCK]``): ``sliding_window`` W keys, <= 0 off."""
    assert causal and sinks is None
    keys = None if sliding_window is None or sliding_window <= 0 else sliding_window
    k_tokens = key_cache.permute(0, 3, 1, 2, 4).reshape(-1, HKV, D)
    v_tokens = value_cache.permute(0, 3, 1, 2).reshape(-1, HKV, D)
    output.copy_(_paged(query, k_tokens, v_tokens, query_start_loc, seq_lens, block_table, sm_scale, keys))


_AITER_LIBRARY = torch.library.Library("aiter", "FRAGMENT")  # kept alive: the op lives as long as the library
_AITER_LIBRARY.define(
    "paged_attention_v1(Tensor(a!) out, Tensor workspace_buffer, Tensor query, Tensor key_cache, Tensor value_cache, "
    "float scale, Tensor block_tables, Tensor? cu_query_lens, Tensor context_lens, int max_context_len, "
    "Tensor? alibi_slopes, str kv_cache_dtype, str kv_cache_layout, float logits_soft_cap, Tensor k_scale, "
    "Tensor v_scale, Tensor? fp8_out_scale=None, int partition_size=256, int mtp=1, int sliding_window=0) -> ()")
_AITER_LIBRARY.impl("paged_attention_v1", aiter_paged_attention_v1, "CPU")


# -- the launch, the backends, the batches --------------------------------------------------------------------


def _stand_in_aiter(patches: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("aiter")
    package.__path__ = []  # type: ignore[attr-defined]
    package.flash_attn_varlen_func = aiter_flash_attn_varlen_func  # type: ignore[attr-defined]
    unified = types.ModuleType("aiter.ops.triton.unified_attention")
    unified.unified_attention = aiter_unified_attention  # type: ignore[attr-defined]
    for name, module in (("aiter", package), ("aiter.ops", types.ModuleType("aiter.ops")),
                         ("aiter.ops.triton", types.ModuleType("aiter.ops.triton")),
                         ("aiter.ops.triton.unified_attention", unified)):
        patches.setitem(sys.modules, name, module)


def _real_rocm_platform_module() -> None:
    rocm = import_rocm_platform()
    assert rocm.on_gfx942() and not rocm.on_gfx1250()


@pytest.fixture(scope="module")
def stand_ins():
    patches = pytest.MonkeyPatch()
    _stand_in_aiter(patches)
    _real_rocm_platform_module()
    patches.setattr(rocm_attn, "chunked_prefill_paged_decode", chunked_prefill_paged_decode)
    patches.setattr(triton_attn, "unified_attention", vllm_triton_unified_attention)
    patches.setattr(triton_ops, "unified_attention", vllm_triton_unified_attention)
    unified_mod = importlib.import_module("vllm.v1.attention.backends.rocm_aiter_unified_attn")
    yield {"ROCM_AITER_FA": aiter_fa.AiterFlashAttentionBackend, "ROCM_ATTN": rocm_attn.RocmAttentionBackend,
           "ROCM_AITER_UNIFIED_ATTN": unified_mod.RocmAiterUnifiedAttentionBackend,
           "TRITON_ATTN": triton_attn.TritonAttentionBackend}
    patches.undo()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Cohere2Config

    folder = tmp_path_factory.mktemp("cohere2")
    Cohere2Config(hidden_size=HQ * D, num_attention_heads=HQ, num_key_value_heads=HKV, head_dim=D,
                  num_hidden_layers=4, sliding_window=W, intermediate_size=512, vocab_size=1000,
                  eos_token_id=2).save_pretrained(folder)
    return folder


def _vllm_plan(model_dir, backend: str):
    flags = parse_vllm_flags(f"--attention-backend {backend} --speculative-config '{SPEC}'")
    return plan(load_hf_config(model_dir), flags, {})


class Layer:
    """One layer: vLLM's impl and metadata builder (its own KV-cache group), its paged cache and its keys."""

    def __init__(self, backend_cls, index: int, window: int | None, num_blocks: int) -> None:
        impl = backend_cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, window, "auto")
        module = attention_layer.Attention.__new__(attention_layer.Attention)  # bare: see the module docstring
        torch.nn.Module.__init__(module)
        module.__dict__.update(layer_name=f"model.layers.{index}.self_attn.attn", impl=impl, num_heads=HQ,
                               kv_sharing_target_layer_name=None, kv_cache_update_bypass=False,
                               _k_scale=torch.ones(()), _v_scale=torch.ones(()), _q_scale=torch.ones(()),
                               _k_scale_float=1.0, _v_scale_float=1.0, _q_scale_float=1.0)
        shape = {"block_size": BLOCK, "num_kv_heads": HKV, "head_size": D, "dtype": torch.float32}
        spec = kv_interface.FullAttentionSpec(**shape) if window is None else \
            kv_interface.SlidingWindowSpec(**shape, sliding_window=window)
        config = SimpleNamespace(
            model_config=SimpleNamespace(get_num_attention_heads=lambda parallel: HQ, dtype=torch.float32,
                                         get_num_kv_heads=lambda parallel: HKV, get_head_size=lambda: D,
                                         rswa_window=None),
            parallel_config=SimpleNamespace(decode_context_parallel_size=1),
            cache_config=SimpleNamespace(cache_dtype="auto"),
            scheduler_config=SimpleNamespace(max_num_seqs=4, max_num_batched_tokens=1024),
            compilation_config=SimpleNamespace(static_forward_context={module.layer_name: module},
                                               cudagraph_mode=None, cudagraph_capture_sizes=[]),
            speculative_config=SimpleNamespace(num_speculative_tokens=2, max_num_new_slots_for_drafting=0,
                                               speculator_config=SimpleNamespace(parallel_drafting=False)))
        self.index, self.module, self.impl = index, module, impl
        self.builder = backend_cls.get_builder_cls()(spec, [module.layer_name], config, torch.device("cpu"))
        self.rocm_attn_layout = backend_cls.get_name() == "ROCM_ATTN"
        if self.rocm_attn_layout:  # logical [blocks, 2, BLOCK, Hkv * D], K/V planes first (PagedAttention)
            self.planes = torch.zeros(2, num_blocks, HKV * D * BLOCK)
            self.kv_cache = self.planes.transpose(0, 1)
        else:  # (blocks, Hkv, BLOCK, 2 * D): forward splits K and V off the last dim
            self.kv_cache = torch.zeros(num_blocks, HKV, BLOCK, 2 * D)

    def write(self, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        block, offset = divmod(slot, BLOCK)
        if self.rocm_attn_layout:
            x = 16 // self.planes.element_size()
            self.planes[0].view(-1, HKV, D // x, BLOCK, x)[block, :, :, offset] = k.view(HKV, D // x, x)
            self.planes[1].view(-1, HKV, D, BLOCK)[block, :, :, offset] = v
        else:
            self.kv_cache[block, :, offset, :D], self.kv_cache[block, :, offset, D:] = k, v


def _batch(layer: Layer, requests: tuple[tuple[int, int], ...]):
    """Requests of ``(q_len, seq_len)``: each ``seq_len`` keys, the last ``q_len`` of them new, in blocks from the
    pool. vLLM's common metadata, and each request's fresh K/V."""
    q_lens, seq_lens = [q for q, _ in requests], [n for _, n in requests]
    width = max(-(-n // BLOCK) for n in seq_lens)
    tables = [BLOCK_POOL[i * width:(i + 1) * width] for i in range(len(requests))]
    query_start = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    kv, new_slots = [], []
    for table, (q_len, seq_len) in zip(tables, requests):
        slots = [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len)]
        k, v = torch.randn(seq_len, HKV, D), torch.randn(seq_len, HKV, D)
        for slot, k_row, v_row in zip(slots, k, v):
            layer.write(slot, k_row, v_row)
        kv.append((k, v))
        new_slots += slots[-q_len:]
    common = backend_api.CommonAttentionMetadata(
        query_start_loc=query_start, query_start_loc_cpu=query_start, seq_lens=lens, num_reqs=len(requests),
        num_actual_tokens=sum(q_lens), max_query_len=max(q_lens), max_seq_len=max(seq_lens),
        block_table_tensor=torch.tensor(tables, dtype=torch.int32), slot_mapping=torch.tensor(new_slots),
        seq_lens_cpu_upper_bound=lens)
    return layer.builder.build(0, common), kv


def _run(layer: Layer, requests: tuple[tuple[int, int], ...]):
    """vLLM's forward for one batch; returns the output and the reference at the window vLLM means (W keys) and at
    one key fewer."""
    metadata, kv = _batch(layer, requests)
    q_lens, seq_lens = [q for q, _ in requests], [n for _, n in requests]
    query = torch.randn(sum(q_lens), HQ, D)
    out = torch.zeros(sum(q_lens), HQ, D)
    new_k = torch.cat([k[-q:] for (k, _), q in zip(kv, q_lens)])
    new_v = torch.cat([v[-q:] for (_, v), q in zip(kv, q_lens)])
    layer.impl.forward(layer.module, query, new_k, new_v, layer.kv_cache, metadata, out)
    meant = AttentionBatch(q=query, k_buffer=torch.cat([k for k, _ in kv]), v_buffer=torch.cat([v for _, v in kv]),
                           qo_indptr=metadata.query_start_loc.long(),
                           kv_indptr=torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()]),
                           kv_indices=torch.arange(sum(seq_lens)), sm_scale=D ** -0.5)
    window = None if layer.impl.sliding_window == (-1, -1) else W
    return out, reference_attention(meant, window).out, reference_attention(meant, window and W - 1).out


# Batches of (query tokens, keys) per request; every request longer than the window, so W - 1 and W keys differ.
# vLLM orders a batch's decodes first (the builders' reorder_batch_threshold).
STEPS = (("prefill", ((160, 160),)), ("decode", ((1, 200),)), ("verify", ((3, 203),)),
         ("decode+prefill", ((1, 200), (150, 150))))
NUM_BLOCKS = 40
BLOCK_POOL = [5, 17, 2, 30, 9, 23, 11, 36, 1, 27, 14, 33, 7, 20, 39, 3, 25, 12, 31, 8, 18, 0, 34, 22, 15, 29]


def _trace_launch(backends, backend: str, path):
    tracer = vllm_trace.install(path)  # before the impls are built: the unified impl binds aiter's kernel then
    outputs = []
    try:
        layers = [Layer(backends[backend], SLIDING, W, NUM_BLOCKS), Layer(backends[backend], FULL, None, NUM_BLOCKS)]
        for step, requests in STEPS:
            for layer in layers:
                outputs.append((step, layer.index, *_run(layer, requests)))
    finally:
        tracer.uninstall()
    return tracer, outputs


def _expected(backend: str, step: str, layer: int) -> list[tuple]:
    """The calls (mode, kernel, window argument, block table) ``backend`` makes for one layer in one step, read off
    vLLM 0.34's forward methods. ROCM_AITER_FA runs a batch's prefills, then its decodes, each through its own
    kernel; the other backends make one call per batch, which the tracer calls ``mixed`` when a query has several
    tokens (prefill or verify: the call does not tell them apart)."""
    pair = [W - 1, 0] if layer == SLIDING else [-1, -1]
    if backend != "ROCM_AITER_FA":
        kernel, arg = {"ROCM_ATTN": ("chunked_prefill_paged_decode", W if layer == SLIDING else 0),
                       "ROCM_AITER_UNIFIED_ATTN": ("aiter unified_attention", pair),
                       "TRITON_ATTN": ("vLLM Triton unified_attention", pair)}[backend]
        return [("decode" if step == "decode" else "mixed", kernel, arg, "full")]
    prefill = ("prefill", "aiter flash_attn_varlen_func", pair, None)
    decode = ("decode", "aiter paged_attention_v1", W, "window") if layer == SLIDING else \
        ("decode", "aiter paged_attention_v1", 0, "full")  # the sliding call is vLLM #28539's, fixed
    verify = ("verify", "aiter unified_attention", pair, "full")  # a multi-token decode: vLLM #31625's route
    return {"prefill": [prefill], "decode": [decode], "verify": [verify], "decode+prefill": [prefill, decode]}[step]


@pytest.mark.parametrize("backend", BACKENDS)
def test_trace_of_vllms_backend_matches_the_plan(stand_ins, model_dir, tmp_path, backend):
    tracer, outputs = _trace_launch(stand_ins, backend, tmp_path / "trace.jsonl")
    records = trace.read_records(tmp_path / "trace.jsonl", "vllm")
    assert [r.to_json() for r in records] == [r.to_json() for r in tracer.records]
    impl = stand_ins[backend].get_impl_cls().__name__
    assert [(r.mode, r.layer, r.kernel, r.window_arg, r.page_table) for r in records] == \
        [(mode, layer, kernel, arg, table) for step, _ in STEPS for layer in (SLIDING, FULL)
         for mode, kernel, arg, table in _expected(backend, step, layer)]
    assert {(r.sliding_window_size, r.method, r.engine) for r in records if r.layer == SLIDING} == \
        {(W - 1, f"{impl}.forward", "vllm")}
    trimmed = {tuple(r.page_table_shape) for r in records if r.page_table == "window"}
    # the builder's window-trimmed decode table: cdiv(W, BLOCK) + 1 blocks per request (_build_swa_decode_tables)
    assert trimmed == ({(1, W // BLOCK + 1)} if backend == "ROCM_AITER_FA" else set())

    vllm_plan = _vllm_plan(model_dir, backend)
    assert vllm_trace.compare(records, vllm_plan) == []  # (a) the calls vLLM made are the ones the kit plans
    findings = audit_vllm(vllm_plan, records).findings
    assert [(f.severity, f.title) for f in findings if f.where == "trace"] == \
        [("info", f"the trace agrees with the plan: {len(records)} kernel calls")]

    for step, layer, out, meant, one_short in outputs:  # (b) W keys, as vLLM means; W - 1 would differ
        torch.testing.assert_close(out.double(), meant, rtol=1e-5, atol=1e-5, msg=f"{backend} {step} layer {layer}")
        if layer == SLIDING:
            assert not torch.allclose(out.double(), one_short, rtol=1e-3, atol=1e-3)


def test_another_backends_trace_differs_from_the_plan(stand_ins, model_dir, tmp_path):
    """A trace of ROCM_ATTN held against a ROCM_AITER_FA launch: the backend, kernel and window form differ."""
    tracer, _ = _trace_launch(stand_ins, "ROCM_ATTN", None)
    findings = vllm_trace.compare(tracer.records, _vllm_plan(model_dir, "ROCM_AITER_FA"))
    decode = {(f.layer, f.field, json.dumps(f.traced), json.dumps(f.planned)) for f in findings if f.mode == "decode"}
    assert decode == {
        (SLIDING, "backend", '"ROCM_ATTN"', '"ROCM_AITER_FA"'), (FULL, "backend", '"ROCM_ATTN"', '"ROCM_AITER_FA"'),
        (SLIDING, "kernel", '"chunked_prefill_paged_decode"', '"aiter paged_attention_v1"'),
        (FULL, "kernel", '"chunked_prefill_paged_decode"', '"aiter paged_attention_v1"')}
    # Every call attends the keys its layer means (W, or all): the plan is off, the output is not.
    report = audit_vllm(_vllm_plan(model_dir, "ROCM_AITER_FA"), tracer.records)
    assert {(f.severity, f.title) for f in report.findings if f.where.startswith("trace")} == {
        ("info", f"the server attends {keys} as meant, but its {field} is not the planned one")
        for keys in ("all 128 keys", "every key") for field in ("backend", "kernel", "window_arg")}


def test_install_refuses_a_process_without_aiter(stand_ins, monkeypatch):
    for name in ("aiter", "aiter.ops", "aiter.ops.triton", "aiter.ops.triton.unified_attention"):
        monkeypatch.setitem(sys.modules, name, None)  # import aiter fails, as on any machine without ROCm
    ops = importlib.import_module("vllm._aiter_ops").rocm_aiter_ops
    def wrapped():
        return (vars(ops)["paged_attention_common"], torch.ops.aiter.paged_attention_v1,
                vars(aiter_fa.AiterFlashAttentionImpl)["forward"])

    held = wrapped()
    with pytest.raises(trace.UsageError, match="^aiter flash_attn_varlen_func, aiter unified_attention cannot be"):
        vllm_trace.install(None)  # the op registered above and vLLM's own kernels were found, and put back
    assert wrapped() == held
    assert isinstance(held[0], staticmethod)
