"""Every exercise check answers any input with a verdict, never a traceback; and exercise 4.3's check.

The robustness oracle is a fixed generator over answer types (garbage strings, the exercises' own words in any
case, None, bools, ints huge and small, floats inf and nan, numpy and torch scalars and arrays, nested lists,
tuples, sets, dicts with the right keys and wrong values or wrong keys): a fresh seed each run, at least 200
answers for every answer parameter of every ``check_*`` function found in ``swa_kit.lessons.workshop``.
"""

from __future__ import annotations

import inspect
import math
import random
import re
import string
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from swa_kit.engine.call_sites import SITES
from swa_kit.lessons.workshop import debugging, dispatch, drafts, engines, kernels, pools, story, verdict, windows
from swa_kit.lessons.workshop.verdict import Verdict
from swa_kit.window import CONVENTIONS

MODULES = (story, windows, pools, drafts, dispatch, kernels, debugging, engines)
CHECKS = sorted({(m.__name__.rsplit(".", 1)[1], name): fn for m in MODULES
                 for name, fn in inspect.getmembers(m, inspect.isfunction) if name.startswith("check_")}.items())
ANSWERS_PER_PARAMETER = 200

KEYS = [*story.TRIAGE_CASES, *drafts.SYMPTOMS, *CONVENTIONS, "EAGLE", "FROZEN_KV_MTP"]
WORDS = ["acceptance", "output", "draft", "target", "neither", "legacy", "naive", "fixed", "refused", *SITES]


def _word(rng: random.Random) -> str:
    word = rng.choice(WORDS)
    return rng.choice([word, word.upper(), word.title(), f"  {word} ", word[:-1]])


def _garbage(rng: random.Random) -> str:
    return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 12)))


def _scalar(rng: random.Random) -> Any:
    return rng.choice([
        lambda: rng.randint(-3, 2000), lambda: rng.choice([0, -1, 10**30, -(10**400)]),
        lambda: rng.uniform(-1e3, 1e3), lambda: rng.choice([math.inf, -math.inf, math.nan, -0.0, 1e308, 5e-324]),
        lambda: rng.choice([True, False]), lambda: None, lambda: ..., lambda: complex(1, 2), lambda: b"52",
        lambda: np.float32(rng.uniform(0, 100)), lambda: np.int64(rng.randint(0, 100)), lambda: np.bool_(True),
        lambda: np.float64(math.nan), lambda: torch.tensor(rng.randint(0, 100)), lambda: torch.tensor(math.inf),
        lambda: torch.tensor(rng.uniform(0, 100), dtype=torch.float16), lambda: torch.tensor(True),
        lambda: _garbage(rng), lambda: _word(rng), lambda: str(rng.randint(0, 100)), lambda: object(),
    ])()


