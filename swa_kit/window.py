"""Sliding windows: one canonical unit and a converter for every API's convention.

Inside the kit a window is ``keys``: the number of keys one query attends, counting
itself; ``None`` means no window (plain causal attention). Query position ``q`` sees
key position ``k`` when ``q - keys < k <= q``, which is Hugging Face's
``sliding_window`` and the rule in :meth:`Window.attends`.

Every other API counts differently, usually one less, and each marks "off" with its
own sentinel. Those values exist only at the edge of the kit, in the converters of
:data:`CONVENTIONS`, each checked against the library's own code:

=================  ==================================================  ===========  ===========
name               parameter                                            W keys       off
=================  ==================================================  ===========  ===========
``hf``             HF config ``sliding_window``                         W            None
``sglang``         ``RadixAttention.sliding_window_size``               W - 1        -1
``flash_attn``     FlashAttention 2/3 ``window_size=(left, right)``     (W - 1, 0)   (-1, -1)
``aiter_ck``       aiter CK ``mha_batch_prefill_func`` ``window_size``  (W - 1, 0)   (-1, -1)
``flashinfer``     FlashInfer ``window_left``                           W - 1        -1
``aiter_unified``  aiter Triton ``unified_attention`` ``window_size``   (W - 1, 0)   (-1, -1)
``aiter_v1``       aiter ``paged_attention_v1`` ``sliding_window``      W            0
``flex``           FlexAttention mask_mod bound ``q - k < W``           W            None
``flash_attn_4``   FlashAttention 4 ``window_size=(left, right)``       (W - 1, 0)   (None, None)
``attention_gym``  attention-gym sliding-window mask ``q - kv <= w``    W - 1        None
=================  ==================================================  ===========  ===========

attention-gym's sliding-window ``mask_mod`` keeps ``q_idx - kv_idx <= w`` (with causal ``q_idx >= kv_idx``), so
its ``w`` attends ``w + 1`` keys: copying a model's ``W`` into it gives one key too many.

FlashAttention 4 also reads a pair whose ``left + right < 0`` as no window, so ``(-1, -1)`` (and, causal,
``(-1, 0)``) is "off" too (SGLang 0.5.23 ``kernels/ops/attention/flash_attn/cute/interface.py``
``_resolve_causal_local_window``; its ``flash_attention_v4.py`` maps ``(-1, -1)`` to ``(None, None)``).
"""

from __future__ import annotations

import ast
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from swa_kit.errors import WindowConventionError

Keys = int | None
#: The largest window (and position) the kit computes with: positions are int64 in numpy and torch.
MAX_KEYS = 2**62


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bad(convention: str, value: Any, why: str) -> WindowConventionError:
    return WindowConventionError(f"{convention}: invalid window value {value!r}: {why}")


def check_keys(keys: Any) -> Keys:
    """Validate a window in the canonical unit and return it as a plain int (or None)."""
    if keys is None:
        return None
    if not _is_int(keys):
        raise _bad("keys", keys, "a window is a whole number of keys (>= 1) or None for no window")
    if keys < 1:
        raise _bad(
            "keys", keys, "a query attends at least itself, so a window is >= 1 key; use None for no window"
        )
    if keys > MAX_KEYS:
        raise _bad("keys", keys, f"the kit's positions are 64-bit, so a window is at most 2**62 = {MAX_KEYS} keys; "
                                 "use None for no window")
    return int(keys)


def attends(q_pos: Any, k_pos: Any, keys: Any) -> Any:
    """The window rule, :meth:`Window.attends`, for ``keys`` as a number (checked: :func:`check_keys`) or held in a
    tensor: a compiled mask (FlexAttention's ``mask_mod``) reads a tensor as an input, where an int would be a
    constant of the compile, one compile per window."""
    if isinstance(keys, numbers.Number):  # a tensor's window is checked where it was made
        keys = check_keys(keys)
    causal = k_pos <= q_pos
    if keys is None:
        return causal
    return causal & (q_pos - k_pos < keys)


