"""Notebook 01, window conventions and masks: one window in every API's convention, the keys each API attends when
handed a value unconverted, and the keys a draft token of an EAGLE tree attends.
"""

from __future__ import annotations

from typing import Any

from swa_kit.errors import UsageError
from swa_kit.lessons.workshop.verdict import Verdict, check, integer, integers, mapping, pair
from swa_kit.masks import forward_mask
from swa_kit.models.configs import load_model
from swa_kit.window import Window, naive_reads


def window_everywhere(model: str = "gemma3-27b") -> dict[str, Any]:
    """Exercise 1.1: the model's sliding window written in every API's convention."""
    spec = load_model(model)
    return Window(spec.window_keys(spec.swa_attention_layer_ids[0])).everywhere()


_WINDOW_VALUE = "None (no window), a whole number, a (left, right) pair, or 'refused'"


def _window_value(value: Any) -> Any:
    """One API's window value as a learner writes it: None, a whole number, a pair, or "refused"."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().casefold() == "refused":
        return "refused"
    if isinstance(value, (list, tuple)) or getattr(value, "ndim", None) == 1:
        return pair(value, _WINDOW_VALUE)
    return integer(value, _WINDOW_VALUE)


def _check_dict(exercise: str, answer: Any, truth: dict[str, Any], what: str, hint: str) -> Verdict:
    """Compare a learner's ``{convention: value}`` dict with ``truth``; name the first wrong entry.

    An API that refuses the value (``truth`` holds its error message) is answered with ``"refused"``.
    """
    answer = mapping(answer, truth, _window_value, f"a dict with exactly the keys {sorted(truth)} ({what}), each "
                                                   f"{_WINDOW_VALUE}")
    expected = {name: "refused" if isinstance(value, str) else value for name, value in truth.items()}
    wrong = [name for name in truth if answer[name] != expected[name]]
    if not wrong:
        return Verdict(exercise, True, f"All {len(truth)} {what} are right.")
    return Verdict(exercise, False, f"{len(wrong)} of {len(truth)} wrong, e.g. {wrong[0]!r}: "
                                    f"{answer[wrong[0]]!r}. {hint}")


@check("1.1")
def check_window_everywhere(answer: Any, model: str = "gemma3-27b") -> Verdict:
    """Exercise 1.1: ``{convention: value}`` for every API of :data:`swa_kit.window.CONVENTIONS`."""
    return _check_dict("1.1", answer, window_everywhere(model), "window values",
                       "Count the keys each value lets a query see (the table above gives each API's rule).")


def keys_if_passed_unconverted(keys: int, held_in: str = "hf") -> dict[str, int | None | str]:
    """Exercise 1.2: a window of ``keys`` keys, held as ``held_in`` writes it, handed to every API unconverted.

    Returns the keys each API then attends; ``None``: the API reads the value as "no window"; a
    string: the API refuses the value (its error message).
    """
    return {r.convention: (r.error if r.error else r.keys) for r in naive_reads(keys, held_in)}


@check("1.2")
def check_unconverted(answer: Any, keys: int = 1024, held_in: str = "hf") -> Verdict:
    """Exercise 1.2: ``{convention: keys attended}`` when ``keys`` held as ``held_in`` is passed to every API as is.

    An API that reads the value as no window is answered with None, one that refuses it with ``"refused"``.
    """
    return _check_dict("1.2", answer, keys_if_passed_unconverted(keys, held_in), "key counts",
                       "An API that counts W - 1 reads the value as one key fewer than it attends.")


#: Exercise 1.3's tree: a complete binary tree of 7 draft tokens after 8 committed tokens, window 4 keys.
TREE: dict[str, Any] = {"parents": (-1, 0, 0, 1, 1, 2, 2), "prefix": 8, "window": 4}


def tree_keys_seen(token: int, parents: tuple[int, ...] = TREE["parents"], prefix: int = TREE["prefix"],
                   window: int = TREE["window"]) -> list[int]:
    """Exercise 1.3: the KV columns draft ``token`` attends in target verify of an EAGLE tree.

    Columns ``0 .. prefix - 1`` are committed tokens, ``prefix + i`` is draft token ``i``.
    """
    mask = forward_mask("tree", len(parents), prefix + len(parents), window, parents=parents)
    if not isinstance(token, int) or not 0 <= token < len(parents):
        raise UsageError(f"token {token!r}: give a draft token index in 0..{len(parents) - 1}")
    return mask.dense()[token].nonzero().flatten().tolist()


@check("1.3")
def check_tree_keys(answer: Any, token: int = 3) -> Verdict:
    """Exercise 1.3: the sorted KV columns draft ``token`` of :data:`TREE` attends."""
    answer = integers(answer, "the KV columns as a list of whole numbers")
    truth = tree_keys_seen(token)
    if sorted(answer) == truth:
        return Verdict("1.3", True, f"Draft token {token} attends {len(truth)} keys: the window's committed "
                                    "tokens, its ancestors and itself.")
    extra, missed = sorted(set(answer) - set(truth)), sorted(set(truth) - set(answer))
    return Verdict("1.3", False, f"listed but not attended: {extra}; attended but not listed: {missed}. A draft "
                                 "token sits at position prefix + depth, sees its ancestors (never a sibling), and "
                                 "the window counts them.")
