"""Serving the tiny model through the pools: equal to the dense forward, and each step of a layer's attention."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from swa_kit.errors import DispatchGuardError, ModelConfigError
from swa_kit.lessons.tiny_model import TinyConfig, build_models
from swa_kit.lessons.serving import Server, tiny_model_spec

VOCAB = "\n ,.0123456789abcdefghijklmnopqrstuvwxyz"


def _random_models(seed: int):
    torch.manual_seed(seed)
    models = build_models(TinyConfig(vocab=VOCAB)).to(torch.float64)
    for m in (models.target, models.eagle, models.mtp):
        m.eval().requires_grad_(False)
    return models


@pytest.mark.parametrize("seed", [0, 1])
def test_serving_through_pools_equals_dense_forward_after_eviction(seed: int) -> None:
    models = _random_models(seed)
    cfg = models.cfg
    gen = torch.Generator().manual_seed(100 + seed)
    tokens = torch.randint(0, len(VOCAB), (2, 70), generator=gen)
    server = Server(models, "none", "fixed", max_requests=2, max_context_len=80)
    reqs = [server.add_request(tokens[b, :12].tolist()) for b in range(2)]
    for r in reqs:
        server.reserve(r, 0, 12)
    hidden = [h for h in server.target_forward(reqs, [tokens[b, :12].tolist() for b in range(2)], "prefill")
              .split(12)]
    for r in reqs:
        r.kv_len = 12
    pos = 12
    while pos < 70:  # decode steps, then multi-token extend chunks, evicting as it goes
        step = 1 if pos < 40 else 5
        mode = "decode" if step == 1 else "extend"
        for r in reqs:
            server.evict(r)
            server.reserve(r, pos, step)
        out = server.target_forward(reqs, [tokens[b, pos:pos + step].tolist() for b in range(2)], mode)
        for b, r in enumerate(reqs):
            hidden[b] = torch.cat([hidden[b], out[b * step:(b + 1) * step]])
            r.kv_len += step
        pos += step
    mapping = server.workers.target.token_to_kv_pool.translate_loc_from_full_to_swa(
        server.req_to_token[reqs[0].row, :70].to(torch.int64))
    assert (mapping[: 70 - 5 - cfg.max_window] == 0).all(), "old tokens' SWA slots must have been freed"
    assert (mapping[70 - cfg.max_window:] > 0).all()
    _, dense, _ = models.target.dense_forward(tokens)
    for b in range(2):
        torch.testing.assert_close(hidden[b], dense[b], rtol=0, atol=1e-10)
    assert server.guards_seen == []


def test_serving_with_a_wrong_window_differs_from_dense() -> None:
    # The comparison above can fail: the dense forward without windows is a different function.
    models = _random_models(3)
    tokens = torch.randint(0, len(VOCAB), (1, 40), generator=torch.Generator().manual_seed(3))
    _, windowed, _ = models.target.dense_forward(tokens)
    _, unwindowed, _ = models.target.dense_forward(tokens, window_override={i: None for i in range(4)})
    assert torch.allclose(windowed[:, :16], unwindowed[:, :16], atol=1e-12)
    assert (windowed[:, 16:] - unwindowed[:, 16:]).abs().max() > 1e-3


def test_dispatch_needs_one_window() -> None:
    with pytest.raises(ModelConfigError, match="one window per model"):
        tiny_model_spec(TinyConfig(vocab=VOCAB, windows=(16, None, 24, None)))


def test_check_route_refuses_a_page_table_the_resolver_does_not_give() -> None:
    server = Server(_random_models(0), "none", "fixed", max_requests=1, max_context_len=32)
    entry = server.route("target", "decode", 0)  # layer 0 is sliding: the fixed resolver translates it
    swa_kv_pool = server.swa_kv_pool("target", True)
    assert entry.page_table == "swa" and swa_kv_pool is server.workers.target.token_to_kv_pool
    assert server.swa_kv_pool("target", False) is None
    server.check_route("target", 0, entry, swa_kv_pool)
    with pytest.raises(DispatchGuardError, match="fixed resolver says page table full but dispatch planned 'swa'"):
        server.check_route("target", 0, entry, None)
    with pytest.raises(DispatchGuardError, match="says page table swa but dispatch planned 'full'"):
        server.check_route("target", 0, replace(entry, page_table="full"), swa_kv_pool)


@pytest.mark.parametrize("enforce", [True, False])
def test_a_guarded_route_raises_or_is_recorded_once(enforce: bool) -> None:
    server = Server(_random_models(0), "none", "fixed", max_requests=1, max_context_len=32, enforce_guards=enforce,
                    layer_sites={0: "decode.paged"})
    entry = server.route("target", "decode", 0)
    assert entry.site == "decode.paged" and entry.guard
    assert server.route("target", "prefill", 0).site != "decode.paged"  # prefill never reaches that site
    swa_kv_pool = server.swa_kv_pool("target", True)
    if enforce:
        with pytest.raises(DispatchGuardError, match="paged_attention_ragged"):
            server.check_route("target", 0, entry, swa_kv_pool)
        return
    for _ in range(2):
        server.check_route("target", 0, entry, swa_kv_pool)
    assert server.guards_seen == [entry.guard]
