"""What every exercise check answers the learner, and the readers that turn any answer into a value or a verdict.

A ``check_*`` function is decorated with :func:`check` and reads each answer through one reader per answer kind
(:func:`number`, :func:`integer`, :func:`pair`, :func:`integers`, :func:`choice`, :func:`names`, :func:`mapping`).
A reader returns the answer as a plain Python value, or stops the check with a verdict: "not answered yet" while
the answer is still ``...``, "I could not read that: give ..." (naming the accepted form and vocabulary) for
anything else it cannot read. So a check answers every input with a :class:`Verdict`, never a traceback, and the
exercise versions of the notebooks run. numpy and torch scalars (and 0-d arrays) read as numbers; words are
matched without regard to case or surrounding spaces.
"""

from __future__ import annotations

import functools
import math
import numbers
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec

P = ParamSpec("P")


@dataclass(frozen=True)
class Verdict:
    """A check's answer to the learner: right (True), wrong or unreadable (False) or not answered yet (None)."""

    exercise: str
    ok: bool | None
    message: str

    def __str__(self) -> str:
        mark = {True: "right", False: "not yet right", None: "not answered yet"}[self.ok]
        return f"Exercise {self.exercise}: {mark}. {self.message}"

    __repr__ = __str__


class _Stop(Exception):
    """Raised by a reader to end a check with a verdict (caught by :func:`check`, never seen by the learner)."""

    def __init__(self, ok: bool | None, message: str) -> None:
        super().__init__(message)
        self.ok, self.message = ok, message


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong, _SHORT.maxlist, _SHORT.maxdict = 40, 40, 20, 6, 4


def _unreadable(answer: Any, what: str) -> _Stop:
    return _Stop(False, f"I could not read {_SHORT.repr(answer)}: give {what}.")


def _unanswered(answer: Any, what: str) -> None:
    if answer is ...:
        raise _Stop(None, f"Your answer goes where the ... is: {what}. Then run the cell again.")


def check(exercise: str) -> Callable[[Callable[P, Verdict]], Callable[P, Verdict]]:
    """Make a check function answer with a :class:`Verdict` whenever one of its readers stops it."""
    def decorate(function: Callable[P, Verdict]) -> Callable[P, Verdict]:
        @functools.wraps(function)
        def checked(*args: P.args, **kwargs: P.kwargs) -> Verdict:
            try:
                return function(*args, **kwargs)
            except _Stop as stop:
                return Verdict(exercise, stop.ok, stop.message)
        return checked
    return decorate


def _scalar(answer: Any) -> Any:
    """A numpy or torch scalar (or 0-d array / tensor) as its Python value; anything else unchanged."""
    if getattr(answer, "ndim", None) == 0 and callable(getattr(answer, "item", None)):
        return answer.item()
    return answer


def number(answer: Any, what: str = "a number, e.g. 42.5") -> float | int:
    """``answer`` as a finite int or float (a numpy or torch scalar reads as its value; a string does not)."""
    _unanswered(answer, what)
    value = _scalar(answer)
    if isinstance(value, str):
        raise _unreadable(answer, f"{what}, without quotes")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _unreadable(answer, what)
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past the largest float
        finite = False
    if not finite:
        raise _unreadable(answer, f"{what}, a finite one")
    return value if isinstance(value, int) else float(value)


def integer(answer: Any, what: str = "a whole number, e.g. 10") -> int:
    """``answer`` as an int; a float with no fraction (``52.0``) reads as one."""
    value = number(answer, what)
    if value != int(value):
        raise _unreadable(answer, what)
    return int(value)


def _items(answer: Any, what: str) -> list[Any]:
    """The elements of a list, tuple, set, 1-d numpy array or tensor; anything else is unreadable."""
    if isinstance(answer, (list, tuple, set, frozenset)):
        return list(answer)
    if getattr(answer, "ndim", None) == 1 and callable(getattr(answer, "tolist", None)):
        return list(answer.tolist())
    raise _unreadable(answer, what)


def integers(answer: Any, what: str = "a list of whole numbers, e.g. [5, 6, 8]") -> list[int]:
    """``answer`` as a list of ints (from a list, tuple, set, 1-d array or tensor)."""
    _unanswered(answer, what)
    items = _items(answer, what)
    if any(item is ... for item in items):
        raise _Stop(None, f"Your answer still holds a ...: give {what}.")
    try:
        return [integer(item, what) for item in items]
    except _Stop:
        raise _unreadable(answer, what) from None


def pair(answer: Any, what: str = "a (left, right) pair of whole numbers, e.g. (7, 0)") -> tuple[int, int]:
    """``answer`` as a pair of ints."""
    values = integers(answer, what)
    if len(values) != 2 or isinstance(answer, (set, frozenset)):
        raise _unreadable(answer, what)
    return values[0], values[1]


def _vocabulary(words: Iterable[str]) -> str:
    return ", ".join(repr(w) for w in words)


def _spelled(item: Any, words: list[str]) -> str | None:
    """The word of ``words`` that ``item`` spells, ignoring case and surrounding spaces; None if none."""
    if not isinstance(item, str):
        return None
    return {w.casefold(): w for w in words}.get(item.strip().casefold())


def choice(answer: Any, vocabulary: Iterable[str], what: str) -> str:
    """``answer`` as the word of ``vocabulary`` it spells, ignoring case and surrounding spaces."""
    words = list(vocabulary)
    what = f"{what}: one of {_vocabulary(words)}"
    _unanswered(answer, what)
    if (word := _spelled(answer, words)) is None:
        raise _unreadable(answer, what)
    return word


def names(answer: Any, vocabulary: Iterable[str], what: str) -> list[str]:
    """``answer`` as a list of words of ``vocabulary`` (a list, tuple or set of them; case ignored)."""
    words = list(vocabulary)
    what = f"{what}, each one of {_vocabulary(words)}"
    _unanswered(answer, what)
    if isinstance(answer, str):
        raise _unreadable(answer, f"a list, not one string: {what}")
    read = []
    for item in _items(answer, what):
        if (word := _spelled(item, words)) is None:
            raise _unreadable(item, what)
        read.append(word)
    return read


def mapping(answer: Any, keys: Iterable[str], read: Callable[[Any], Any], what: str) -> dict[str, Any]:
    """``answer`` as a dict with exactly ``keys`` (each key's case ignored), each value read by ``read``."""
    wanted = list(keys)
    _unanswered(answer, what)
    if not isinstance(answer, Mapping):
        raise _unreadable(answer, what)
    given: dict[str, Any] = {}
    for key, value in answer.items():
        if (canonical := _spelled(key, wanted)) is None:
            raise _unreadable(answer, f"{what}; {_SHORT.repr(key)} is not one of its keys")
        given[canonical] = value
    if missing := [k for k in wanted if k not in given]:
        raise _unreadable(answer, f"{what}; missing {_vocabulary(missing)}")
    return {key: read(given[key]) for key in wanted}
