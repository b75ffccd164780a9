"""The kit's resolvers on SGLang's own classes.

CI runs it in a venv holding SGLang 0.5.23 (``.ci/run``); there it fails when SGLang does not import
(``SWA_KIT_REQUIRE_SGLANG=1``), elsewhere it skips saying why. The aiter, trtllm_mha and flashinfer backend modules all
import on a CPU, so each one's ``_resolve_swa_kv_pool`` is compared, none skipped.

It builds a real ``SWAKVPool`` + ``SWATokenToKVPoolAllocator`` and plain
``MHATokenToKVPool`` drafts on the CPU, wires target and draft runners the way SGLang
does, and checks (1) the kit's resolvers treat SGLang's pools as SWA pools by duck
typing, (2) the fixed resolver agrees with SGLang's own ``_resolve_swa_kv_pool`` of every
backend, (3) ``SpeculativeAlgorithm.is_eagle()`` agrees, and (4) the
mapping sentinel and ``free_swa`` behave as the kit's pools do.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang_support import require_sglang

BACKENDS = {"AiterAttnBackend": "sglang.srt.layers.attention.aiter_backend",
            "TRTLLMHAAttnBackend": "sglang.srt.layers.attention.trtllm_mha_backend",
            "FlashInferAttnBackend": "sglang.srt.layers.attention.flashinfer_backend"}
KIT_BACKEND = {"AiterAttnBackend": "aiter", "TRTLLMHAAttnBackend": "trtllm_mha", "FlashInferAttnBackend": "flashinfer"}
swa_memory_pool, memory_pool, swa_allocator, spec_info, dsv4_pool, unified_pool, *backend_modules = require_sglang(
    "sglang.srt.mem_cache.swa_memory_pool", "sglang.srt.mem_cache.memory_pool", "sglang.srt.mem_cache.allocator.swa",
    "sglang.srt.speculative.spec_info", "sglang.srt.mem_cache.deepseek_v4_memory_pool",
    "sglang.srt.mem_cache.unified_memory_pool", *BACKENDS.values())

from swa_kit.engine.resolver import (
    RESOLVERS,
    is_swa_pool,
    legacy_resolve_swa_kv_pool,
    naive_resolve_swa_kv_pool,
    resolve_swa_kv_pool,
)
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm

pytestmark = pytest.mark.sglang
SG = spec_info.SpeculativeAlgorithm
SIZE, SIZE_SWA, HEADS, DIM = 32, 8, 2, 8
SWA_LAYERS, FULL_LAYERS = [0, 1, 3, 4], [2, 5]


def _mha(size: int, layers: int):
    return memory_pool.MHATokenToKVPool(size=size, page_size=1, dtype=torch.float32, head_num=HEADS, head_dim=DIM,
                                        layer_num=layers, device="cpu", enable_memory_saver=False)


def _target_pools():
    pool = swa_memory_pool.SWAKVPool(size=SIZE, size_swa=SIZE_SWA, page_size=1, dtype=torch.float32,
                                     head_num=HEADS, head_dim=DIM, swa_attention_layer_ids=SWA_LAYERS,
                                     full_attention_layer_ids=FULL_LAYERS, device="cpu")
    allocator = swa_allocator.SWATokenToKVPoolAllocator(SIZE, SIZE_SWA, 1, torch.float32, "cpu", pool, False)
    return pool, allocator


def _runners(algo_name: str):
    pool, allocator = _target_pools()
    algo = SG.from_string(algo_name)
    target = SimpleNamespace(token_to_kv_pool=pool, token_to_kv_pool_allocator=allocator, is_draft_worker=False,
                             spec_algorithm=algo)
    draft_pool = _mha(64 if algo.is_frozen_kv_mtp() else SIZE, 1)
    draft = SimpleNamespace(token_to_kv_pool=draft_pool, token_to_kv_pool_allocator=allocator,
                            is_draft_worker=True, spec_algorithm=algo)
    return pool, target, draft


def _sglang_resolvers():
    """Every backend's own ``_resolve_swa_kv_pool`` (each module imported above, or the module failed)."""
    return {cls: getattr(module, cls)._resolve_swa_kv_pool for cls, module in zip(BACKENDS, backend_modules)}


