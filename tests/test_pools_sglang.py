"""The kit's pools beside SGLang's own classes: same calls, same slots, same mapping, same free sizes.

CI runs it in a venv holding SGLang 0.5.23 and its CPU-importable dependencies (``.ci/run``,
``pip install -e '.[sglang]'``); there it fails when SGLang does not import (``SWA_KIT_REQUIRE_SGLANG=1``), elsewhere
it skips saying why.

SGLang is imported with any installed ``aiter`` hidden (``import aiter`` needs ROCm and raises
RuntimeError elsewhere), and this module turns off SGLang's Triton allocator kernels
(``use_triton_kernels = False``) so its paged allocator runs the
torch fallback (``alloc_extend_naive`` / ``alloc_decode_naive``) on CPU tensors.

Random request traffic (prefill, extend, decode, out-of-window eviction with drafts and
page slack, finish, and finish through SGLang's own ``free_kv_row_segments``, which hands the
row, cut into random page-aligned runs, to ``free_full_segments`` / ``free_segments``) is driven through the kit's
:class:`~swa_kit.engine.eviction.RequestTable`
over both stacks; after every step the returned slots, ``req_to_token``, the full->SWA
mapping, the free lists and every available size must agree.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
import torch
from sglang_support import require_sglang

from swa_kit.engine import pools as kit
from swa_kit.errors import PoolExhaustedError
from swa_kit.engine.eviction import RequestTable

pytestmark = pytest.mark.sglang


_swa_alloc, _pool, _swa_pool, _common = require_sglang(
    "sglang.srt.mem_cache.allocator.swa", "sglang.srt.mem_cache.memory_pool", "sglang.srt.mem_cache.swa_memory_pool",
    "sglang.srt.mem_cache.common")
SgAllocator, SgKVWriteLoc, SgReqToTokenPool, SgSWAKVPool = (_swa_alloc.SWATokenToKVPoolAllocator, _pool.KVWriteLoc,
                                                            _pool.ReqToTokenPool, _swa_pool.SWAKVPool)
sg_free_kv_row_segments = _common.free_kv_row_segments

F32 = torch.float32
SWA_LAYERS, FULL_LAYERS = [0, 2, 3], [1]


def build(page_size: int, size: int, size_swa: int, need_sort: bool):
    kpool = kit.SWAKVPool(size, size_swa, page_size, F32, 2, 4, SWA_LAYERS, FULL_LAYERS, "cpu")
    kalloc = kit.SWATokenToKVPoolAllocator(size, size_swa, page_size, F32, "cpu", kpool, need_sort)
    spool = SgSWAKVPool(size=size, size_swa=size_swa, page_size=page_size, dtype=F32, head_num=2, head_dim=4,
                        swa_attention_layer_ids=SWA_LAYERS, full_attention_layer_ids=FULL_LAYERS, device="cpu",
                        enable_memory_saver=False)
    salloc = SgAllocator(size, size_swa, page_size, F32, "cpu", spool, need_sort)
    for sub in (salloc.full_attn_allocator, salloc.swa_attn_allocator):
        if hasattr(sub, "use_triton_kernels"):
            sub.use_triton_kernels = False
    ktable = RequestTable(kit.ReqToTokenPool(6, 64, "cpu"), kalloc)
    stable = RequestTable(SgReqToTokenPool(6, 64, "cpu", False), salloc)
    return ktable, stable


def free_list(sub) -> list[int]:
    pages = sub.get_all_free_pages() if hasattr(sub, "staged_pages") else torch.cat((sub.free_pages,
                                                                                     sub.release_pages))
    return pages.tolist()


def assert_same(kt: RequestTable, st: RequestTable) -> None:
    ka, sa = kt.token_to_kv_pool_allocator, st.token_to_kv_pool_allocator
    assert torch.equal(ka.full_to_swa_index_mapping, sa.full_to_swa_index_mapping)
    assert (ka.available_size(), ka.full_available_size(), ka.swa_available_size()) == \
        (sa.available_size(), sa.full_available_size(), sa.swa_available_size())
    assert free_list(ka.full_attn_allocator) == free_list(sa.full_attn_allocator)
    assert free_list(ka.swa_attn_allocator) == free_list(sa.swa_attn_allocator)
    assert torch.equal(kt.req_to_token_pool.req_to_token, st.req_to_token_pool.req_to_token)
    assert kt.req_to_token_pool.free_slots == st.req_to_token_pool.free_slots


def both(kt, st, op, *args, **kwargs):
    """Run one RequestTable operation on both stacks; they must return or run dry alike."""
    outcome = []
    for table in (kt, st):
        try:
            outcome.append(("ok", getattr(table, op)(*args, **kwargs)))
        except PoolExhaustedError:
            outcome.append(("exhausted", None))
    (k_kind, k_val), (s_kind, s_val) = outcome
    assert k_kind == s_kind, f"{op}: kit {k_kind}, SGLang {s_kind}"
    if k_kind == "ok" and isinstance(k_val, dict):
        assert list(k_val) == list(s_val)
        for rid in k_val:
            kv, sv = k_val[rid], s_val[rid]
            if isinstance(kv, torch.Tensor):
                assert kv.tolist() == sv.tolist(), f"{op} {rid}"
            else:
                assert (kv.start, kv.end, kv.full_slots.tolist(), kv.swa_slots.tolist()) == \
                    (sv.start, sv.end, sv.full_slots.tolist(), sv.swa_slots.tolist())


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("need_sort", [False, True])
def test_random_traffic_matches_sglang(page_size: int, need_sort: bool):
    for _ in range(12):
        seed = random.getrandbits(32)  # fresh traffic every run; the seed is in any failure message
        try:
            _run_traffic(random.Random(seed), page_size, need_sort)
        except AssertionError as err:
            raise AssertionError(f"seed {seed}: {err}") from err


def _run_traffic(rng: random.Random, page_size: int, need_sort: bool) -> None:
    size, size_swa = page_size * rng.randint(12, 30), page_size * rng.randint(6, 14)
    kt, st = build(page_size, size, size_swa, need_sort)
    window = rng.randint(1, 12)
    next_rid = 0
    for _ in range(60):
        live = list(kt.reqs)
        op = rng.choice(["prefill", "extend", "decode", "decode", "evict", "finish", "finish_segments"])
        if op == "prefill" and len(live) < 5:
            n = rng.randint(1, 14)
            protected = rng.choice([0, page_size * (n // page_size // 2)])
            both(kt, st, "prefill", {next_rid: n}, {next_rid: protected})
            next_rid += 1
        elif op == "extend" and live:
            rids = rng.sample(live, rng.randint(1, len(live)))
            lens = {r: rng.randint(0, 6) for r in rids if kt.seq_len(r) + 6 <= 64}
            if lens:
                both(kt, st, "extend", lens)
        elif op == "decode" and live:
            rids = [r for r in rng.sample(live, rng.randint(1, len(live))) if kt.seq_len(r) < 64]
            ka = kt.token_to_kv_pool_allocator
            need = kit.get_num_new_pages(torch.tensor([kt.seq_len(r) + 1 for r in rids]), page_size,
                                         decode=True)
            # SGLang's alloc_decode takes full pages before finding the SWA side short (and leaks them).
            if rids and (page_size == 1 or ka.new_pages_available(need, need)):
                both(kt, st, "decode", rids)
        elif op == "evict" and live:
            drafts = {r: rng.randint(0, min(3, kt.seq_len(r))) for r in live}
            both(kt, st, "evict", window, page_slack=rng.random() < 0.5, num_draft_tokens=drafts)
        elif op == "finish" and live:
            both(kt, st, "finish", rng.choice(live))
        elif op == "finish_segments" and live:
            rid = rng.choice(live)
            segments = row_segments(kt, rid, rng)
            for table in (kt, st):
                finish_by_segments(table, rid, segments)
        assert_same(kt, st)


def row_segments(table: RequestTable, rid, rng: random.Random) -> list[tuple[torch.Tensor, int]]:
    """A request's row cut at random page boundaries into ``(kv_indices, start_pos)`` runs (a radix cache hands
    rows back in such pieces)."""
    row, ps = table.get_kv_indices(rid), table.page_size
    cuts = sorted({rng.randrange(row.numel() + 1) // ps * ps for _ in range(rng.randint(0, 3))} | {0, row.numel()})
    return [(row[a:b], a) for a, b in pairwise(cuts) if b > a]


def finish_by_segments(table: RequestTable, rid, segments: list[tuple[torch.Tensor, int]]) -> None:
    """Finish a request as SGLang's scheduler does: its row through free_kv_row_segments, then its row slot."""
    req = table.req(rid)
    sg_free_kv_row_segments(table.token_to_kv_pool_allocator, segments, swa_evicted_seqlen=req.swa_evicted_seqlen,
                            swa_dead_lo=req.cache_protected_len)
    table.req_to_token_pool.free_rows([req.req_pool_idx])
    del table.reqs[rid]


