"""The tiny model: config checks and checkpoint loading (serving it through the pools: test_serving.py)."""

from __future__ import annotations

import pytest
import torch

from swa_kit.errors import ModelConfigError
from swa_kit.lessons.tiny_model import TinyConfig, load_models

VOCAB = "\n ,.0123456789abcdefghijklmnopqrstuvwxyz"


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


def test_vocab_is_checked() -> None:
    with pytest.raises(ModelConfigError, match="not in the model's vocabulary"):
        TinyConfig(vocab=VOCAB).encode("Story!")