def answer(rng: random.Random, depth: int = 0) -> Any:
    """One generated answer of a random type."""
    kind = rng.randrange(9 if depth < 2 else 1)
    if kind == 0:
        return _scalar(rng)
    if kind == 1:
        return [answer(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 2:
        return tuple(rng.randint(-2, 1100) for _ in range(rng.randint(0, 3)))
    if kind == 3:
        return {rng.randint(0, 60) for _ in range(rng.randint(0, 60))}
    if kind == 4:
        return rng.choice([np.arange(rng.randint(0, 6)), np.zeros((2, 2)), np.array(7), np.array(["a", "b"]),
                           torch.arange(rng.randint(0, 6)), torch.ones(2, 3), torch.tensor([1.5, math.nan])])
    if kind == 5:
        return [_word(rng) for _ in range(rng.randint(0, 5))]
    if kind == 6:  # the right keys (some dropped, some in another case), values of any type
        keys = rng.sample(KEYS, rng.randint(1, len(KEYS)))
        return {rng.choice([k, k.upper()]): answer(rng, depth + 1) for k in keys}
    if kind == 7:
        return {rng.choice([None, 3, _garbage(rng)]): answer(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return {k: rng.choice([_word(rng), rng.randint(0, 1100), None, (1023, 0)]) for k in rng.choice(
        [list(story.TRIAGE_CASES), list(drafts.SYMPTOMS), list(CONVENTIONS), ["EAGLE", "FROZEN_KV_MTP"]])}


def answer_parameters(check: Callable[..., Verdict]) -> list[str]:
    """The learner's answers: the parameters without a default (the others set up the exercise)."""
    return [p.name for p in inspect.signature(check).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]


def test_every_check_is_found():
    exercises = {fn(*[...] * len(answer_parameters(fn))).exercise for _, fn in CHECKS}
    assert exercises == {f"{n}.{i}" for n, count in enumerate((2, 3, 2, 2, 3, 2, 2, 2)) for i in range(1, count + 1)}


@pytest.mark.parametrize("check", [fn for _, fn in CHECKS], ids=[f"{m}.{n}" for (m, n), _ in CHECKS])
def test_any_answer_gets_a_verdict(check):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    names = answer_parameters(check)
    seen: dict[bool | None, int] = {}
    for _ in range(ANSWERS_PER_PARAMETER * len(names)):
        given = {name: answer(rng) for name in names}
        try:
            result = check(**given)
        except Exception as error:  # noqa: BLE001 (the point: report the answer that raised)
            pytest.fail(f"seed {seed}: {check.__name__}(**{given!r}) raised {type(error).__name__}: {error}")
        assert isinstance(result, Verdict) and result.ok in (True, False, None), (seed, given, result)
        assert str(result).startswith(f"Exercise {result.exercise}: "), result
        seen[result.ok] = seen.get(result.ok, 0) + 1
    assert seen.get(False, 0) > 0, (seed, seen)  # garbage was refused, not waved through


@pytest.mark.parametrize("garbage", ["abc", None, [[1]], {"a": 1}, math.nan, True, np.zeros((2, 2))])
def test_unreadable_answers_name_the_accepted_form(garbage):
    for (_, name), check in CHECKS:
        given = dict.fromkeys(answer_parameters(check), garbage)
        result = check(**given)
        assert result.ok is False and "I could not read" in result.message and ": give " in result.message, \
            (name, result)


@pytest.mark.parametrize("check", [fn for _, fn in CHECKS], ids=[f"{m}.{n}" for (m, n), _ in CHECKS])
def test_ellipsis_is_not_answered_yet_and_gives_no_value_away(check):
    result = check(**dict.fromkeys(answer_parameters(check), ...))
    assert result.ok is None and "..." in result.message
    assert not re.search(r"(?<![\w.])\d", result.message), result.message  # no number, not even an example


def test_readers_accept_numpy_and_torch_scalars_and_any_case():
    read = verdict.check("x")(lambda a: Verdict("x", True, repr(a)))
    assert verdict.number(np.float32(2.5)) == 2.5 and type(verdict.number(np.float32(2.5))) is float
    assert verdict.integer(torch.tensor(52)) == 52 and verdict.integer(52.0) == 52
    assert verdict.pair(np.array([1022, 0])) == (1022, 0) and verdict.pair(torch.tensor([3, 0])) == (3, 0)
    assert verdict.choice(" Legacy ", ["legacy", "naive"], "a resolver") == "legacy"
    assert verdict.names(("Decode.Unified",), SITES, "sites") == ["decode.unified"]
    assert read(1).ok is True


# -- exercise 4.3 -------------------------------------------------------------------------------


def _sliding_by_hand(layers: int) -> list[int]:
    """Gemma 3 and 4: every sixth layer is full, the others slide (their config.json's layer pattern)."""
    return [i for i in range(layers) if (i + 1) % 6 != 0]


def test_check_one_key_short_layers_gemma4_and_gemma3_after_the_way_out():
    gemma4 = _sliding_by_hand(60)
    assert len(gemma4) == 50
    shuffled = random.sample(gemma4, len(gemma4))
    assert dispatch.check_one_key_short_layers(shuffled).ok is True
    assert dispatch.check_one_key_short_layers(np.array(gemma4)).ok is True
    with_full = dispatch.check_one_key_short_layers(gemma4 + [5])
    assert with_full.ok is False and "full layer" in with_full.message
    dropped = dispatch.check_one_key_short_layers(shuffled[1:])
    assert dropped.ok is False and "1 short layers missing" in dropped.message
    assert dispatch.check_one_key_short_layers(list(range(60))).ok is False
    gemma3 = _sliding_by_hand(62)
    way_out = {"env": {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}}
    assert len(gemma3) == 52 and dispatch.check_one_key_short_layers(gemma3, "gemma3-27b", **way_out).ok is True
    assert dispatch.check_one_key_short_layers(gemma4, "gemma3-27b", **way_out).ok is False
    assert dispatch.check_one_key_short_layers(...).ok is None
    assert dispatch.check_one_key_short_layers("0-4, 6-10").ok is False
