"""Notebook 01, window conventions and masks: one window in every API's convention, the keys each API attends when
handed a value unconverted, and the keys a draft token of an EAGLE tree attends.
"""

from __future__ import annotations

from typing import Any

from swa_kit.errors import UsageError
from swa_kit.lessons.workshop.verdict import Verdict, unanswered
from swa_kit.masks import forward_mask
from swa_kit.models.configs import load_model
from swa_kit.window import Window, naive_reads


def window_everywhere(model: str = "gemma3-27b") -> dict[str, Any]:
    """Exercise 1.1: the model's sliding window written in every API's convention."""
    spec = load_model(model)
    return Window(spec.window_keys(spec.swa_attention_layer_ids[0])).everywhere()


def _as_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _check_dict(exercise: str, answer: Any, truth: dict[str, Any], what: str, hint: str) -> Verdict:
    """Compare a learner's ``{convention: value}`` dict with ``truth``; name the first wrong entry."""
    if not isinstance(answer, dict) or set(answer) != set(truth):
        raise UsageError(f"answer {answer!r}: give a dict with exactly the keys {sorted(truth)} ({what})")
    wrong = [name for name in truth if _as_value(answer[name]) != truth[name]]
    if not wrong:
        return Verdict(exercise, True, f"All {len(truth)} {what} are right.")
    return Verdict(exercise, False, f"{len(wrong)} of {len(truth)} wrong, e.g. {wrong[0]!r}: "
                                    f"{answer[wrong[0]]!r}. {hint}")


def check_window_everywhere(answer: Any, model: str = "gemma3-27b") -> Verdict:
    """Exercise 1.1: ``{convention: value}`` for every API of :data:`swa_kit.window.CONVENTIONS`."""
    if (missing := unanswered("1.1", answer, "a dict {convention: value}")) is not None:
        return missing
    return _check_dict("1.1", answer, window_everywhere(model), "window values",
                       "Count the keys each value lets a query see (the table above gives each API's rule).")


def keys_if_passed_unconverted(keys: int, held_in: str = "hf") -> dict[str, int | None | str]:
    """Exercise 1.2: a window of ``keys`` keys, held as ``held_in`` writes it, handed to every API unconverted.

    Returns the keys each API then attends; ``None``: the API reads the value as "no window"; a
    string: the API refuses the value (its error message).
    """
    return {r.convention: (r.error if r.error else r.keys) for r in naive_reads(keys, held_in)}


def check_unconverted(answer: Any, keys: int = 1024, held_in: str = "hf") -> Verdict:
    """Exercise 1.2: ``{convention: keys attended}`` when ``keys`` held as ``held_in`` is passed to every API as is."""
    if (missing := unanswered("1.2", answer, "a dict {convention: keys attended}")) is not None:
        return missing
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


def check_tree_keys(answer: Any, token: int = 3) -> Verdict:
    """Exercise 1.3: the sorted KV columns draft ``token`` of :data:`TREE` attends."""
    if (missing := unanswered("1.3", answer, "a list of KV column indices")) is not None:
        return missing
    if not isinstance(answer, (list, tuple, set)) or not all(isinstance(c, int) for c in answer):
        raise UsageError(f"answer {answer!r}: give the KV columns as a list of ints, e.g. [5, 6, 8]")
    truth = tree_keys_seen(token)
    if sorted(answer) == truth:
        return Verdict("1.3", True, f"Draft token {token} attends {len(truth)} keys: the window's committed "
                                    "tokens, its ancestors and itself.")
    extra, missed = sorted(set(answer) - set(truth)), sorted(set(truth) - set(answer))
    return Verdict("1.3", False, f"listed but not attended: {extra}; attended but not listed: {missed}. A draft "
                                 "token sits at position prefix + depth, sees its ancestors (never a sibling), and "
                                 "the window counts them.")
