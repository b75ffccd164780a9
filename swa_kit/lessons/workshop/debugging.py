"""Notebook 06, debugging a launch: the window argument a sliding layer gets at decode on SGLang's aiter backend,
and the first prompt position a window one key short changes.
"""

from __future__ import annotations

from typing import Any

import torch

from swa_kit.engine import routing
from swa_kit.lessons.workshop.verdict import Verdict, check, integer, pair
from swa_kit.window import Window


def decode_window_on_aiter(model: str = "gemma4-31b") -> dict[str, Any]:
    """What SGLang's aiter backend hands a sliding layer of ``model`` at decode (the kit's plan)."""
    layer = next(p for p in routing.plan(model, "decode", strict=False).layers if p.kind == "sliding")
    return {"window_arg": tuple(layer.window_arg), "attended_keys": layer.effective_keys,
            "intended_keys": layer.intended_keys}


@check("6.1")
def check_decode_window(window_arg: Any, attended_keys: Any, model: str = "gemma4-31b") -> Verdict:
    """Exercise 6.1: the window argument a sliding layer of ``model`` gets at decode on the aiter backend, and
    the keys it then attends."""
    window_arg = pair(window_arg, "the window argument as a (left, right) pair of whole numbers")
    attended_keys = integer(attended_keys, "the keys the kernel attends, a whole number")
    truth = decode_window_on_aiter(model)
    right = [window_arg == truth["window_arg"], attended_keys == truth["attended_keys"]]
    if all(right):
        return Verdict("6.1", True, f"window_size={truth['window_arg']}: sliding_window_size is W - 1 and the call "
                                    f"site subtracts one more, so the kernel attends {truth['attended_keys']} of the "
                                    f"{truth['intended_keys']} keys the model was trained with.")
    hints = ["start from sliding_window_size (W - 1) and apply the unified call site's (sws - 1, 0)",
             "aiter's unified kernel attends 1 + left keys"]
    return Verdict("6.1", False, "; ".join(h for h, ok in zip(hints, right) if not ok) + ".")


def first_position_one_short_changes(window: int) -> int:
    """The first query position (0-based) that attends different keys under ``window`` and ``window - 1`` keys,
    from the two windows' masks (:meth:`swa_kit.window.Window.attends`)."""
    positions = torch.arange(2 * window)
    wide = Window(window).attends(positions[:, None], positions[None, :])
    narrow = Window(window - 1).attends(positions[:, None], positions[None, :])
    return int((wide != narrow).any(dim=1).nonzero()[0])


@check("6.2")
def check_first_changed_position(position: Any, window: int = 16) -> Verdict:
    """Exercise 6.2: the first prompt position whose logits can differ between a window of ``window`` keys and
    one of ``window - 1``."""
    position = integer(position, "a prompt position, a whole number")
    truth = first_position_one_short_changes(window)
    if position == truth:
        return Verdict("6.2", True, f"Position {truth}: the first query with more than {window - 1} keys behind it "
                                    "(itself included); every earlier one attends the same keys under both windows.")
    return Verdict("6.2", False, "count the keys a query at position p attends: p + 1 of them, until the window "
                                 "caps it.")
