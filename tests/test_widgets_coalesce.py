"""The coalescer both explorers redraw through: newest value only, in order, never wedged by a failing redraw.

Time is a fake clock: a heap of timers, and a redraw that moves the clock on by its cost. ipywidgets' messages
are timers at their arrival times, so the ones that arrive during a redraw are read after it, as in a kernel.
The widgets' own tests freeze the coalescer's clock, so that every value counts as queued behind a redraw.
"""

from __future__ import annotations

import asyncio
import heapq
import html
import io
import itertools
import math
import random

import pytest

import swa_kit.widgets._coalesce as coalesce
from swa_kit.widgets._coalesce import BACKLOG_S, SETTLE_S, Coalescer, after_waiting_messages


def _decodes_as_frame(image) -> bool:
    """The Image widget holds a whole image file in the format it declares (the panel's frame format)."""
    from PIL import Image

    from swa_kit.widgets._panel import FRAME_FORMAT

    data = bytes(image.value)
    return image.format == FRAME_FORMAT and Image.open(io.BytesIO(data)).format.lower() == FRAME_FORMAT


class FakeLoop:
    """Timers on a fake clock, run in time order; a callback may move the clock on (a redraw's cost)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, object]] = []
        self._order = itertools.count()

    def call_at(self, when: float, callback) -> None:
        heapq.heappush(self._timers, (when, next(self._order), callback))

    def schedule(self, callback) -> None:
        """The coalescer's schedule, as :func:`after_waiting_messages` does it on a kernel's loop."""
        self.call_at(self.now + SETTLE_S, callback)

    def run(self) -> None:
        while self._timers:
            when, _, callback = heapq.heappop(self._timers)
            self.now = max(self.now, when)  # a message that arrived during a redraw is read after it
            callback()


class Recorder:
    """A fake redraw: records (start, end, value) and costs ``cost(value)`` seconds of fake time."""

    def __init__(self, loop: FakeLoop, cost=lambda value: 0.05, fail=lambda value: False) -> None:
        self.loop, self.cost, self.fail = loop, cost, fail
        self.runs: list[tuple[float, float, object]] = []

    def __call__(self, value) -> None:
        start = self.loop.now
        self.loop.now += self.cost(value)
        self.runs.append((start, self.loop.now, value))
        if self.fail(value):
            raise ValueError(f"cannot draw {value}")


def _unexpected(error: Exception) -> None:
    raise AssertionError(f"unexpected redraw error: {error!r}")


def _drag(loop: FakeLoop, coalescer: Coalescer, arrivals: list[float]) -> None:
    for value, when in enumerate(arrivals):
        loop.call_at(when, lambda v=value: coalescer.submit(v))
    loop.run()


def _check_newest_only(runs: list[tuple[float, float, object]], arrivals: list[float]) -> None:
    """Each redraw draws the newest value read by its start; it starts when its first value is read, or SETTLE_S
    later if that value was read within BACKLOG_S of the last redraw's end (it had queued); no value newer than
    the last one drawn is left."""
    drawn = [value for _, _, value in runs]
    assert drawn == sorted(set(drawn)), "an older value drawn after a newer one, or a value drawn twice"
    assert drawn[-1] == len(arrivals) - 1, "the drag's last value was never drawn"
    previous_end, previous_value = float("-inf"), -1
    for start, end, value in runs:
        assert start >= previous_end, "two redraws overlapped"
        first_read = max(arrivals[previous_value + 1], previous_end)
        queued = first_read - previous_end < BACKLOG_S
        assert start == pytest.approx(first_read + (SETTLE_S if queued else 0.0)), (value, queued)
        if queued:  # drawn by the timer: the newest value read by then (one due at the same time was read first)
            assert value == max(v for v, when in enumerate(arrivals) if max(when, previous_end) <= start), value
        else:  # drawn at once, inside the observer of the value that came
            assert value == previous_value + 1, value
        previous_end, previous_value = end, value


@pytest.mark.parametrize("seed", range(40))
def test_a_drag_draws_the_newest_value_only(seed):
    rng = random.Random(seed)
    gaps = [rng.choice([0.0, 0.002, 0.008, 0.016, 0.05, 0.2]) for _ in range(rng.randint(1, 60))]
    arrivals = list(itertools.accumulate(gaps))
    loop = FakeLoop()
    redraw = Recorder(loop, cost=lambda value: rng.uniform(0.001, 0.12))
    coalescer = Coalescer(redraw, _unexpected, loop.schedule, clock=lambda: loop.now)
    _drag(loop, coalescer, arrivals)
    _check_newest_only(redraw.runs, arrivals)
    assert coalescer.idle and coalescer.redraws == len(redraw.runs)


def test_a_fast_drag_costs_few_redraws():
    arrivals = [0.010 * i for i in range(40)]  # 40 values 10 ms apart, 50 ms a redraw
    loop = FakeLoop()
    redraw = Recorder(loop)
    _drag(loop, Coalescer(redraw, _unexpected, loop.schedule, clock=lambda: loop.now), arrivals)
    _check_newest_only(redraw.runs, arrivals)
    assert 1 < len(redraw.runs) <= 2 + math.ceil(arrivals[-1] / (0.05 + SETTLE_S))  # not 40


def test_values_apart_in_time_are_each_drawn_in_order():
    loop = FakeLoop()
    redraw = Recorder(loop, cost=lambda value: 0.01)
    _drag(loop, Coalescer(redraw, _unexpected, loop.schedule, clock=lambda: loop.now), [0.0, 0.1, 0.2, 0.3])
    assert [value for _, _, value in redraw.runs] == [0, 1, 2, 3]


def test_a_failing_redraw_is_reported_and_the_next_value_still_drawn():
    loop = FakeLoop()
    redraw = Recorder(loop, fail=lambda value: value in (0, 3))
    errors: list[Exception] = []
    coalescer = Coalescer(redraw, errors.append, loop.schedule, clock=lambda: loop.now)
    arrivals = [0.0, 0.01, 0.02, 0.2, 0.21]  # 1 and 2 arrive while 0 fails; 4 while 3 fails
    _drag(loop, coalescer, arrivals)
    assert [value for _, _, value in redraw.runs] == [0, 2, 3, 4]
    assert [str(e) for e in errors] == ["cannot draw 0", "cannot draw 3"]
    assert coalescer.idle


def test_an_error_handler_that_raises_does_not_wedge_it():
    loop = FakeLoop()
    redraw = Recorder(loop, fail=lambda value: value == 0)

    def on_error(error: Exception) -> None:
        raise RuntimeError("the panel is gone") from error

    coalescer = Coalescer(redraw, on_error, loop.schedule, clock=lambda: loop.now)
    with pytest.raises(RuntimeError, match="the panel is gone"):
        coalescer.submit(0)  # nothing drawn just before: drawn at once, and the handler's error comes out here
    assert coalescer.idle
    coalescer.submit(1)  # right after the failed redraw: queued, drawn by the loop
    assert not coalescer.idle
    loop.run()
    assert [value for _, _, value in redraw.runs] == [0, 1] and coalescer.idle


def test_without_an_event_loop_each_value_is_drawn_at_once():
    drawn: list[int] = []

    def redraw(value: int) -> None:
        drawn.append(value)
        if value == 1:  # a redraw that moves a control itself: drawn right after, not inside
            coalescer.submit(2)
            assert drawn == [1]

    coalescer: Coalescer[int] = Coalescer(redraw, _unexpected)
    coalescer.submit(1)
    assert drawn == [1, 2] and coalescer.idle
    coalescer.submit(5)
    assert drawn == [1, 2, 5]


def test_on_a_running_loop_values_right_after_a_redraw_wait_for_the_rest_of_the_queue():
    async def drag() -> list[int]:
        drawn: list[int] = []
        coalescer: Coalescer[int] = Coalescer(drawn.append, _unexpected, clock=lambda: 0.0)  # all at one moment
        for value in range(20):
            coalescer.submit(value)
        assert drawn == [0] and not coalescer.idle  # the first at once; the rest came right after it
        await asyncio.sleep(20 * SETTLE_S)  # the coalescer's timer (SETTLE_S) comes due first
        return drawn

    assert asyncio.run(drag()) == [0, 19]


def test_after_waiting_messages_without_a_loop_runs_now():
    ran: list[bool] = []
    after_waiting_messages(lambda: ran.append(True))
    assert ran == [True]


@pytest.fixture
def frozen_clock(monkeypatch):
    """Every value counts as arriving right after the last redraw, as values queued behind it do."""
    monkeypatch.setattr(coalesce, "monotonic", lambda: 0.0)


def test_stepper_draws_a_burst_of_steps_once_on_a_running_loop(frozen_clock):
    from swa_kit.widgets.pools import decode_step_state, decode_stepper

    async def drag() -> tuple[list[str], str]:
        box = decode_stepper(4, 8)
        slider, panel = box.children
        text = panel.children[0]
        shown: list[str] = []
        text.observe(lambda change: shown.append(html.unescape(change["new"])), names="value")
        for step in range(1, 9):
            slider.value = step
        before = list(shown)
        await asyncio.sleep(20 * SETTLE_S)
        return shown, before

    shown, before = asyncio.run(drag())
    want = [f"<pre>{decode_step_state(step, 4, 8)['text']}</pre>" for step in (1, 8)]
    assert before == want[:1]  # the first step at once, the seven queued behind it not yet
    assert shown == want


def test_mask_explorer_draws_a_burst_of_moves_once_on_a_running_loop(frozen_clock):
    from swa_kit.widgets.masks import explore, mask_explorer

    async def drag() -> list[str]:
        box = mask_explorer(mode="extend", window=4, q_len=6, kv_len=16)
        window_slider, _chunk = box.children[1].children
        kv_len = box.children[2].children[1]
        text = box.children[3].children[0]
        shown: list[str] = []
        text.observe(lambda change: shown.append(html.unescape(change["new"])), names="value")
        for window in range(5, 12):
            window_slider.value = window
        kv_len.value = 20  # another control in the same burst: one redraw with both values
        await asyncio.sleep(20 * SETTLE_S)
        return shown

    assert asyncio.run(drag()) == [f"<pre>{explore('extend', 5, 6, 16)[1]}</pre>",
                                   f"<pre>{explore('extend', 11, 6, 20)[1]}</pre>"]


def test_a_failing_redraw_shows_the_error_and_the_widget_keeps_working(monkeypatch):
    import swa_kit.widgets.pools as pools

    box = pools.decode_stepper(4, 3)
    slider, panel = box.children
    text, occupancy, _ = panel.children
    real = pools.decode_step_state

    def broken_at_two(step, *args):
        if step == 2:
            raise RuntimeError("no snapshot for step 2")
        return real(step, *args)

    monkeypatch.setattr(pools, "decode_step_state", broken_at_two)
    slider.value = 2
    assert "Could not redraw: RuntimeError: no snapshot for step 2" in html.unescape(text.value)
    assert occupancy.layout.display == "none"
    slider.value = 3
    assert html.unescape(text.value) == f"<pre>{real(3, 4, 3)['text']}</pre>"
    assert occupancy.layout.display is None and _decodes_as_frame(occupancy)
