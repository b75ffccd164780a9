"""The tiny model: config checks, checkpoint loading, and serving through the pools == the dense forward."""

from __future__ import annotations


import pytest
import torch

from swa_kit.errors import ModelConfigError
from swa_kit.model import Server, TinyConfig, build_models, load_models, tiny_model_spec

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


def test_shipped_checkpoint_predicts_the_corpus() -> None:
    # Its load time (target: under a second) is printed by benchmarks/spec_demo.py, not asserted here.
    models = load_models()
    cfg = models.cfg
    assert cfg.layer_types.count("sliding") >= 1 and cfg.max_window <= 64
    text = "story 5. mara the fox lives by the river. mara has 4 red hats. one day mara meets tobi the owl."
    ids = torch.tensor([cfg.encode(text)])
    logits, _, _ = models.target.dense_forward(ids)
    accuracy = (logits[0, :-1].argmax(-1) == ids[0, 1:]).double().mean().item()
    assert accuracy > 0.6, f"the trained target should predict its corpus, got accuracy {accuracy:.2f}"


@pytest.mark.parametrize("kwargs, match", [
    ({"windows": (16, None, 16)}, "one window per layer"),
    ({"windows": (16, 16, 16, None)}, "full layer needs window None"),
    ({"layer_types": ("sliding",) * 4, "windows": (16,) * 4}, "at least one sliding and one full"),
    ({"layer_types": ("sliding", "full", "local", "full")}, "not one of"),
    ({"windows": (0, None, 16, None)}, "at least itself"),
])
def test_bad_configs_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises((ModelConfigError, ValueError), match=match):
        TinyConfig(vocab=VOCAB, **kwargs)


def test_dispatch_needs_one_window_and_vocab_is_checked() -> None:
    with pytest.raises(ModelConfigError, match="one window per model"):
        tiny_model_spec(TinyConfig(vocab=VOCAB, windows=(16, None, 24, None)))
    with pytest.raises(ModelConfigError, match="not in the model's vocabulary"):
        TinyConfig(vocab=VOCAB).encode("Story!")