class Layer:
    def __init__(self, layer_id: int) -> None:
        self.layer_id = layer_id


@pytest.mark.parametrize("page_size", [1, 4])
def test_kv_writes_land_where_sglang_puts_them(page_size: int):
    kt, st = build(page_size, 64, 32, False)
    both(kt, st, "prefill", {0: 9, 1: 5})
    for _ in range(4):
        both(kt, st, "decode", [0, 1])
    both(kt, st, "evict", 4)
    kpool, spool = kt.token_to_kv_pool_allocator.get_kvcache(), st.token_to_kv_pool_allocator.get_kvcache()
    for rid in (0, 1):
        loc = kt.get_kv_indices(rid)[-4:]
        swa_loc = kpool.translate_loc_from_full_to_swa(loc)
        assert torch.equal(swa_loc, spool.translate_loc_from_full_to_swa(loc))
        for layer_id in SWA_LAYERS + FULL_LAYERS:
            assert torch.equal(kt.get_kv_indices(rid, layer_id), st.get_kv_indices(rid, layer_id))
            k, v = torch.randn(4, 2, 4), torch.randn(4, 2, 4)
            kpool.set_kv_buffer(Layer(layer_id), kit.KVWriteLoc(loc, swa_loc=swa_loc), k, v)
            spool.set_kv_buffer(Layer(layer_id), SgKVWriteLoc(loc, swa_loc=swa_loc), k.clone(), v.clone())
    for layer_id in SWA_LAYERS + FULL_LAYERS:
        assert torch.equal(kpool.get_key_buffer(layer_id), spool.get_key_buffer(layer_id))
        assert torch.equal(kpool.get_value_buffer(layer_id), spool.get_value_buffer(layer_id))
    assert kpool.layers_mapping == spool.layers_mapping
    assert (kpool.swa_layer_nums, kpool.full_layer_nums) == (spool.swa_layer_nums, spool.full_layer_nums)
