"""swa_kit.budget: sizes, limits and the one-line refusal."""

from __future__ import annotations

import pytest

from swa_kit import budget
from swa_kit.errors import BudgetError


@pytest.mark.parametrize("text, want", [("8GiB", 8 << 30), ("512M", 512 << 20), ("1000", 1000), ("1.5k", 1536),
                                        (" 2 TiB ", 2 << 40)])
def test_parse_size(text, want):
    assert budget.parse_size(text) == want


@pytest.mark.parametrize("text", ["", "x", "-1G", "0", "8 parsecs", "1e3G"])
def test_parse_size_refuses_in_one_line(text):
    with pytest.raises(BudgetError, match="cannot read memory size"):
        budget.parse_size(text)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x", ""])
def test_parse_seconds_refuses(text):
    with pytest.raises(BudgetError):
        budget.parse_seconds(text)


def test_default_limits_follow_the_machine_and_the_environment(monkeypatch):
    monkeypatch.delenv(budget.MEMORY_ENV, raising=False)
    monkeypatch.delenv(budget.SECONDS_ENV, raising=False)
    assert budget.memory_limit() == int(budget.machine_memory() * budget.MEMORY_SHARE) > 0
    assert budget.seconds_limit() == budget.DEFAULT_SECONDS
    monkeypatch.setenv(budget.MEMORY_ENV, "3GiB")
    monkeypatch.setenv(budget.SECONDS_ENV, "42")
    assert (budget.memory_limit(), budget.seconds_limit()) == (3 << 30, 42.0)
    with budget.limits(memory=1 << 20):
        assert (budget.memory_limit(), budget.seconds_limit()) == (1 << 20, 42.0)
        with budget.limits(seconds=5):
            assert (budget.memory_limit(), budget.seconds_limit()) == (1 << 20, 5)
        assert budget.seconds_limit() == 42.0
    assert budget.memory_limit() == 3 << 30


def test_check_passes_work_inside_the_limits_and_refuses_the_rest():
    small = budget.Estimate("small", 1 << 20, 1.0)
    with budget.limits(memory=2 << 20, seconds=2):
        assert budget.check(small, "never") is small
        with pytest.raises(BudgetError) as info:
            budget.check(budget.Estimate("probe of x at 9 keys", 3 << 20, 3.0), "use a smaller --keys")
    message = str(info.value)
    assert "\n" not in message and message.startswith("probe of x at 9 keys: about 3.0 MiB and 3.0 s")
    assert "memory limit 2.0 MiB" in message and "time limit 2.0 s" in message
    assert message.endswith("use a smaller --keys") and "--max-memory" in message and "--max-seconds" in message


def test_probe_estimate_grows_with_the_shapes_and_the_tier():
    shapes = {"prefill": (100, 100), "decode": (1, 101)}
    cpu = budget.probe_estimate("p", shapes, ("prefill", "decode"), ["reference"])
    interpreted = budget.probe_estimate("p", shapes, ("prefill", "decode"), ["aiter-triton-interpreter"])
    gpu = budget.probe_estimate("p", shapes, ("prefill", "decode"), ["reference"], device="cuda")
    decode_only = budget.probe_estimate("p", shapes, ("decode",), ["reference"])
    assert gpu.seconds < cpu.seconds < interpreted.seconds and decode_only.seconds < cpu.seconds
    assert cpu.bytes == 4 * 100 * 100 * budget.PROBE_CELL_BYTES
    assert decode_only.bytes == 4 * 101 * budget.PROBE_CELL_BYTES
