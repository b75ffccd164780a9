"""Random traffic over many requests (page_size 1 and > 1): after every step, no slot leaked, freed twice or
handed out twice; the full->SWA mapping says exactly which tokens hold SWA slots; free sizes are exact.

The oracle is rebuilt from the requests alone (their rows and eviction cursors), never from the
allocator's own books, and compared with the allocator's free lists, live flags and mapping.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from swa_kit.errors import PoolExhaustedError, SlotError
from swa_kit.engine.eviction import RequestTable
from swa_kit.engine.pools import ReqToTokenPool, SWAKVPool, SWATokenToKVPoolAllocator
from swa_kit.window import Window

F32 = torch.float32
MAX_CTX = 48


class PoolTraffic(RuleBasedStateMachine):
    @initialize(page_size=st.sampled_from([1, 2, 4]), full_pages=st.integers(8, 40), swa_pages=st.integers(3, 20),
                keys=st.integers(1, 10), need_sort=st.booleans())
    def setup(self, page_size: int, full_pages: int, swa_pages: int, keys: int, need_sort: bool) -> None:
        self.ps = page_size
        size, size_swa = full_pages * page_size, swa_pages * page_size
        self.pool = SWAKVPool(size, size_swa, page_size, F32, 1, 2, [0], [1], "cpu")
        self.alloc = SWATokenToKVPoolAllocator(size, size_swa, page_size, F32, "cpu", self.pool, need_sort)
        self.table = RequestTable(ReqToTokenPool(6, MAX_CTX, "cpu"), self.alloc)
        self.window = Window(keys)
        self.next_rid = 0
        self.q_floor: dict[int, int] = {}  # oldest pending query per request: commits only move forward

    # -- rules ------------------------------------------------------------------------------------------------------

    @rule(n=st.integers(1, 20), protect=st.booleans())
    def prefill(self, n: int, protect: bool) -> None:
        protected = (n // 2) // self.ps * self.ps if protect else 0
        try:
            self.table.prefill({self.next_rid: n}, {self.next_rid: protected})
            self.q_floor[self.next_rid] = 0
        except PoolExhaustedError:
            pass
        self.next_rid += 1

    @precondition(lambda self: self.table.reqs)
    @rule(data=st.data())
    def extend(self, data) -> None:
        rids = data.draw(st.lists(st.sampled_from(sorted(self.table.reqs)), min_size=1, max_size=4, unique=True))
        lens = {r: data.draw(st.integers(0, 6)) for r in rids if self.table.seq_len(r) + 6 <= MAX_CTX}
        if lens:
            try:
                self.table.extend(lens)
            except PoolExhaustedError:
                pass

    @precondition(lambda self: self.table.reqs)
    @rule(data=st.data())
    def decode(self, data) -> None:
        rids = data.draw(st.lists(st.sampled_from(sorted(self.table.reqs)), min_size=1, max_size=5, unique=True))
        rids = [r for r in rids if self.table.seq_len(r) < MAX_CTX]
        if rids:
            try:
                self.table.decode(rids)
            except PoolExhaustedError:
                pass

    @precondition(lambda self: self.table.reqs)
    @rule(data=st.data(), page_slack=st.booleans())
    def evict(self, data, page_slack: bool) -> None:
        drafts = {}
        for rid in self.table.reqs:
            n = self.table.seq_len(rid)
            drafts[rid] = data.draw(st.integers(0, min(3, n - self.q_floor[rid])))
            self.q_floor[rid] = n - drafts[rid]
        self.table.evict(self.window, page_slack=page_slack, num_draft_tokens=drafts)

    @precondition(lambda self: self.table.reqs)
    @rule(data=st.data())
    def finish(self, data) -> None:
        rid = data.draw(st.sampled_from(sorted(self.table.reqs)))
        ids = self.table.get_kv_indices(rid)
        self.table.finish(rid)
        del self.q_floor[rid]
        if ids.numel():  # a second free of the same slots is refused, and changes nothing
            before = (self.alloc.full_available_size(), self.alloc.swa_available_size())
            with pytest.raises(SlotError):
                self.alloc.free(ids[:1])
            assert before == (self.alloc.full_available_size(), self.alloc.swa_available_size())

    # -- the oracle -------------------------------------------------------------------------------------------------

    @invariant()
    def books_balance(self) -> None:
        ps, alloc, mapping = self.ps, self.alloc, self.alloc.full_to_swa_index_mapping
        full_held, swa_held = [], []
        for req in self.table.reqs.values():
            row = self.table.get_kv_indices(req.rid)
            full_held.append(row)
            dead = torch.zeros(row.numel(), dtype=torch.bool)
            if req.swa_evicted_seqlen > req.cache_protected_len:
                dead[req.cache_protected_len: req.swa_evicted_seqlen] = True
            swa = mapping[row]
            assert bool((swa[dead] == 0).all()) and bool((swa[~dead] > 0).all())
            swa_held.append(swa[~dead])
            # the window is intact: every key the oldest pending query reads still has its SWA slot
            q = self.q_floor[req.rid]
            read = self.window.attends(q, torch.arange(row.numel())) | (torch.arange(row.numel()) >= q)
            assert not bool((dead & read).any())
        full = torch.cat(full_held) if full_held else torch.empty(0, dtype=torch.int64)
        swa = torch.cat(swa_held) if swa_held else torch.empty(0, dtype=torch.int64)
        # handed out once: no slot in two places
        assert full.unique().numel() == full.numel() and swa.unique().numel() == swa.numel()
        assert bool((full > 0).all())
        # mapping nonzero exactly on full slots whose SWA slot is live; trailing sentinel intact
        nonzero = torch.nonzero(mapping[:-1]).reshape(-1)
        assert torch.equal(torch.sort(nonzero).values, torch.sort(full[mapping[full] > 0]).values)
        assert int(mapping[-1]) == -1
        for sub, held in ((alloc.full_attn_allocator, full), (alloc.swa_attn_allocator, swa)):
            pages = torch.unique(held // ps)
            live = torch.zeros(sub.num_pages + 1, dtype=torch.bool)
            live[pages] = True
            assert torch.equal(sub.ledger.live, live)  # nothing leaked, nothing freed while held
            free = (sub.get_all_free_pages() if ps > 1 else torch.cat((sub.free_pages, sub.release_pages)))
            assert free.unique().numel() == free.numel()  # no page on the free list twice
            expected_free = torch.nonzero(~live[1:]).reshape(-1) + 1
            assert torch.equal(torch.sort(free).values, expected_free)  # never the dummy page 0
            assert sub.available_size() == expected_free.numel() * ps
        assert alloc.available_size() == min(alloc.full_available_size(), alloc.swa_available_size())


PoolTraffic.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
TestPoolTraffic = PoolTraffic.TestCase
