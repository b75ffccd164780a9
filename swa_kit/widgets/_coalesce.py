"""Redraw the newest value only: a fast drag's values that queued behind a redraw are dropped, not each drawn.

ipywidgets calls an observer once per value it receives, and a redraw takes tens of milliseconds. Values that
arrive during a redraw wait in the kernel's queue; redrawn one by one, the last value of a drag waits for all of
them. A :class:`Coalescer` draws a value at once when nothing was drawn just before it (so the kernel reports
the message done only once its picture is sent, which is when ipywidgets' frontend sends the newest value it
held back); a value read right after a redraw ended was queued behind it, so the coalescer waits a moment for
the rest of the queue and draws only the newest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic
from typing import Generic, TypeVar

T = TypeVar("T")

Schedule = Callable[[Callable[[], None]], object]

# ipywidgets' frontend keeps one message in flight per control and sends the newest value it held back once the
# kernel reports the last one handled; for it, drawing at once is best (the report goes out after the picture).
# Other senders (or a burst from code) queue values: in ipykernel 7.4, measured on 2 busy cores, a value queued
# behind a redraw reaches the observer 0.6 to 9.5 ms after the redraw ends. A value read within BACKLOG_S of a
# redraw's end is taken as queued, and SETTLE_S later the newest value read by then is drawn. SETTLE_S > BACKLOG_S:
# a frontend that answers within BACKLOG_S has its newest value in before the redraw starts, never behind it.
# Why a timer and not call_soon: asyncio runs call_soon callbacks before its next turn's socket reads, so every
# queued value was drawn (measured: 40 values sent 10 ms apart, 50 ms a redraw: 40 redraws; 9 to 11 with a 5 ms timer).
BACKLOG_S = 0.010
SETTLE_S = 0.015


def after_waiting_messages(callback: Callable[[], None]) -> None:
    """Run ``callback`` on the running event loop (the kernel's) once the messages already waiting are read;
    with no running loop (a script, a test), run it now."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        callback()
    else:
        loop.call_later(SETTLE_S, callback)


class Coalescer(Generic[T]):
    """Calls ``redraw(value)`` for the newest submitted value, one redraw at a time, never an older value after
    a newer one.

    A value submitted more than ``BACKLOG_S`` after the last redraw ended is drawn at once; one submitted sooner
    (or during a redraw, from the redraw itself) is drawn when ``schedule`` runs the pending redraw (default
    :func:`after_waiting_messages`), with whatever value is newest by then. A redraw that raises is handed to
    ``on_error`` (a widget shows it) and later values are drawn as usual: one bad value never stops the widget.
    ``clock`` (default :func:`time.monotonic`) says how long ago the last redraw ended.
    """

    _NOTHING = object()

    def __init__(self, redraw: Callable[[T], object], on_error: Callable[[Exception], object],
                 schedule: Schedule = after_waiting_messages, clock: Callable[[], float] | None = None) -> None:
        self._redraw, self._on_error, self._schedule = redraw, on_error, schedule
        self._clock = clock or monotonic
        self._pending: object = self._NOTHING
        self._scheduled = self._running = False
        self._last_end = float("-inf")
        self.redraws = 0  # redraws started, for benchmarks and tests

    @property
    def idle(self) -> bool:
        """Nothing pending, scheduled or running."""
        return self._pending is self._NOTHING and not self._scheduled and not self._running

    def submit(self, value: T) -> None:
        """Make ``value`` the one to draw next, replacing any value not drawn yet; draw it now if nothing was
        drawn just before."""
        self._pending = value
        if self._scheduled or self._running:
            return  # the pending redraw, or the end of the running one, draws it
        if self._clock() - self._last_end < BACKLOG_S:
            self._schedule_drain()
        else:
            self._drain()

    def _schedule_drain(self) -> None:
        self._scheduled = True
        self._schedule(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self._running or self._pending is self._NOTHING:
            return
        value, self._pending = self._pending, self._NOTHING
        self._running = True
        self.redraws += 1
        try:
            self._redraw(value)  # type: ignore[arg-type]  # only submit() sets _pending, with a T
        except Exception as error:  # noqa: BLE001  # shown by on_error; the widget must keep working
            self._on_error(error)
        finally:
            self._running = False
            self._last_end = self._clock()
            if self._pending is not self._NOTHING:
                self._schedule_drain()  # submitted during the redraw, by the redraw itself