@dataclass(frozen=True)
class Window:
    """A sliding window in the kit's one unit: keys attended per query, counting itself."""

    keys: Keys

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", check_keys(self.keys))

    @classmethod
    def from_convention(cls, convention: str, value: Any) -> "Window":
        """Read ``value`` as ``convention`` writes it (see :data:`CONVENTIONS`)."""
        return cls(get_convention(convention).to_keys(value))

    def to(self, convention: str) -> Any:
        """This window as ``convention`` expects it."""
        return get_convention(convention).from_keys(self.keys)

    def attends(self, q_pos: Any, k_pos: Any) -> Any:
        """Whether a query at absolute position ``q_pos`` sees the key at ``k_pos``.

        Works elementwise on ints, numpy arrays and torch tensors (broadcasting).
        """
        return attends(q_pos, k_pos, self.keys)

    def first_key(self, q_pos: int) -> int:
        """The oldest key position a query at ``q_pos`` still sees."""
        return 0 if self.keys is None else max(0, q_pos - self.keys + 1)

    def first_keys(self, q_pos: Any) -> Any:
        """:meth:`first_key` of every position in a numpy array or torch tensor."""
        return q_pos * 0 if self.keys is None else (q_pos - self.keys + 1).clip(0)

    def everywhere(self) -> dict[str, Any]:
        """This window written in every convention, keyed by convention name."""
        return {name: conv.from_keys(self.keys) for name, conv in CONVENTIONS.items()}


@dataclass(frozen=True)
class Convention:
    """How one API writes a window: to and from the canonical ``keys``."""

    name: str
    parameter: str
    off: Any
    from_keys: Callable[[Keys], Any]
    to_keys: Callable[[Any], Keys]


def _minus_one_int(name: str, parameter: str) -> Convention:
    """``value = keys - 1``; -1 is off (SGLang's sliding_window_size, FlashInfer's window_left)."""

    def from_keys(keys: Keys) -> int:
        keys = check_keys(keys)
        return -1 if keys is None else keys - 1

    def to_keys(value: Any) -> Keys:
        if value is None and name == "sglang":
            return None  # RadixAttention stores a missing window as -1; both mean off
        if not _is_int(value):
            raise _bad(name, value, f"{parameter} is an int: keys - 1, or -1 for no window")
        if value == -1:
            return None
        if value < -1:
            raise _bad(name, value, f"{parameter} is keys - 1 (>= 0), or -1 for no window")
        return int(value) + 1

    return Convention(name, parameter, -1, from_keys, to_keys)


def _exact_int(name: str, parameter: str, off: Any) -> Convention:
    """``value = keys``; ``off`` (None or 0) is no window (HF, FlexAttention, paged_attention_v1)."""

    def from_keys(keys: Keys) -> Any:
        keys = check_keys(keys)
        return off if keys is None else keys

    def to_keys(value: Any) -> Keys:
        if value is None and off is None:
            return None
        if not _is_int(value):
            raise _bad(name, value, f"{parameter} is an int number of keys (>= 1), or {off!r} for no window")
        if value == off:
            return None
        if value < 1:
            raise _bad(name, value, f"{parameter} counts keys including the query (>= 1); {off!r} is no window")
        return int(value)

    return Convention(name, parameter, off, from_keys, to_keys)


def _left_right(name: str, parameter: str, off_left: Any, right_values: tuple) -> Convention:
    """``(left, right) = (keys - 1, 0)``: FlashAttention-style pairs, causal on the right."""
    off = (off_left, off_left)

    def from_keys(keys: Keys) -> tuple:
        keys = check_keys(keys)
        return off if keys is None else (keys - 1, 0)

    def to_keys(value: Any) -> Keys:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise _bad(name, value, f"{parameter} is a pair (left, right) = (keys - 1, 0), or {off!r}")
        left, right = value
        if isinstance(right, bool) or not (right is None or _is_int(right)) or right not in right_values:
            raise _bad(
                name,
                value,
                f"right = {right!r} looks ahead of the query; the kit models causal windows only, "
                f"so right must be one of {right_values}",
            )
        if left == off_left and (left is None or _is_int(left)):  # -1.0 or True is not the sentinel
            return None
        if not _is_int(left):
            raise _bad(name, value, f"left is an int number of earlier keys (>= 0), or {off_left!r} for none")
        if left < 0:
            raise _bad(name, value, f"left counts earlier keys, keys - 1 >= 0; {off_left!r} is no window")
        return int(left) + 1

    return Convention(name, parameter, off, from_keys, to_keys)


def _distance_bound(name: str, parameter: str) -> Convention:
    """``value = keys - 1``, the largest distance ``q - kv`` kept; None is off (attention-gym's mask)."""

    def from_keys(keys: Keys) -> Keys:
        keys = check_keys(keys)
        return None if keys is None else keys - 1

    def to_keys(value: Any) -> Keys:
        if value is None:
            return None
        if not _is_int(value) or value < 0:
            raise _bad(name, value, f"{parameter} is the largest distance q - kv kept (>= 0: keys - 1), or None")
        return int(value) + 1

    return Convention(name, parameter, None, from_keys, to_keys)