def test_sglang_pool_is_recognised_by_duck_typing():
    pool, _ = _target_pools()
    assert is_swa_pool(pool) and pool.swa_layer_nums == len(SWA_LAYERS)
    assert not is_swa_pool(_mha(SIZE, 2))


@pytest.mark.parametrize("algo", ["EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP"])
def test_resolvers_on_sglang_runners(algo):
    pool, target, draft = _runners(algo)
    for resolver in RESOLVERS.values():
        assert resolver(target) is pool
    assert legacy_resolve_swa_kv_pool(draft) is None
    assert naive_resolve_swa_kv_pool(draft) is pool
    assert resolve_swa_kv_pool(draft) is (pool if algo == "FROZEN_KV_MTP" else None)
    resolvers = _sglang_resolvers()
    assert len(resolvers) == len(BACKENDS)
    for name, theirs in resolvers.items():
        assert theirs(target) is resolve_swa_kv_pool(target), name
        assert theirs(draft) is resolve_swa_kv_pool(draft), name


def test_is_eagle_agrees():
    for ours in SpeculativeAlgorithm:
        theirs = SG[ours.name]
        assert ours.is_eagle() == theirs.is_eagle(), ours
        assert ours.is_frozen_kv_mtp() == theirs.is_frozen_kv_mtp(), ours
        assert ours.is_none() == theirs.is_none(), ours


def test_mapping_sentinel_and_free_swa():
    pool, allocator = _target_pools()
    ids = allocator.alloc(5)
    assert pool.translate_loc_from_full_to_swa(torch.tensor([-1])).tolist() == [-1]
    swa = pool.translate_loc_from_full_to_swa(ids)
    assert bool((swa > 0).all())
    allocator.free_swa(ids[:3])
    assert pool.translate_loc_from_full_to_swa(ids[:3]).tolist() == [0, 0, 0]  # back to the dummy slot
    assert allocator.full_available_size() == SIZE - 5 and allocator.swa_available_size() == SIZE_SWA - 2


def _bare(cls):
    """An instance of SGLang's ``cls`` without its constructor (which allocates GPU-sized buffers): the
    resolvers only isinstance-check it."""
    return object.__new__(cls)


@pytest.mark.parametrize("pool_class", ["DeepSeekV4TokenToKVPool", "UnifiedSWAKVPool", "SWAKVPool"])
@pytest.mark.parametrize("where", ["active", "allocator"])
@pytest.mark.parametrize("algo", ["NONE", "EAGLE", "FROZEN_KV_MTP"])
def test_each_backends_predicate_on_sglangs_pool_classes(pool_class, where, algo):
    """A pool that subclasses only BaseSWAKVPool (DeepSeek-V4's) resolves on FlashInfer, not on aiter or trtllm_mha;
    the unified pool subclasses SWAKVPool and resolves on all three. The kit's backend resolver agrees with each."""
    module = {"DeepSeekV4TokenToKVPool": dsv4_pool, "UnifiedSWAKVPool": unified_pool}.get(pool_class, swa_memory_pool)
    pool = _bare(getattr(module, pool_class))
    plain = _mha(SIZE, 1)
    sg_algo = SG.from_string(None if algo == "NONE" else algo)
    for is_draft in (False, True):
        runner = SimpleNamespace(token_to_kv_pool=pool if where == "active" else plain, is_draft_worker=is_draft,
                                 spec_algorithm=sg_algo, token_to_kv_pool_allocator=SimpleNamespace(
                                     get_kvcache=lambda: pool if where == "allocator" else plain))
        answers = {}
        for name, theirs in _sglang_resolvers().items():
            answers[name] = theirs(runner)
            assert resolve_swa_kv_pool(runner, KIT_BACKEND[name]) is answers[name], (name, is_draft)
        if pool_class == "DeepSeekV4TokenToKVPool" and answers["FlashInferAttnBackend"] is pool:
            assert answers["AiterAttnBackend"] is answers["TRTLLMHAAttnBackend"] is None
