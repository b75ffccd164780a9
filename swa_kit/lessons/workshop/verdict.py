"""What every exercise check answers the learner, shared by the notebooks' check modules.

A ``check_*`` function takes the learner's answer and returns a :class:`Verdict`; an answer left as ``...``
gets "not answered yet", so the exercise versions of the notebooks run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swa_kit.errors import UsageError


@dataclass(frozen=True)
class Verdict:
    """A check's answer to the learner: right (True), wrong (False) or not answered yet (None)."""

    exercise: str
    ok: bool | None
    message: str

    def __str__(self) -> str:
        mark = {True: "right", False: "not yet right", None: "not answered yet"}[self.ok]
        return f"Exercise {self.exercise}: {mark}. {self.message}"

    __repr__ = __str__


def unanswered(exercise: str, answer: Any, how: str) -> Verdict | None:
    """The "not answered yet" verdict while ``answer`` is still ``...`` (replace it with ``how``), else None."""
    return Verdict(exercise, None, f"Replace the ... with {how}, then run the cell again.") if answer is ... else None


def unanswered_number(exercise: str, answer: Any, example: str) -> Verdict | None:
    """The "not answered yet" verdict, or a UsageError for an answer that is not a number; None for a number."""
    if (missing := unanswered(exercise, answer, example)) is not None:
        return missing
    if not isinstance(answer, (int, float)) or isinstance(answer, bool):
        raise UsageError(f"answer {answer!r}: give a number, e.g. {example}")
    return None