def _flash_attn_4() -> Convention:
    """FlashAttention 4: ``(keys - 1, 0)``; ``(None, None)``, ``(-1, -1)`` or ``(-1, 0)`` is off (causal)."""
    pair = _left_right("flash_attn_4", "FlashAttention 4 window_size", None, (0, None))

    def to_keys(value: Any) -> Keys:
        if isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_int(v) for v in value):
            left, right = value
            if right in (0, -1) and left < 0:  # causal sets right = 0; then left + right < 0 means no window
                return None
        return pair.to_keys(value)

    return Convention(pair.name, pair.parameter, pair.off, pair.from_keys, to_keys)


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        _exact_int("hf", "Hugging Face config sliding_window", None),
        _minus_one_int("sglang", "SGLang RadixAttention.sliding_window_size"),
        _left_right("flash_attn", "FlashAttention 2/3 window_size", -1, (0, -1)),
        _left_right("aiter_ck", "aiter CK mha_batch_prefill_func window_size", -1, (0, -1)),
        _minus_one_int("flashinfer", "FlashInfer window_left"),
        _left_right("aiter_unified", "aiter Triton unified_attention window_size", -1, (0, -1)),
        _exact_int("aiter_v1", "aiter paged_attention_v1 sliding_window", 0),
        _exact_int("flex", "FlexAttention mask_mod bound W in q - k < W", None),
        _flash_attn_4(),
        _distance_bound("attention_gym", "attention-gym sliding-window mask bound w in q - kv <= w"),
    )
}


def get_convention(name: str) -> Convention:
    """The convention called ``name``; a clear error lists the known ones."""
    try:
        return CONVENTIONS[name]
    except (KeyError, TypeError):
        known = ", ".join(CONVENTIONS)
        raise WindowConventionError(f"unknown window convention {name!r}; known: {known}") from None


def to_keys(convention: str, value: Any) -> Keys:
    """A window written in ``convention`` as the canonical number of keys."""
    return get_convention(convention).to_keys(value)


def from_keys(convention: str, keys: Keys) -> Any:
    """The canonical ``keys`` written in ``convention``."""
    return get_convention(convention).from_keys(keys)


def convert(value: Any, src: str, dst: str) -> Any:
    """Rewrite a window value from convention ``src`` to convention ``dst``."""
    return from_keys(dst, to_keys(src, value))


def parse_value(text: str, convention: str | None = None) -> Any:
    """Parse a window value as typed on a command line: 4095, -1, none, 4095,0 or (4095, 0).

    The value is not checked here: the convention's converter (or :class:`Window`) checks it.

    A lone ``none`` for a ``convention`` whose off value is ``(None, None)`` (FlashAttention 4) reads as that
    pair: on a command line both spell "no window".
    """
    cleaned = text.strip()
    if cleaned.lower() in {"none", "null"}:
        off = get_convention(convention).off if convention else None
        return off if off == (None, None) else None
    try:
        value = ast.literal_eval(cleaned.replace("null", "None").replace("none", "None"))
    except (ValueError, SyntaxError):
        raise WindowConventionError(
            f"cannot read window value {text!r}: give an int (4095), a pair (4095,0) or none"
        ) from None
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class NaiveRead:
    """One API given the number you hold as-is, instead of converting it."""

    convention: str
    wanted: object  # what the API should get for the window you mean
    passed: object  # what it gets when you pass your number unconverted
    keys: int | None  # keys it then attends (None = window off); None as well when ``error`` is set
    meant: int
    error: str | None = None

    @property
    def delta(self) -> int | None:
        """Keys attended minus keys meant; None when the value is rejected or switches the window off."""
        return None if self.error or self.keys is None else self.keys - self.meant


def naive_reads(keys: int, held_in: str = "hf") -> list[NaiveRead]:
    """For every API: the window ``keys`` written in ``held_in``, passed to it without conversion.

    ``held_in="hf"`` passes the config's ``sliding_window`` (W) everywhere: APIs counting ``W - 1``
    then attend one key more. ``held_in="sglang"`` passes ``sliding_window_size`` (W - 1): APIs
    counting W attend one key less, and with W = 1 ``paged_attention_v1`` reads 0 as "off".
    """
    checked = check_keys(keys)
    if checked is None:
        raise WindowConventionError("keys: invalid window value None: the trap needs a window; give keys >= 1")
    keys = checked
    held = from_keys(held_in, keys)
    number = held[0] if isinstance(held, tuple) else held
    reads = []
    for name, conv in CONVENTIONS.items():
        passed = (number, 0) if isinstance(conv.off, tuple) else number
        try:
            reads.append(NaiveRead(name, from_keys(name, keys), passed, to_keys(name, passed), keys))
        except WindowConventionError as error:
            reads.append(NaiveRead(name, from_keys(name, keys), passed, None, keys, str(error)))
    return reads
